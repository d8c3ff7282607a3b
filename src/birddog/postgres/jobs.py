"""The Postgres job store: Watchdog-shaped jobs in ``birddog.jobs``.

A sender enqueues a job inside its own transaction with :func:`enqueue_accepted_job`
(re-exported here from :mod:`birddog.postgres.enqueue`); a worker claims it with
:meth:`PostgresJobs.claim` (``FOR UPDATE SKIP LOCKED``, a claim token and a lease), keeps
the lease with :meth:`PostgresJobs.heartbeat`, and finishes it with
:meth:`PostgresJobs.finish` (or :meth:`~PostgresJobs.settle` /
:meth:`~PostgresJobs.interrupt`), which writes the job's replies into the outbox and arms
one wake in the same transaction: a settlement is never committed without its fan-out,
nor the fan-out without its settlement.

What happens to a job is decided by :func:`birddog.core.lifecycle.decide_job` (job facts +
event -> next step); this module only locks rows, reads their facts and carries the
decision out. The life of a job::

    queued ──claim──▶ running ──settle / interrupt (no budget)──▶ settled
      ▲                  │
      └── lease expired / interrupt, while recovery_count < recovery.maxRecoveries

Every driver error leaves as :class:`~birddog.StoreUnavailable` (the driver's error its
cause), and a row SQL filled with something BirdDog never wrote as
:class:`~birddog.UnreadableRow`; a claimed job that cannot be read settles ``failed``.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final, LiteralString

import asyncpg
import structlog

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import (
    InvalidInput,
    JobNotFound,
    StaleClaim,
    StoreRefused,
    StoreUnavailable,
    UnreadableRow,
)
from birddog.core.jobs import (
    DEFAULT_MAX_CONTENT_BYTES,
    RESERVED_QUEUE_PREFIX,
    Job,
    JobState,
    check_stored_content,
)
from birddog.core.lifecycle import (
    DEFAULT_MAX_QUEUED_S,
    LEASE_EXPIRED_DIAGNOSTIC,
    Cause,
    ClaimEvent,
    Decision,
    Finished,
    Keep,
    Limits,
    Requeue,
    Settle,
    SettleRequested,
    WorkerStopped,
    queued_too_long_settlement,
    result_settlement,
    stop_diagnostic,
)
from birddog.core.mail import Outcome
from birddog.core.text import inert, shown_key
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.ports import ClaimedJob, Clock
from birddog.postgres.enqueue import SenderConnection, enqueue_accepted_job
from birddog.postgres.job_rows import Row, job_from_row
from birddog.postgres.job_rows import claim_token as claim_token_of
from birddog.postgres.pool import Pool, is_refusal, store_errors
from birddog.postgres.sql import queries

log = structlog.get_logger("birddog.jobs")

JOBS_CHANNEL: Final = "birddog_jobs"
"""Enqueued and requeued jobs are announced here (payload: the queue), at commit."""

CLAIM_ATTEMPTS: Final = 5
"""Claims tried in a row when concurrent claimers keep taking the same slot first."""

RECOVER_BATCH: Final = 100
"""Jobs handled per transaction by the reapers (:meth:`PostgresJobs.recover_expired`)."""


class _PostgresJobsBase:
    """What both sides of the job store hold: the pool, the limits and the clock.

    Made with the arguments of :class:`PostgresJobs` (documented there).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        schedule_wake: bool = True,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        max_queued_s: float = DEFAULT_MAX_QUEUED_S,
        queue_concurrency: int = 1,
        clock: Clock,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        if queue_concurrency < 1:
            raise InvalidInput("queue_concurrency must be at least 1", field="queue_concurrency")
        self.pool = pool
        self.queue_concurrency = queue_concurrency
        self.schedule_wake = schedule_wake
        self.limits = Limits(max_content_bytes=max_content_bytes, max_queued_s=max_queued_s)
        self.clock = clock
        self.kill_grace_s = max(0.0, kill_grace_s)

    @property
    def max_content_bytes(self) -> int:
        """The largest settlement or cancellation content accepted, in UTF-8 bytes."""
        return self.limits.max_content_bytes


