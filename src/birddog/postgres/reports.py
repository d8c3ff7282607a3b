"""What operators ask of the database: who is running, what is stuck, what died lately.

Read-only queries behind ``birddog status`` and ``birddog check``; the CLI formats them.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

from typing import Any

from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

DUE_COUNT_LIMIT = 10_000
"""``birddog check`` counts due replies up to this many (a backlog is not read in full)."""


class PostgresReports:
    """Operator reports over an asyncpg pool.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def _rows(self, name: str, *args: object) -> list[dict[str, Any]]:
        """The rows of the named query, as dicts; the query's name is the operation."""
        with store_errors(name):
            rows = await self.pool.fetch(queries[name], *args)
        return [dict(row) for row in rows]

    async def daemons_seen(self, *, within_s: float) -> list[dict[str, Any]]:
        """Daemons and workers that recorded themselves within ``within_s``, newest first.

        Args:
            within_s: how recent a heartbeat counts.

        Returns:
            One dict per process: ``daemon_id``, ``kind``, ``host``, ``pid``,
            ``started_at``, ``seen_at``.
        """
        return await self._rows("daemons_seen", within_s)

    async def stale_pending(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Pending, unheld replies created more than ``older_than_s`` ago, oldest first.

        Args:
            older_than_s: the age that counts as too long.
            limit: the most rows to return.

        Returns:
            One dict per row: ``key``, ``recipient_agent_id``, ``created_at``,
            ``attempts``, ``last_error``.
        """
        return await self._rows("check_stale_pending", older_than_s, limit)

    async def new_dead(self, *, within_s: float, limit: int) -> list[dict[str, Any]]:
        """Dead letters that died within ``within_s``, newest first.

        Args:
            within_s: how new a dead letter counts as new.
            limit: the most rows to return.

        Returns:
            One dict per dead letter: ``key``, ``recipient_agent_id``, ``dead_reason``,
            ``dead_at``.
        """
        return await self._rows("check_new_dead", within_s, limit)

    async def stale_queued(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Jobs nobody claimed within ``older_than_s``, the longest waiting first.

        Interactive jobs count from their enqueue; informational mail (reports, receipts)
        from its digest time, so mail waiting for its digest is not counted.

        Args:
            older_than_s: the age that counts as too long.
            limit: the most rows to return.

        Returns:
            One dict per job: ``job_id``, ``queue``, ``priority``, ``created_at``, ``kind``,
            ``digest_at`` (None for interactive jobs).
        """
        return await self._rows("check_stale_queued", older_than_s, limit)

    async def overdue_running(self, *, grace_s: float, limit: int) -> list[dict[str, Any]]:
        """Running jobs whose lease ended more than ``grace_s`` ago, longest overdue first.

        Args:
            grace_s: how long past its lease a job may run before it counts (the reaper's
                round).
            limit: the most rows to return.

        Returns:
            One dict per job: ``job_id``, ``queue``, ``worker_id``, ``lease_expires_at``.
        """
        return await self._rows("check_overdue_running", grace_s, limit)

    async def held_queues(self, *, limit: int) -> list[dict[str, Any]]:
        """Running jobs that hold their queue too long (``birddog.limits``), longest first.

        Held: started more than ``max_hold_s`` ago while other jobs wait in the queue, or a
        lease beyond ``max_lease_s`` from now (a row no claim of today could write).

        Args:
            limit: the most rows to return.

        Returns:
            One dict per job: ``job_id``, ``queue``, ``worker_id``, ``started_at``,
            ``lease_expires_at``, ``waiting`` (jobs queued behind it).
        """
        return await self._rows("check_held_queues", limit)

    async def long_holds(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Recipients held more than ``older_than_s``, longest first.

        Args:
            older_than_s: the hold that counts as too long.
            limit: the most rows to return.

        Returns:
            One dict per route: ``agent_id``, ``held_at``, ``waiting`` (pending replies).
        """
        return await self._rows("check_long_holds", older_than_s, limit)

    async def due_without_daemon(
        self, *, within_s: float, count_limit: int = DUE_COUNT_LIMIT
    ) -> dict[str, Any] | None:
        """Replies are due and no drain daemon beat within ``within_s``: the drain is dead.

        Args:
            within_s: how recent a daemon's heartbeat must be.
            count_limit: due replies are counted up to this many.

        Returns:
            ``due`` (count, up to ``count_limit``), ``oldest_due_at`` and
            ``last_seen_at`` (None when no daemon ever beat), or None when all is well.
        """
        with store_errors("check due without daemon"):
            row = await self.pool.fetchrow(
                queries["check_due_without_daemon"], within_s, count_limit
            )
        return None if row is None else dict(row)
