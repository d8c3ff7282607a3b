"""What operators ask of the database: who is running, what is stuck, what died lately.

Read-only queries behind ``birddog status`` and ``birddog check``; the CLI formats them.
"""

from __future__ import annotations

from typing import Any

from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries


class PostgresReports:
    """Operator reports over an asyncpg pool.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def daemons_seen(self, *, within_s: float) -> list[dict[str, Any]]:
        """Daemons and workers that recorded themselves within ``within_s``, newest first.

        Args:
            within_s: how recent a heartbeat counts.

        Returns:
            One dict per process: ``daemon_id``, ``kind``, ``host``, ``pid``,
            ``started_at``, ``seen_at``.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("daemons seen"):
            rows = await self.pool.fetch(queries["daemons_seen"], within_s)
        return [dict(row) for row in rows]

    async def stale_pending(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Pending, unheld replies created more than ``older_than_s`` ago, oldest first.

        Args:
            older_than_s: the age that counts as too long.
            limit: the most rows to return.

        Returns:
            One dict per row: ``key``, ``recipient_agent_id``, ``created_at``,
            ``attempts``, ``last_error``.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("check stale pending"):
            rows = await self.pool.fetch(queries["check_stale_pending"], older_than_s, limit)
        return [dict(row) for row in rows]

    async def new_dead(self, *, within_s: float, limit: int) -> list[dict[str, Any]]:
        """Dead letters that died within ``within_s``, newest first.

        Args:
            within_s: how new a dead letter counts as new.
            limit: the most rows to return.

        Returns:
            One dict per dead letter: ``key``, ``recipient_agent_id``, ``dead_reason``,
            ``dead_at``.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("check new dead"):
            rows = await self.pool.fetch(queries["check_new_dead"], within_s, limit)
        return [dict(row) for row in rows]
