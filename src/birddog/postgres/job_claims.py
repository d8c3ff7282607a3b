"""The workers' side of the job store: claim, heartbeat, finish (with fan-out).

Everything a worker does with the jobs it holds, under their claim tokens, and the backlog
it serves: the :class:`~birddog.ports.JobStore` port. :class:`~birddog.postgres.jobs.PostgresJobs`
holds one beside the operators' side (:mod:`birddog.postgres.job_operations`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

import asyncpg
import structlog

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import (
    InvalidInput,
    JobNotFound,
    StaleClaim,
    StoreUnavailable,
    UnreadableRow,
)
from birddog.core.jobs import RESERVED_QUEUE_PREFIX
from birddog.core.lifecycle import (
    Cause,
    ClaimEvent,
    Decision,
    Finished,
    Keep,
    Requeue,
    Settle,
    SettleRequested,
    WorkerStopped,
    result_settlement,
    stop_diagnostic,
)
from birddog.core.mail import Outcome
from birddog.core.text import printable, shown_key
from birddog.core.turns import Turn
from birddog.ports import ClaimedJob
from birddog.postgres.job_config import JobStoreSettings
from birddog.postgres.job_rows import Row, job_from_row, note_unreadable, outcome_of, returned_row
from birddog.postgres.job_rows import claim_token as claim_token_of
from birddog.postgres.pool import store_errors
from birddog.postgres.sql import queries

__all__ = ["CLAIM_ATTEMPTS", "PostgresJobClaims"]

log = structlog.get_logger("birddog.jobs")

CLAIM_ATTEMPTS: Final = 5
"""Claims tried in a row when concurrent claimers keep taking the same slot first."""


class PostgresJobClaims:
    """The workers' side of the job store: claim, heartbeat, finish (with fan-out).

    Args:
        settings: the pool, limits and clock it shares with the operators' side.
    """

    def __init__(self, settings: JobStoreSettings) -> None:
        self.settings = settings

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
        batch: int = 1,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` queued jobs (turns, with ``batch``) in one statement.

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
            limit: the most jobs (turns) to claim.
            batch: the most jobs of one queue one turn takes: its head, and up to
                ``batch - 1`` queued jobs behind it that may be claimed now, running
                without a slot of their own (the head's slot is the turn's).

        Returns:
            The claimed jobs, highest priority first, then oldest (a turn's jobs in
            claim order among them).

        Raises:
            InvalidInput: ``limit`` or ``batch`` is below 1, ``lease_s`` is not positive,
                or ``queues`` or ``agents`` is a bare string.
        """
        if limit < 1:
            raise InvalidInput("limit must be at least 1", field="limit")
        if batch < 1:
            raise InvalidInput("batch must be at least 1", field="batch")
        lease_until = self._lease_until(lease_s)
        queue_list = _names(queues, "queues")
        agent_list = _names(agents, "agents")
        # One statement takes at most one job per queue (its head), and as many as it asks
        # for unless no other queue's head may be taken now (revision 0017). So another
        # statement follows only when the last one was full, or when a queue it took from
        # may run a second job at once (queue_concurrency above 1).
        taken: list[tuple[Row, ClaimedJob]] = []
        turns = 0
        while turns < limit:
            asked = limit - turns
            rows = await self._claim_rows(
                queue_list, agent_list, asked, lease_until, worker_id or None, batch=batch
            )
            if not rows:
                break
            taken_now = len({row["queue"] for row in rows}) if batch > 1 else len(rows)
            before = len(taken)
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
            # Turns taken that can run (an unreadable job was settled, not taken).
            read = [claimed.job.queue for _, claimed in taken[before:]]
            turns += len(set(read)) if batch > 1 else len(read)
            if taken_now < asked and self.settings.queue_concurrency == 1:
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
        *,
        batch: int = 1,
    ) -> list[Row]:
        for _ in range(CLAIM_ATTEMPTS):
            try:
                with store_errors("claim"):
                    return await self._fetch_claim(
                        queues, agents, limit, lease_until, worker_id, batch=batch
                    )
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
        *,
        batch: int,
    ) -> list[Row]:
        return list(
            await self.settings.pool.fetch(
                queries["jobs_claim"],
                queues,
                limit,
                lease_until,
                worker_id,
                self.settings.queue_concurrency,
                self.settings.clock.now(),
                RESERVED_QUEUE_PREFIX,
                agents,
                batch,
            )
        )

    async def _fail_unreadable(self, row: Row, exc: UnreadableRow) -> None:
        log.warning("job_unreadable", job_id=printable(str(row["job_id"])), field=exc.field)
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
            cancel_requested = await self.settings.pool.fetchval(
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
            recorded = await self.settings.pool.fetchval(
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
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        digests: bool = False,
    ) -> tuple[int, datetime | None]:
        """How many jobs wait in ``queues``, and when the oldest of them was enqueued.

        Args:
            queues: the queues a worker serves; with ``agents`` None too, every queue but
                the reserved.
            agents: the agents a worker serves, every session of theirs.
            digests: count informational mail waiting for its digest too (a live session
                takes it at once; a worker only at its digest).

        Returns:
            The number of queued jobs and the oldest one's enqueue time (None: none).
        """
        with store_errors("queued_backlog"):
            row = await self.settings.pool.fetchrow(
                queries["jobs_queued_backlog"],
                _names(queues, "queues"),
                RESERVED_QUEUE_PREFIX,
                _names(agents, "agents"),
                digests,
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
            wanted = result_settlement(event, self.settings.limits)
            cancel_diagnostic = _bounded(event.diagnostic)
        else:
            kind = "stop"
            wanted = Settle(Outcome.INTERRUPTED, "", stop_diagnostic(event), Cause.INTERRUPTED)
            cancel_diagnostic = wanted.diagnostic
        with store_errors("finish"):
            # One call, one round trip: the function locks the job, checks the claim,
            # decides as decide() does and writes the settlement, replies and wake.
            row = returned_row(
                await self.settings.pool.fetchrow(
                    queries["jobs_settle"],
                    job_id,
                    token,
                    kind,
                    wanted.outcome.value if kind == "result" else None,
                    wanted.content,
                    wanted.diagnostic,
                    _bounded(wanted.diagnostic),
                    cancel_diagnostic,
                    self.settings.clock.now(),
                    self.settings.limits.max_content_bytes,
                    traceparent,
                    self.settings.schedule_wake,
                )
            )
        decision = _decision(job_id, row, wanted)
        note_unreadable(job_id, row)
        return Finished(job_id, decision, outcome_of(row), list(row["keys"] or ()))

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
        return self.settings.clock.now() + timedelta(seconds=lease_s)


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
    # A cancellation's content, or none for a result above the server's limit: the row's.
    stored = cause in {Cause.CANCELLED, Cause.UNSTORABLE_RESULT} and row["content"] is not None
    content = row["content"] if stored else wanted.content
    return Settle(Outcome(row["outcome"]), content, row["diagnostic"], cause)


def _bounded(diagnostic: str | None) -> str | None:
    return None if diagnostic is None else bounded_diagnostic(diagnostic)


def _outcome(outcome: Outcome | str) -> Outcome:
    try:
        return Outcome(outcome)
    except ValueError:
        raise InvalidInput(
            f"outcome {outcome!r} is not one of {', '.join(o.value for o in Outcome)}",
            field="outcome",
        ) from None
