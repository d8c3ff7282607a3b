"""Who is running: drain daemons and workers record themselves for ``birddog status``.

:class:`birddog.postgres.reports.PostgresReports` reads the rows back.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import os
import secrets
import socket

import asyncpg
import structlog

from birddog.postgres.pool import store_errors
from birddog.postgres.sql import queries

EXPIRE_S = 3600.0
"""A daemon or worker row not refreshed for this long is deleted by any live process.

The server's constant (``birddog.daemons_beat``), never the caller's: a login cannot
have another login's rows forgotten sooner.
"""

log = structlog.get_logger("birddog.daemons")


class PostgresDaemons:
    """The ``birddog.daemons`` table: one row per running daemon or worker.

    Every write goes through ``birddog.daemons_beat`` and ``birddog.daemons_stop``
    (``SECURITY DEFINER``): a row belongs to the login that registered it, and only an
    operator's login records a drain, so a worker's login can neither forge a drain nor
    age, stop or take over another login's row.

    Args:
        pool: the connection pool.
        kind: ``drain`` or ``worker``.
    """

    def __init__(self, pool: asyncpg.Pool, *, kind: str) -> None:
        self.pool = pool
        self.kind = kind
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.daemon_id = self._new_id()

    def _new_id(self) -> str:
        """Kind, host and pid, and a random part no other login can take before this one."""
        return f"{self.kind}:{self.host}:{self.pid}:{secrets.token_hex(4)}"

    async def seen(self) -> None:
        """Record that this process is alive, and forget processes long gone.

        A daemon or worker killed without a clean stop leaves its row behind; any live
        process deletes rows not seen for :data:`EXPIRE_S` (but the last of each kind, so
        ``birddog check`` can still say when a daemon last ran), so the table never grows.
        """
        if not await self._beat():
            # Another login holds a row of this id: this process takes another id.
            log.warning("daemon_row_taken", kind=self.kind)
            self.daemon_id = self._new_id()
            await self._beat()

    async def _beat(self) -> bool:
        with store_errors("daemon seen"):
            return bool(
                await self.pool.fetchval(
                    queries["daemons_beat"], self.daemon_id, self.kind, self.host, self.pid
                )
            )

    async def gone(self) -> None:
        """Mark this process's row stopped, on a clean stop (``birddog check`` says so)."""
        with store_errors("daemon gone"):
            await self.pool.fetchval(queries["daemons_stop"], self.daemon_id)