class PostgresJobClaims(_PostgresJobsBase):
    """The workers' side of the job store: claim, heartbeat, finish (with fan-out).

    Everything a worker does with the jobs it holds, under their claim tokens, and the
    backlog it serves: the :class:`~birddog.ports.JobStore` port. Takes the arguments of
    :class:`PostgresJobs`.
    """

    # ---- claiming --------------------------------------------------------------------

    async def claim(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
    ) -> ClaimedJob | None:
        """Claim the next job: the head of a queue with a free slot, highest priority first.

        One statement (``FOR UPDATE SKIP LOCKED``): concurrent claimers never get the same
        job and never wait on each other. Only the head of each queue (priority, then
        enqueue order, then job id, among the jobs whose ``not_before`` has passed and
        whose expiry has not) is taken, and only while fewer than ``queue_concurrency``
        jobs of that queue run, whichever worker runs them. The candidates are read from
        the queue heads (``birddog.queue_heads``), so a claim costs the same however many
        other sessions wait.

        Args:
            queues: claim from these queues (session ids); with ``agents`` None too, from
                every queue but the reserved ones.
            agents: claim from every session of these agents as well (the job's mail is
                addressed to one of them).
            lease_s: how long the claim holds without a heartbeat.
            worker_id: who claims, recorded on the job for operators.

        Returns:
            The claimed job, or None when no job may be claimed now.

        Raises:
            InvalidInput: ``lease_s`` is not positive, or ``queues`` or ``agents`` is a
                bare string.
        """
        claimed = await self.claim_many(
            queues=queues, agents=agents, lease_s=lease_s, worker_id=worker_id, limit=1
        )
        return claimed[0] if claimed else None

    async def claim_many(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
        limit: int = 1,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` queued jobs in one statement, in claim order.

        Each statement takes at most one job per queue, its head; each claimed job takes
        a free slot of its queue, and the database refuses a second job in one slot (a
        unique index over running jobs), so two claimers racing for one queue cannot both
        win: the loser claims again and finds the queue busy. A
        queue whose name starts with :data:`~birddog.core.jobs.RESERVED_QUEUE_PREFIX` is
        claimed from only when ``queues`` names it.

        A claimed job whose row cannot be read as a job (bad data put there by SQL) is
        settled ``failed`` at once, with a diagnostic naming the field, and the claim
        goes on to the next job.

        Args:
            queues: claim from these queues; with ``agents`` None too, from every queue
                but the reserved.
            agents: claim from every session of these agents as well.
            lease_s: how long each claim holds without a heartbeat.
            worker_id: who claims, recorded on the jobs.
            limit: the most jobs to claim.

        Returns:
            The claimed jobs, highest priority first, then oldest.

        Raises:
            InvalidInput: ``limit`` is below 1, ``lease_s`` is not positive, or ``queues``
                or ``agents`` is a bare string.
        """
        if limit < 1:
            raise InvalidInput("limit must be at least 1", field="limit")
        lease_until = self._lease_until(lease_s)
        queue_list = _names(queues, "queues")
        agent_list = _names(agents, "agents")
        # One statement takes at most one job per queue (its head), and as many as it asks
        # for unless no other queue's head may be taken now (revision 0017). So another
        # statement follows only when the last one was full, or when a queue it took from
        # may run a second job at once (queue_concurrency above 1).
        taken: list[tuple[Row, ClaimedJob]] = []
        while len(taken) < limit:
            asked = limit - len(taken)
            rows = await self._claim_rows(
                queue_list, agent_list, asked, lease_until, worker_id or None
            )
            if not rows:
                break
            for row in rows:
                try:
                    job = job_from_row(row)
                except UnreadableRow as exc:
                    # Settled failed at once; the queue may still hold good jobs.
                    await self._fail_unreadable(row, exc)
                    continue
                claimed = ClaimedJob(
                    job=job,
                    claim_token=str(row["claim_token"]),
                    lease_expires_at=row["lease_expires_at"],
                    recovery_count=row["recovery_count"],
                    traceparent=row["traceparent"],
                )
                taken.append((row, claimed))
            if len(rows) < asked and self.queue_concurrency == 1:
                break
        taken.sort(key=lambda item: _claim_order(item[0]))
        return [claimed for _, claimed in taken]

    async def _claim_rows(
        self,
        queues: list[str] | None,
        agents: list[str] | None,
        limit: int,
        lease_until: datetime,
        worker_id: str | None,
    ) -> list[Row]:
        for _ in range(CLAIM_ATTEMPTS):
            try:
                with store_errors("claim"):
                    return await self._fetch_claim(queues, agents, limit, lease_until, worker_id)
            except StoreUnavailable as exc:
                # Another claimer took the same slot first: claim again, from a new snapshot.
                if not isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                    raise
        return []  # a queue this contended is busy; the next claim tries again

    async def _fetch_claim(
        self,
        queues: list[str] | None,
        agents: list[str] | None,
        limit: int,
        lease_until: datetime,
        worker_id: str | None,
    ) -> list[Row]:
        return list(
            await self.pool.fetch(
                queries["jobs_claim"],
                queues,
                limit,
                lease_until,
                worker_id,
                self.queue_concurrency,
                self.clock.now(),
                RESERVED_QUEUE_PREFIX,
                agents,
            )
        )

    async def _fail_unreadable(self, row: Row, exc: UnreadableRow) -> None:
        log.warning("job_unreadable", job_id=inert(str(row["job_id"])), field=exc.field)
        # StaleClaim: cancelled and reaped meanwhile, so it is settled either way.
        with contextlib.suppress(StaleClaim):
            await self.finish(
                job_id=row["job_id"],
                claim_token=str(row["claim_token"]),
                event=SettleRequested(Outcome.FAILED, "", str(exc)),
            )

    async def heartbeat(self, *, job_id: str, claim_token: str, lease_s: float) -> bool:
        """Extend the lease of a job this claim still holds.

        Args:
            job_id: the job.
            claim_token: the claim's token.
            lease_s: the new lease, from now.

        Returns:
            True when a cancellation was requested: the worker should stop the handler
            and settle (the cancellation wins whatever it reports).

        Raises:
            InvalidInput: ``lease_s`` is not positive.
            StaleClaim: the job is not running under this claim any more.
        """
        token = claim_token_of(claim_token)
        lease_until = self._lease_until(lease_s)
        if token is None:
            raise StaleClaim(f"claim token {claim_token!r} is not a claim token")
        with store_errors("heartbeat"):
            cancel_requested = await self.pool.fetchval(
                queries["jobs_heartbeat"], job_id, token, lease_until
            )
        if cancel_requested is None:
            raise StaleClaim(f"job {shown_key(job_id)} is no longer held by this claim")
        return bool(cancel_requested)

    async def record_turn(self, *, job_id: str, claim_token: str, turn: Turn) -> None:
        """Record on a job this claim holds where its turn runs (its supervisor).

        Args:
            job_id: the job.
            claim_token: the claim's token.
            turn: the supervisor's host, boot, pid and start time.

        Raises:
            StaleClaim: the job is not running under this claim any more.
            StoreUnavailable: the database could not be reached.
        """
        token = claim_token_of(claim_token)
        if token is None:
            raise StaleClaim(f"claim token {claim_token!r} is not a claim token")
        with store_errors("record_turn"):
            recorded = await self.pool.fetchval(
                queries["jobs_record_turn"],
                job_id,
                token,
                turn.host,
                turn.boot_id,
                turn.pid,
                turn.start_ticks,
            )
        if recorded is None:
            raise StaleClaim(f"job {shown_key(job_id)} is no longer held by this claim")

    async def queued_backlog(
        self, *, queues: Sequence[str] | None = None, agents: Sequence[str] | None = None
    ) -> tuple[int, datetime | None]:
        """How many jobs wait in ``queues``, and when the oldest of them was enqueued.

        Args:
            queues: the queues a worker serves; with ``agents`` None too, every queue but
                the reserved.
            agents: the agents a worker serves, every session of theirs.

        Returns:
            The number of queued jobs and the oldest one's enqueue time (None: none).
        """
        with store_errors("queued_backlog"):
            row = await self.pool.fetchrow(
                queries["jobs_queued_backlog"],
                _names(queues, "queues"),
                RESERVED_QUEUE_PREFIX,
                _names(agents, "agents"),
            )
        return (0, None) if row is None else (row["queued"], row["oldest"])

    # ---- finishing under a claim -----------------------------------------------------

    async def finish(
        self, *, job_id: str, claim_token: str, event: ClaimEvent, traceparent: str | None = None
    ) -> Finished:
        """Carry out what the worker reports about a job it holds, in one transaction.

        The lifecycle decides: a result settles with its outcome (``failed``, with a
        diagnostic that says why, when it cannot be stored); a stop gives the job back
        to its queue while recovery budget is left, else settles it ``interrupted``; a
        recorded cancellation wins over both. Replaying a finished event with the same
        claim writes nothing.

        Args:
            job_id: the job.
            claim_token: the token of the claim that ran it.
            event: the result (:class:`~birddog.core.lifecycle.SettleRequested`) or the
                stop (:class:`~birddog.core.lifecycle.WorkerStopped`,
                :class:`~birddog.core.lifecycle.HandlerTimedOut`).
            traceparent: the W3C context of the settlement's span, which the replies'
                posts continue (None: the job's own, if it has one).

        Returns:
            What it came to: the decision, the job's outcome, the reply keys written.

        Raises:
            JobNotFound: no job has this id.
            StaleClaim: the job is not running under this claim (another claim holds it,
                it was recovered, or it settled otherwise).
        """
        token = claim_token_of(claim_token)
        # The texts Python makes (the masker is Python's): what the job settles with
        # unless a recorded cancellation wins, and the diagnostic that cancellation takes.
        if isinstance(event, SettleRequested):
            kind = "result"
            wanted = result_settlement(event, self.limits)
            cancel_diagnostic = _bounded(event.diagnostic)
        else:
            kind = "stop"
            wanted = Settle(Outcome.INTERRUPTED, "", stop_diagnostic(event), Cause.INTERRUPTED)
            cancel_diagnostic = wanted.diagnostic
        with store_errors("finish"):
            # One call, one round trip: the function locks the job, checks the claim,
            # decides as decide() does and writes the settlement, replies and wake.
            row = _returned(
                await self.pool.fetchrow(
                    queries["jobs_settle"],
                    job_id,
                    token,
                    kind,
                    wanted.outcome.value if kind == "result" else None,
                    wanted.content,
                    wanted.diagnostic,
                    _bounded(wanted.diagnostic),
                    cancel_diagnostic,
                    self.clock.now(),
                    self.limits.max_content_bytes,
                    traceparent,
                    self.schedule_wake,
                )
            )
        decision = _decision(job_id, row, wanted)
        _note_unreadable(job_id, row)
        return Finished(job_id, decision, _outcome_of(row), list(row["keys"] or ()))

    async def settle(
        self,
        *,
        job_id: str,
        claim_token: str,
        outcome: Outcome | str,
        content: object,
        diagnostic: str | None = None,
        meta: object = None,
    ) -> list[str]:
        """Settle a running job and write its replies, in one transaction.

        A recorded cancellation wins: the job settles ``cancelled`` and its replies carry
        the cancellation content instead. Content that cannot be stored (not a string, a
        NUL, a lone surrogate, above ``max_content_bytes``) settles the job ``failed``
        with a diagnostic that says why. Replaying the settlement with the same claim
        writes nothing and returns no keys.

        Args:
            job_id: the job.
            claim_token: the token of the claim that ran it.
            outcome: how it ended.
            content: the text owed to correspondents (empty: the outcome's default text).
            diagnostic: the terminal diagnostic, stored bounded; replies carry it only for
                ``failed``, ``interrupted`` and ``outcome_unknown``.
            meta: the caller's own settlement facts; never stored, never in a reply.

        Returns:
            The reply keys written (none for a job without mail, or a replay).

        Raises:
            InvalidInput: the outcome is not a Watchdog outcome; nothing is written.
            JobNotFound: no job has this id.
            StaleClaim: the job is not running under this claim (another claim holds it,
                it was recovered, or it settled otherwise).
        """
        del meta  # for the caller's own fan-out wrapper only
        event = SettleRequested(_outcome(outcome), content, diagnostic)
        finished = await self.finish(job_id=job_id, claim_token=claim_token, event=event)
        return finished.keys

    async def interrupt(self, *, job_id: str, claim_token: str, diagnostic: str) -> Outcome | None:
        """Stop a running job the worker itself gave up on (shutdown, handler timeout).

        With recovery budget left (``recovery_count < maxRecoveries``) the job is queued
        again for another worker; otherwise it settles ``interrupted`` with the
        diagnostic, and its replies are written. A recorded cancellation wins: the job
        settles ``cancelled``.

        Args:
            job_id: the job.
            claim_token: the token of the claim that ran it.
            diagnostic: why the work stopped, stored bounded and sent with the replies.

        Returns:
            None when the job was queued again, else the outcome it settled with.

        Raises:
            JobNotFound: no job has this id.
            StaleClaim: the job is not running under this claim.
        """
        event = WorkerStopped(diagnostic)
        finished = await self.finish(job_id=job_id, claim_token=claim_token, event=event)
        return finished.outcome

    def _lease_until(self, lease_s: float) -> datetime:
        if not lease_s > 0 or not math.isfinite(lease_s):
            raise InvalidInput("lease_s must be a positive number of seconds", field="lease_s")
        return self.clock.now() + timedelta(seconds=lease_s)


class PostgresJobOperations(_PostgresJobsBase):
    """The operators' and reapers' side of the job store: cancel, reap, look, repair.

    What happens to jobs from outside their claims: an operator's cancellation, the
    reapers (expired leases, jobs queued too long), the host sweep's turns, and the reads
    and repairs of ``birddog jobs``. Takes the arguments of :class:`PostgresJobs`.
    """

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
        check_stored_content(content, limit_bytes=self.limits.max_content_bytes)
        with store_errors("cancel"):
            row = _returned(
                await self.pool.fetchrow(
                    queries["jobs_cancel"],
                    job_id,
                    content,
                    self.clock.now(),
                    self.limits.max_content_bytes,
                    self.schedule_wake,
                )
            )
        if row["decision"] == "missing":
            raise JobNotFound(f"no job has id {shown_key(job_id)}")
        _note_unreadable(job_id, row)
        return _outcome_of(row)

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
            row = await self.pool.fetchrow(queries["jobs_get"], job_id)
        if row is None:
            raise JobNotFound(f"no job has id {shown_key(job_id)}")
        return job_from_row(row)

    async def counts(self) -> dict[str, int]:
        """How many jobs are queued, running and settled.

        Returns:
            Counts by state; every state is present, zero when empty.
        """
        with store_errors("counts"):
            rows = await self.pool.fetch(queries["jobs_counts"])
        counts = dict.fromkeys((state.value for state in JobState), 0)
        counts.update({row["state"]: row["jobs"] for row in rows})
        return counts

    async def not_yet_due(self) -> tuple[int, datetime | None]:
        """How many queued jobs wait for their ``not_before``, and the earliest of those times.

        Returns:
            The number of such jobs and the next time one becomes claimable (None: none).
        """
        with store_errors("not_yet_due"):
            row = await self.pool.fetchrow(queries["jobs_not_yet_due"], self.clock.now())
        return (0, None) if row is None else (row["jobs"], row["next_at"])

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
            rows = await self.pool.fetch(queries["jobs_turns_on_host"], host, boot_id)
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
            repaired = int(await self.pool.fetchval(queries["jobs_queue_heads_repair"]))
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
        at = now or self.clock.now()
        ended_by = at - timedelta(seconds=self.kill_grace_s)
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
        at = now or self.clock.now()
        enqueued_by = at - timedelta(seconds=self.limits.max_queued_s)
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
                rows = await self.pool.fetch(list_query, since, batch, skipped, *list_args)
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
                _note_unreadable(row["job_id"], row)
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
                await self.pool.fetch(
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
                    self.limits.max_content_bytes,
                    self.schedule_wake,
                )
            )

    def _bounce(self, row: Row, *, since: datetime, now: datetime) -> Settle:
        """The bounce of a queued job: its own expiry's, when that is what ran out."""
        if _expiry_ran_out(row, since=since, now=now):
            expires_in_s = (row["expires_at"] - row["created_at"]).total_seconds()
            return queued_too_long_settlement(
                row["recovery_count"], self.limits, expires_in_s=expires_in_s
            )
        return queued_too_long_settlement(row["recovery_count"], self.limits)


class PostgresJobs(PostgresJobClaims, PostgresJobOperations):
    """The job store: claim, heartbeat, finish (with fan-out), cancel, reap.

    The one object the wiring passes around; its two sides are
    :class:`PostgresJobClaims` (the workers') and :class:`PostgresJobOperations` (the
    operators' and reapers'), which share nothing but what they are made with.

    Args:
        pool: the asyncpg pool (from :func:`birddog.postgres.pool.create_pool`).
        schedule_wake: arm the drain's wake when a settlement writes replies (turn off
            only when something else wakes the drain).
        max_content_bytes: the largest settlement or cancellation content accepted.
        max_queued_s: a job queued longer is cancelled by :meth:`cancel_queued_too_long`.
        queue_concurrency: how many jobs of one queue (one session) may run at once,
            across every worker; the database enforces it with one slot per running job.
        clock: the current time; leases, settlement times and reply times come from it,
            so tests can freeze time.
        kill_grace_s: a job whose lease ended is recovered only this much later, when the
            supervisor of its vanished worker has ended the turn's processes
            (``SIGTERM``, then ``SIGKILL`` after this grace: ``BIRDDOG_KILL_GRACE_S``,
            which workers read too).
    """


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _note_unreadable(job_id: str, row: Row) -> None:
    """Log a settled job whose payload is no agent job: it owed no replies."""
    if row["unreadable"] is not None:
        # The store is Watchdog-shaped and never requires a BirdDog payload; a job
        # that is not an agent job has no mail, so it owes no replies.
        log.warning("job_settled_without_replies", job_id=inert(job_id), field=row["unreadable"])


def _expiry_ran_out(row: Row, *, since: datetime, now: datetime) -> bool:
    """Whether a queued job listed for the bounce is there for its own expiry only.

    Args:
        row: a row of ``jobs_queued_too_long`` (the lease reaper's rows have no expiry).
        since: the bounce's "enqueued by" time.
        now: the time the bounce is judged at.

    Returns:
        True when the job expired and is younger than the maximum queued age.
    """
    try:
        expires_at, created_at = row["expires_at"], row["created_at"]
    except KeyError:
        return False
    return expires_at is not None and expires_at <= now and created_at > since


def _names(names: Sequence[str] | None, field: str) -> list[str] | None:
    """A list of queue or agent names (None stays None); a bare string is refused."""
    if isinstance(names, str):
        raise InvalidInput(f"{field} must be a list of names, not a string", field=field)
    return None if names is None else list(names)


def _claim_order(row: Row) -> tuple[int, datetime, str]:
    """Highest priority first, then the oldest, then by id."""
    return (-row["priority"], row["created_at"], row["job_id"])


def _decision(job_id: str, row: Row, wanted: Settle) -> Decision:
    """The decision ``birddog.settle`` carried out, as the lifecycle names it.

    Raises:
        JobNotFound: no job has this id.
        StaleClaim: the claim did not hold the job.
    """
    what = row["decision"]
    if what == "missing":
        raise JobNotFound(f"no job has id {shown_key(job_id)}")
    if what == "refuse":
        raise StaleClaim(f"job {shown_key(job_id)}: {row['reason']}")
    if what == "keep":
        return Keep()
    if what == "requeue":
        return Requeue(row["diagnostic"])
    cause = Cause(row["cause"]) if row["cause"] is not None else wanted.cause
    content = row["content"] if cause is Cause.CANCELLED else wanted.content
    return Settle(Outcome(row["outcome"]), content, row["diagnostic"], cause)


def _returned(row: Row | None) -> Row:
    """The one row a write function always returns."""
    if row is None:
        raise StoreRefused("the database's write function returned no row")
    return row


def _outcome_of(row: Row) -> Outcome | None:
    """The job's outcome once the function's decision is stored (None: not settled)."""
    return None if row["outcome"] is None else Outcome(row["outcome"])


def _bounded(diagnostic: str | None) -> str | None:
    return None if diagnostic is None else bounded_diagnostic(diagnostic)


def _cause_name(exc: BaseException) -> str:
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__


def _outcome(outcome: Outcome | str) -> Outcome:
    try:
        return Outcome(outcome)
    except ValueError:
        raise InvalidInput(
            f"outcome {outcome!r} is not one of {', '.join(o.value for o in Outcome)}",
            field="outcome",
        ) from None


__all__ = [
    "JOBS_CHANNEL",
    "LEASE_EXPIRED_DIAGNOSTIC",
    "ClaimedJob",
    "Finished",
    "PostgresJobClaims",
    "PostgresJobOperations",
    "PostgresJobs",
    "SenderConnection",
    "enqueue_accepted_job",
]
