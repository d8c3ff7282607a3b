"""The operators' and reapers' side of the job store: cancel, reap, look, repair.

What happens to jobs from outside their claims: an operator's cancellation, the reapers
(expired leases, jobs queued too long), the host sweep's turns, and the reads and repairs
of ``birddog jobs``. :class:`~birddog.postgres.jobs.PostgresJobs` holds one beside the
workers' side (:mod:`birddog.postgres.job_claims`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, LiteralString

import structlog

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidInput, JobNotFound, StoreUnavailable
from birddog.core.jobs import Job, JobState, check_stored_content
from birddog.core.lifecycle import LEASE_EXPIRED_DIAGNOSTIC, Settle, queued_too_long_settlement
from birddog.core.mail import Outcome
from birddog.core.text import shown_key
from birddog.core.turns import Turn
from birddog.postgres.job_config import JobStoreSettings
from birddog.postgres.job_rows import Row, job_from_row, note_unreadable, outcome_of, returned_row
from birddog.postgres.pool import is_refusal, store_errors
from birddog.postgres.sql import queries

__all__ = ["RECOVER_BATCH", "PostgresJobOperations"]

log = structlog.get_logger("birddog.jobs")

RECOVER_BATCH: Final = 100
"""Jobs handled per transaction by the reapers (:meth:`PostgresJobOperations.recover_expired`)."""


class PostgresJobOperations:
    """The operators' and reapers' side of the job store: cancel, reap, look, repair.

    Args:
        settings: the pool, limits and clock it shares with the workers' side.
    """

    def __init__(self, settings: JobStoreSettings) -> None:
        self.settings = settings

    # ---- operators -------------------------------------------------------------------

    async def cancel(self, *, job_id: str, content: str) -> Outcome | None:
        """Record that a job should be cancelled; a queued job settles at once.

        A queued job settles ``cancelled`` without ever running, and its replies carry
        ``content`` (same transaction). A running job keeps running until its worker
        settles or stops it; the recorded cancellation then wins, and heartbeats report
        it. The first cancellation's content is kept. A settled job is left alone.

        Args:
            job_id: the job.
            content: the cancellation result its replies carry (empty: the default text).

        Returns:
            The job's outcome when it is settled (``cancelled`` for a queued job), None
            while it is still running.

        Raises:
            InvalidInput: the content holds NUL or a lone surrogate; nothing is written.
            ContentTooLarge: the content is above ``max_content_bytes``.
            JobNotFound: no job has this id.
        """
        check_stored_content(content, limit_bytes=self.settings.limits.max_content_bytes)
        with store_errors("cancel"):
            row = returned_row(
                await self.settings.pool.fetchrow(
                    queries["jobs_cancel"],
                    job_id,
                    content,
                    self.settings.clock.now(),
                    self.settings.limits.max_content_bytes,
                    self.settings.schedule_wake,
                )
            )
        if row["decision"] == "missing":
            raise JobNotFound(f"no job has id {shown_key(job_id)}")
        note_unreadable(job_id, row)
        return outcome_of(row)

    async def get(self, job_id: str) -> Job:
        """The job with this id.

        Args:
            job_id: the job.

        Returns:
            The job as stored now.

        Raises:
            JobNotFound: no job has this id.
            UnreadableRow: the stored row is not a valid job (written by SQL).
        """
        with store_errors("get"):
            row = await self.settings.pool.fetchrow(queries["jobs_get"], job_id)
        if row is None:
            raise JobNotFound(f"no job has id {shown_key(job_id)}")
        return job_from_row(row)

    async def counts(self) -> dict[str, int]:
        """How many jobs are queued, running and settled.

        Returns:
            Counts by state; every state is present, zero when empty.
        """
        with store_errors("counts"):
            rows = await self.settings.pool.fetch(queries["jobs_counts"])
        counts = dict.fromkeys((state.value for state in JobState), 0)
        counts.update({row["state"]: row["jobs"] for row in rows})
        return counts

    async def not_yet_due(self) -> tuple[int, datetime | None]:
        """How many queued jobs wait for their ``not_before``, and the earliest of those times.

        Returns:
            The number of such jobs and the next time one becomes claimable (None: none).
        """
        with store_errors("not_yet_due"):
            row = await self.settings.pool.fetchrow(
                queries["jobs_not_yet_due"], self.settings.clock.now()
            )
        return (0, None) if row is None else (row["jobs"], row["next_at"])

    async def turns_since(self, since: datetime) -> list[dict[str, Any]]:
        """The turns settled since ``since``: by first mail's kind and how they ran.

        Args:
            since: the start of the window.

        Returns:
            ``kind``, ``how`` (``worker`` or ``live``), ``turns``, ``mails`` and
            ``spawns`` (agent processes started) per group.
        """
        with store_errors("turns_since"):
            rows = await self.settings.pool.fetch(queries["jobs_turns_since"], since)
        return [dict(row) for row in rows]

    async def turns_on_host(self, *, host: str, boot_id: str) -> list[tuple[str, Turn]]:
        """The recorded turns of running jobs on one host, in one boot of it.

        Args:
            host: the host name.
            boot_id: its boot.

        Returns:
            ``(job_id, turn)`` for each.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        with store_errors("turns_on_host"):
            rows = await self.settings.pool.fetch(queries["jobs_turns_on_host"], host, boot_id)
        return [
            (
                row["job_id"],
                Turn(
                    host=row["turn_host"],
                    boot_id=row["turn_boot_id"],
                    pid=row["turn_pid"],
                    start_ticks=row["turn_start_ticks"],
                ),
            )
            for row in rows
        ]

    async def repair_queue_heads(self) -> int:
        """Recompute the queue heads that differ from the jobs (written by hand, say).

        The heads (``birddog.queue_heads``) are what a claim reads to find the queues with
        work; BirdDog's own writes keep them right, so this finds nothing unless jobs were
        written by SQL. One pass over the queued and running jobs.

        Returns:
            How many queues' heads were repaired (logged ``queue_heads_repaired``).
        """
        with store_errors("repair_queue_heads"):
            repaired = int(await self.settings.pool.fetchval(queries["jobs_queue_heads_repair"]))
        if repaired:
            log.warning("queue_heads_repaired", queues=repaired)
        return repaired

    # ---- the reapers -----------------------------------------------------------------

    async def recover_expired(
        self, *, now: datetime | None = None, limit: int = RECOVER_BATCH
    ) -> list[tuple[str, str]]:
        """Handle running jobs whose lease ended a kill grace ago or more: their worker is gone.

        The grace (``kill_grace_s``) is what a vanished worker's supervisor takes to end
        the turn's processes, so no job runs again while a process of its last turn may
        still live. Each job is queued again while ``recovery_count < recovery.maxRecoveries``
        (``recovery_count`` + 1, claim cleared); otherwise it settles ``outcome_unknown``
        (nobody knows whether the work happened) and its replies are written. A job
        whose cancellation was recorded settles ``cancelled`` instead. One transaction per
        batch of ``limit`` jobs, until none is left; jobs another transaction holds (a
        worker settling right now) are skipped, and so is a job whose settlement the
        database refuses (logged ``job_reap_failed``), so it never blocks the others.

        Args:
            now: the time leases are judged at (default: the store's clock).
            limit: jobs per transaction.

        Returns:
            ``(job_id, what)`` for each job handled, ``what`` being ``requeued`` or the
            outcome it settled with (``outcome_unknown``, ``cancelled``).

        Raises:
            InvalidInput: ``limit`` is below 1.
            StoreUnavailable: the database could not be reached; batches already
                committed stay committed.
        """
        at = now or self.settings.clock.now()
        ended_by = at - timedelta(seconds=self.settings.kill_grace_s)
        return await self._reap(
            "lease_expired", queries["jobs_expired"], since=ended_by, now=at, limit=limit
        )

    async def cancel_queued_too_long(
        self, *, now: datetime | None = None, limit: int = RECOVER_BATCH
    ) -> list[tuple[str, str]]:
        """Cancel jobs no worker claimed within the maximum queued age (the bus's bounce).

        Each settles ``cancelled`` with a result that says so ("BirdDog cancelled this
        job: no worker claimed it within 24 h") and its replies fan out in the same
        transaction, so the sender hears back instead of waiting on silence. A job past
        its own expiry (``expires_in_s``) is cancelled the same way, sooner ("... within
        its expiry of 30 s"). Batches, locks and refused jobs as :meth:`recover_expired`.

        Args:
            now: the time ages are judged at (default: the store's clock).
            limit: jobs per transaction.

        Returns:
            ``(job_id, "cancelled")`` for each job cancelled.

        Raises:
            InvalidInput: ``limit`` is below 1.
            StoreUnavailable: the database could not be reached; batches already
                committed stay committed.
        """
        at = now or self.settings.clock.now()
        enqueued_by = at - timedelta(seconds=self.settings.limits.max_queued_s)
        return await self._reap(
            "queued_too_long",
            queries["jobs_queued_too_long"],
            since=enqueued_by,
            now=at,
            limit=limit,
            list_args=(at,),
        )

    async def _reap(
        self,
        event: str,
        list_query: LiteralString,
        *,
        since: datetime,
        now: datetime,
        limit: int,
        list_args: tuple[object, ...] = (),
    ) -> list[tuple[str, str]]:
        """Carry out the reaper ``event`` at ``now`` for the jobs ``list_query`` finds.

        The jobs are found and handled a batch at a time, each batch in one call of
        ``birddog.reap``, which locks them (skipping any another transaction holds) and
        checks each again. A batch the database refuses is retried a job at a time, and a
        job refused on its own is skipped for the rest of this pass, so one bad job never
        blocks the others.
        """
        if limit < 1:
            raise InvalidInput("limit must be at least 1", field="limit")
        handled: list[tuple[str, str]] = []
        skipped: list[str] = []
        batch = limit
        while True:
            with store_errors("reap"):
                rows = await self.settings.pool.fetch(list_query, since, batch, skipped, *list_args)
            if not rows:
                return handled
            ids = [row["job_id"] for row in rows]
            refused: StoreUnavailable | None = None
            try:
                done = await self._reap_batch(event, rows, since=since, now=now)
            except StoreUnavailable as exc:
                if not is_refusal(exc):
                    raise
                refused = exc
            if refused is not None:
                if batch > 1:
                    batch = 1  # find the job the database refuses, one at a time
                    continue
                skipped.extend(ids)
                log.error("job_reap_failed", job_id=repr(ids[0]), error=_cause_name(refused))
                continue
            outcomes = {row["job_id"]: row["what"] for row in done}
            # Kept, or held by another transaction (a worker settling it now): looked at
            # again by the next pass, not by this one.
            skipped.extend(job_id for job_id in ids if outcomes.get(job_id, "keep") == "keep")
            for row in done:
                note_unreadable(row["job_id"], row)
            handled.extend(
                (job_id, outcomes[job_id])
                for job_id in ids
                if outcomes.get(job_id, "keep") != "keep"
            )
            if len(rows) < batch:
                return handled

    async def _reap_batch(
        self, event: str, rows: Sequence[Row], *, since: datetime, now: datetime
    ) -> list[Row]:
        # The bounce texts are Python's (the masker): one per job, for its recovery count.
        bounces = [self._bounce(row, since=since, now=now) for row in rows]
        with store_errors("reap"):
            return list(
                await self.settings.pool.fetch(
                    queries["jobs_reap"],
                    event,
                    [row["job_id"] for row in rows],
                    [row["recovery_count"] for row in rows],
                    [bounce.content for bounce in bounces],
                    [bounce.diagnostic for bounce in bounces],
                    now,
                    since,
                    LEASE_EXPIRED_DIAGNOSTIC,
                    bounded_diagnostic(LEASE_EXPIRED_DIAGNOSTIC),
                    self.settings.limits.max_content_bytes,
                    self.settings.schedule_wake,
                )
            )

    def _bounce(self, row: Row, *, since: datetime, now: datetime) -> Settle:
        """The bounce of a queued job: its own expiry's, when that is what ran out."""
        if _expiry_ran_out(row, since=since, now=now):
            expires_in_s = (row["expires_at"] - _waits_from(row)).total_seconds()
            return queued_too_long_settlement(
                row["recovery_count"], self.settings.limits, expires_in_s=expires_in_s
            )
        return queued_too_long_settlement(row["recovery_count"], self.settings.limits)


def _expiry_ran_out(row: Row, *, since: datetime, now: datetime) -> bool:
    """Whether a queued job listed for the bounce is there for its own expiry only.

    Args:
        row: a row of ``jobs_queued_too_long`` (the lease reaper's rows have no expiry).
        since: the bounce's "enqueued by" time.
        now: the time the bounce is judged at.

    Returns:
        True when the job expired and is younger than the maximum queued age (counted
        from its digest for informational mail).
    """
    try:
        expires_at = row["expires_at"]
    except KeyError:
        return False
    return expires_at is not None and expires_at <= now and _waits_from(row) > since


def _waits_from(row: Row) -> datetime:
    """Since when a queued job waits for a worker: its digest time, else its enqueue time."""
    digest_at: datetime | None = row["digest_at"]
    created_at: datetime = row["created_at"]
    return created_at if digest_at is None else max(created_at, digest_at)


def _cause_name(exc: BaseException) -> str:
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__
