"""Who is running: drain daemons and workers record themselves for ``birddog status``.

:class:`birddog.postgres.reports.PostgresReports` reads the rows back.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import os
import socket

import asyncpg

from birddog.postgres.pool import store_errors
from birddog.postgres.sql import queries

EXPIRE_S = 3600.0
"""A daemon or worker row not refreshed for this long is deleted by any live process."""


class PostgresDaemons:
    """The ``birddog.daemons`` table: one row per running daemon or worker.

    Args:
        pool: the connection pool.
        kind: ``drain`` or ``worker``.
    """

    def __init__(self, pool: asyncpg.Pool, *, kind: str) -> None:
        self.pool = pool
        self.kind = kind
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.daemon_id = f"{kind}:{self.host}:{self.pid}"

    async def seen(self) -> None:
        """Record that this process is alive, and forget processes long gone.

        A daemon or worker killed without a clean stop leaves its row behind; any live
        process deletes rows not seen for :data:`EXPIRE_S` (but the last of each kind, so
        ``birddog check`` can still say when a daemon last ran), so the table never grows.
        """
        with store_errors("daemon seen"):
            await self.pool.execute(
                queries["daemon_seen"], self.daemon_id, self.kind, self.host, self.pid
            )
            await self.pool.execute(queries["daemons_expire"], EXPIRE_S)

    async def gone(self) -> None:
        """Mark this process's row stopped, on a clean stop (``birddog check`` says so)."""
        with store_errors("daemon gone"):
            await self.pool.execute(queries["daemon_gone"], self.daemon_id)
