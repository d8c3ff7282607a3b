"""Retention, opt-in: delete old receipts, settled jobs, dead letters and read mailbox rows.

BirdDog keeps everything until told otherwise (the contract keeps receipts as long as a
settlement can replay). ``birddog prune`` and the daemon's ``BIRDDOG_RETAIN_*`` settings
call :meth:`PostgresRetention.prune`, which deletes in small batches, one short
transaction each, so no long lock is held and a running daemon never waits on it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import LiteralString

from birddog.core.errors import InvalidInput
from birddog.core.retention import PruneReport, RetentionPolicy
from birddog.ports import Clock
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

__all__ = ["PRUNE_BATCH", "PostgresRetention", "PruneReport", "RetentionPolicy"]

PRUNE_BATCH = 1000
"""Rows deleted per statement (and so per transaction)."""


class PostgresRetention:
    """Deletes rows older than a retention policy, a batch per transaction.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
        clock: the current time; cut-offs are ``now - retention``.
        batch: rows deleted per statement.
    """

    def __init__(self, pool: Pool, *, clock: Clock, batch: int = PRUNE_BATCH) -> None:
        if batch < 1:
            raise InvalidInput("batch must be at least 1", field="batch")
        self.pool = pool
        self.clock = clock
        self.batch = batch

    async def prune(self, policy: RetentionPolicy) -> PruneReport:
        """Delete what the policy no longer keeps.

        Args:
            policy: how long each kind of row is kept.

        Returns:
            How many rows were deleted, by kind.

        Raises:
            StoreUnavailable: the database is unreachable; batches already deleted stay
                deleted.
        """
        now = self.clock.now()
        return PruneReport(
            receipts=await self._prune("prune_receipts", now, policy.receipts_s),
            jobs=await self._prune("prune_settled_jobs", now, policy.jobs_settled_s),
            dead_letters=await self._prune("prune_dead_letters", now, policy.dead_s),
            mailbox=await self._prune("prune_read_mailbox", now, policy.mailbox_read_s),
        )

    async def _prune(self, name: LiteralString, now: datetime, keep_s: float | None) -> int:
        if keep_s is None:
            return 0
        before = now - timedelta(seconds=keep_s)
        deleted = 0
        while True:
            with store_errors(name):
                status = await self.pool.execute(queries[name], before, self.batch)
            count = int(status.rsplit(" ", 1)[-1])
            deleted += count
            if count < self.batch:
                return deleted
