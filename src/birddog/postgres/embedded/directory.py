"""The data directory made private and initialised: its modes, ``initdb``, the password.

Permissions are set on the data directory and what is inside it, never on a parent;
secrets are written 0600 from the moment they exist.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from birddog.postgres.embedded import programs
from birddog.postgres.embedded.account import check_reachable, server_account
from birddog.postgres.embedded.errors import EmbeddedServerError
from birddog.postgres.embedded.programs import COPY, Programs, copy_binaries

__all__ = ["SUPERUSER", "DataDirectory", "tighten", "write_private"]

SUPERUSER = "postgres"
"""The database superuser ``initdb`` creates."""


_HBA = """\
# Written by BirdDog: the server listens on its private unix socket only, and every
# connection must give the password (kept in the data directory's pgpass file).
local   all   all                 scram-sha-256
host    all   all   127.0.0.1/32  scram-sha-256
host    all   all   ::1/128       scram-sha-256
"""


class DataDirectory:
    """The data directory made private and initialised: its modes, ``initdb``, the password.

    Args:
        data_dir: BirdDog's data directory.
        programs: PostgreSQL's programs for it.
    """

    def __init__(self, data_dir: Path, programs: Programs) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "postgres"
        self.passfile = data_dir / "pgpass"
        self.programs = programs

    def prepare(self) -> None:
        """Own the data directory and, under root, check the server user can reach it."""
        account = server_account()
        if account is None:
            tighten(self.data_dir, 0o700)
            if self.pgdata.exists():
                tighten(self.pgdata, 0o700)
            return
        uid, gid = account
        check_reachable(self.data_dir.parent, account)
        if self.data_dir.stat().st_uid == 0:
            os.chown(self.data_dir, 0, gid)
            tighten(self.data_dir, 0o710)
        if self.programs.bin_dir != programs.POSTGRES_BIN_PATH:
            copy_binaries(self.data_dir / COPY)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.pgdata, uid, gid)
        tighten(self.pgdata, 0o700)

    def initdb(self) -> None:
        """Make the server's directory with a generated password (``scram-sha-256``)."""
        password = secrets.token_urlsafe(32)
        # initdb reads the password from a file; it lives inside the server's own 0700
        # directory (owned by the user initdb runs as) only while initdb runs.
        pwfile = self.data_dir / f".initdb-{secrets.token_hex(8)}"
        account = server_account()
        write_private(pwfile, password + "\n", owner=account)
        try:
            # Under root, prepare() made the (empty) directory for the server user.
            self.programs.run(
                "initdb",
                [
                    "-D",
                    str(self.pgdata),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
            )
        finally:
            pwfile.unlink(missing_ok=True)
        (self.pgdata / "pg_hba.conf").write_text(_HBA)
        self._write_passfile(password)

    def upgrade_trust(self) -> None:
        """Give a data directory made with ``trust`` (older BirdDog) a password."""
        password = secrets.token_urlsafe(32)
        # The server still trusts its socket here, so psql connects without a password;
        # the statement goes through stdin, never the command line.
        try:
            self.programs.run(
                "psql",
                ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.pgdata), "-U", SUPERUSER],
                stdin=f"ALTER ROLE {SUPERUSER} PASSWORD '{password}';\n",
                as_server=False,
            )
        except EmbeddedServerError:
            raise EmbeddedServerError(
                f"the server in {self.pgdata} requires a password but its password file "
                f"{self.passfile} is missing: restore that file, or move the data directory "
                "away to start afresh"
            ) from None
        (self.pgdata / "pg_hba.conf").write_text(_HBA)
        self._write_passfile(password)
        self.programs.pg_ctl(["reload"])

    def _write_passfile(self, password: str) -> None:
        write_private(self.passfile, f"*:*:*:{SUPERUSER}:{password}\n", owner=None)


def tighten(path: Path, mode: int) -> None:
    """Set the mode of a directory of ours (one another user owns is left alone)."""
    info = path.stat()
    if info.st_uid in (os.geteuid(), 0) and stat.S_IMODE(info.st_mode) != mode:
        path.chmod(mode)


def write_private(path: Path, text: str, *, owner: tuple[int, int] | None) -> None:
    """Write a file that is 0600 from the moment it exists (replacing any old one)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)
    temporary.replace(path)
