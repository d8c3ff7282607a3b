"""Who is running: drain daemons and workers record themselves for ``birddog status``.

:class:`birddog.postgres.reports.PostgresReports` reads the rows back.
"""

from __future__ import annotations

import os
import socket

import asyncpg

from birddog.postgres.sql import queries


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
        """Record that this process is alive."""
        await self.pool.execute(
            queries["daemon_seen"], self.daemon_id, self.kind, self.host, self.pid
        )

    async def gone(self) -> None:
        """Remove this process's row on a clean stop."""
        await self.pool.execute(queries["daemon_gone"], self.daemon_id)
