"""The embedded server itself: started, stopped and restarted over its data directory."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Literal, Self
from urllib.parse import quote

from birddog.postgres.datadir import blocking_directory
from birddog.postgres.embedded import programs
from birddog.postgres.embedded.account import check_reachable, existing_account, server_account
from birddog.postgres.embedded.directory import SUPERUSER, DataDirectory
from birddog.postgres.embedded.errors import EmbeddedServerError
from birddog.postgres.embedded.programs import COPY, READY_TIMEOUT_S, Programs
from birddog.postgres.embedded.users import ServerUsers, alive

__all__ = ["SOCKET_PATH_MAX", "EmbeddedPostgres", "ShutdownMode"]

ShutdownMode = Literal["smart", "fast", "immediate"]
"""How ``pg_ctl`` stops the server: ``immediate`` is a crash without a checkpoint."""


SOCKET_PATH_MAX = 107
"""The longest unix socket path (``sun_path`` is 108 bytes with its NUL on Linux)."""

_PORT = 5432
_SOCKET_NAME = f".s.PGSQL.{_PORT}"


class EmbeddedPostgres:
    """A private PostgreSQL server in ``data_dir``, started and stopped by this object.

    Only the server this object started is ever stopped or restarted; if ``data_dir``
    already holds a running server (another process's), :meth:`start` uses it and
    :meth:`stop` leaves it running. Running the server is this class's; making its data
    directory private and initialised, running PostgreSQL's programs and counting the
    processes that use the server are parts of their own.

    Args:
        data_dir: BirdDog's data directory: created if missing (with its parents); the
            server's data goes in ``postgres/`` inside it (``initdb`` on first start).
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "postgres"
        self.passfile = self.data_dir / "pgpass"
        self._owned = False
        bin_dir = programs.POSTGRES_BIN_PATH
        account = existing_account()
        if (
            account is not None
            and blocking_directory(programs.POSTGRES_BIN_PATH, account) is not None
        ):
            # The server's user cannot reach the package's binaries: it runs the copy in
            # the data directory (made by DataDirectory.prepare before the first start).
            bin_dir = (
                self.data_dir / COPY / programs.POSTGRES_BIN_PATH.relative_to(programs.PACKAGES)
            )
        self._programs = Programs(self.data_dir, self.pgdata, bin_dir)
        self._directory = DataDirectory(self.data_dir, self._programs)
        self._users = ServerUsers(self.data_dir, stop=self._stop_if_running)

    def start(self) -> str:
        """Start the server, initialising (or upgrading) the data directory if needed.

        Returns:
            The DSN of the ``postgres`` database: the private socket and the password
            file, never the password itself.

        Raises:
            EmbeddedServerError: the server cannot be private here (a parent the server
                user cannot reach as root, a path too long for the socket), or
                ``initdb`` or ``pg_ctl`` failed (the message names the server log).
        """
        socket_path = self.pgdata / _SOCKET_NAME
        if len(os.fsencode(socket_path)) > SOCKET_PATH_MAX:
            raise EmbeddedServerError(
                f"the data directory's path is too long for the server's unix socket "
                f"({len(os.fsencode(socket_path))} bytes, at most {SOCKET_PATH_MAX}): "
                "choose a shorter BIRDDOG_DATA_DIR"
            )
        account = server_account()
        if account is not None:
            # Refused before anything is made: no directory, no lock file left behind.
            check_reachable(self.data_dir.parent, account)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        with self._users.lock():
            if self._running_pid() is not None:
                self._owned = False
            else:
                self._directory.prepare()
                if not (self.pgdata / "PG_VERSION").exists():
                    self._directory.initdb()
                self._programs.pg_ctl(
                    ["-w", "-t", str(int(READY_TIMEOUT_S)), *self._server_options(), "start"]
                )
                self._wait_ready()
                if not self.passfile.exists():
                    self._directory.upgrade_trust()
                self._owned = True
            self._users.register()
        return self.dsn()

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """Stop the server this object started; a no-op otherwise.

        Args:
            mode: the ``pg_ctl`` shutdown mode (``fast`` rolls back open transactions).
        """
        if not self._owned or self._running_pid() is None:
            return
        self._programs.pg_ctl(["-w", "-m", mode, "stop"])

    def restart(self, mode: ShutdownMode = "immediate") -> str:
        """Restart the server, by default as a crash (``pg_ctl restart -m immediate``).

        Every open connection is dropped; the server comes back with the same socket.

        Args:
            mode: the ``pg_ctl`` shutdown mode for the stop half.

        Returns:
            The DSN of the ``postgres`` database.

        Raises:
            RuntimeError: this object did not start the server.
        """
        if not self._owned:
            raise RuntimeError("restart() needs a server started by this EmbeddedPostgres")
        self._programs.pg_ctl(["-w", "-t", str(int(READY_TIMEOUT_S)), "-m", mode, "restart"])
        self._wait_ready()
        return self.dsn()

    def dsn(self, database: str = "postgres", *, running: bool = True) -> str:
        """The DSN of ``database`` on this server (no secret in it).

        Args:
            database: the database name.
            running: refuse when the server is not running (False: the DSN it has when
                it runs, e.g. for ``birddog uri`` to print while it is stopped).

        Returns:
            ``postgresql://postgres@/<database>?host=<socket dir>&passfile=<pgpass>``.

        Raises:
            RuntimeError: ``running`` and the server is not running.
        """
        if running and self._running_pid() is None:
            raise RuntimeError(f"no PostgreSQL server is running in {self.data_dir}")
        host = quote(str(self.pgdata), safe="/")
        passfile = quote(str(self.passfile), safe="/")
        return f"postgresql://{SUPERUSER}@/{database}?host={host}&passfile={passfile}"

    @property
    def bin_dir(self) -> Path:
        """The directory of the server's programs this instance runs.

        The package's own, or their copy in the data directory (made by the first
        :meth:`start`) when the server's user cannot reach the package's: as root under a
        0700 home.
        """
        return self._programs.bin_dir

    @property
    def started_here(self) -> bool:
        """Whether this object started the server (False when it found one running)."""
        return self._owned

    def users(self) -> list[int]:
        """The live processes that use the server (the last one to exit stops it)."""
        return self._users.alive()

    @property
    def pid(self) -> int | None:
        """The postmaster's process id, or None when the server is not running."""
        return self._running_pid()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _server_options(self) -> list[str]:
        # pg_ctl hands these to the server through /bin/sh, hence the quoting.
        settings = {
            "listen_addresses": "",
            "unix_socket_directories": str(self.pgdata),
            "unix_socket_permissions": "0700",
        }
        options = " ".join(
            f"-c {shlex.quote(f'{name}={value}')}" for name, value in settings.items()
        )
        return ["-l", str(self.pgdata / "log"), "-o", options]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            status = _postmaster_status(self.pgdata)
            if status is not None and status[1] == "ready":
                return
            time.sleep(0.05)
        raise EmbeddedServerError(
            f"the embedded server in {self.pgdata} was not ready within {READY_TIMEOUT_S:g} s "
            f"(the server log is {self.pgdata / 'log'})"
        )

    def _running_pid(self) -> int | None:
        status = _postmaster_status(self.pgdata)
        return status[0] if status is not None else None

    def _stop_if_running(self) -> None:
        """Stop the server, whoever started it (the last user's exit)."""
        if self._running_pid() is not None:
            self._programs.pg_ctl(["-w", "-m", "fast", "stop"])


def _postmaster_status(pgdata: Path) -> tuple[int, str] | None:
    """The running postmaster's pid and status from ``postmaster.pid``, or None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if not alive(pid):
        return None
    return pid, lines[7].strip() if len(lines) > 7 else ""
