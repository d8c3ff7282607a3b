"""The in-memory job store: the reference implementation of the job store port."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from birddog.core.delivery import new_row
from birddog.core.digests import DEFAULT_DIGEST, DigestSchedule, next_digest
from birddog.core.errors import InvalidInput, JobConflict, JobNotFound, StaleClaim
from birddog.core.fanout import replies_for
from birddog.core.jobs import (
    DEFAULT_CANCEL_GRACE_S,
    DEFAULT_MAX_CONTENT_BYTES,
    RESERVED_QUEUE_PREFIX,
    Job,
    JobState,
    carried_mail_key,
    check_stored_content,
    mail_key_taken,
)
from birddog.core.lifecycle import (
    CancelRequested,
    ClaimEvent,
    Decision,
    Finished,
    JobFacts,
    Keep,
    LeaseExpired,
    Limits,
    RecordCancellation,
    Refuse,
    Requeue,
    Settle,
    SettleRequested,
    decide_job,
)
from birddog.core.live import DIGEST_KINDS
from birddog.core.mail import Outcome
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.ports import ClaimedJob, Clock, Outbox
from birddog.testing.outbox import InMemoryOutbox

__all__ = ["InMemoryJobs", "StoredJob"]


@dataclass
class StoredJob:
    """One job as :class:`InMemoryJobs` holds it: the job and what the store knows of it.

    Attributes:
        job: the job as a worker sees it (state and outcome kept current).
        order: its place in enqueue order (claims take the oldest first).
        created_at: when it was enqueued.
        claim_token: the running claim's token.
        lease_expires_at: when the running claim lapses.
        recovery_count: how many times it was given back to its queue.
        cancellation: the recorded cancellation's content, None when none.
        content: the settlement's content.
        diagnostic: the last diagnostic (a settlement's, or a recovery's).
        turn: where its last turn ran, as the worker recorded it.
        worker_id: who holds (or last held) its claim.
        started_at: when that claim began (the jobs of one turn share it).
        settled_at: when it settled (retention counts from here).
        cancel_deadline: the latest its lease may end once a cancellation was recorded
            while it ran (the cancel grace after it).
        digest_at: an informational job's digest time, given at enqueue (no claim takes it
            before; None for an interactive job).
    """

    job: Job
    order: int
    created_at: datetime
    claim_token: str | None = None
    lease_expires_at: datetime | None = None
    recovery_count: int = 0
    cancellation: str | None = None
    content: str | None = None
    diagnostic: str | None = None
    turn: Turn | None = None
    worker_id: str = ""
    started_at: datetime | None = None
    settled_at: datetime | None = None
    cancel_deadline: datetime | None = None
    digest_at: datetime | None = None

    def facts(self, token: str | None = None) -> JobFacts:
        """The lifecycle's facts, ``token`` being the claim presented (if any)."""
        return JobFacts(
            state=self.job.state,
            claim_matches=token is not None and token == self.claim_token,
            recovery_count=self.recovery_count,
            max_recoveries=0 if self.job.recovery is None else self.job.recovery.max_recoveries,
            cancellation=self.cancellation,
            outcome=self.job.outcome,
            created_at=self.created_at,
            lease_expires_at=self.lease_expires_at,
        )


class InMemoryJobs:
    """A job store in a dict: the reference implementation of the job store port.

    The same contract as :class:`birddog.postgres.jobs.PostgresJobs` as a worker uses it
    (claim, heartbeat, finish or settle, cancel, recover expired leases), with
    :meth:`enqueue` standing for a sender's ``enqueue_accepted_job``. What happens to a
    job is decided by :func:`birddog.core.lifecycle.decide_job`, as in Postgres; settling
    writes the job's replies into ``outbox``.

    Args:
        clock: the current time (leases, settlement and reply times).
        outbox: where settlements write replies (default: a fresh :class:`InMemoryOutbox`).
        max_content_bytes: the largest settlement or cancellation content accepted.
        queue_concurrency: how many jobs of one queue may run at once.
        kill_grace_s: a job whose lease ended is recovered only this much later.

    Attributes:
        jobs: every job by id.
        outbox: the replies settlements wrote.
        digest_schedules: each agent's own digest schedule, read at enqueue (an agent
            without one has the default; ``InMemoryDigests`` shares its own here).
    """

    def __init__(
        self,
        *,
        clock: Clock,
        outbox: Outbox | None = None,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        queue_concurrency: int = 1,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        self.clock = clock
        self.kill_grace_s = max(0.0, kill_grace_s)
        self.outbox: Outbox = outbox if outbox is not None else InMemoryOutbox()
        self.limits = Limits(max_content_bytes=max_content_bytes)
        self.queue_concurrency = queue_concurrency
        self.jobs: dict[str, StoredJob] = {}
        self.digest_schedules: Mapping[str, DigestSchedule] = {}

    @property
    def max_content_bytes(self) -> int:
        """The largest settlement or cancellation content accepted, in UTF-8 bytes."""
        return self.limits.max_content_bytes

    async def enqueue(self, job: Job) -> bool:
        """Add a queued job; enqueueing the same job again is an accepted replay.

        Returns:
            True when added, False for an identical replay.

        Raises:
            InvalidInput: the job is not queued or has an outcome.
            JobConflict: a job with this id exists with different fields, or another job
                carries its mail key (a mail key names one job).
        """
        if job.state is not JobState.QUEUED or job.outcome is not None:
            raise InvalidInput("an enqueued job must be queued, with no outcome", field="state")
        stored = self.jobs.get(job.job_id)
        if stored is None:
            key = carried_mail_key(job)
            if key is not None and any(carried_mail_key(s.job) == key for s in self.jobs.values()):
                raise mail_key_taken(key)
            now = self.clock.now()
            self.jobs[job.job_id] = StoredJob(
                job, len(self.jobs), now, digest_at=_digest_at(job, now, self.digest_schedules)
            )
            return True
        differing = [
            name for name in REPLAYED_FIELDS if getattr(job, name) != getattr(stored.job, name)
        ]
        if differing:
            raise JobConflict(
                f"job {job.job_id!r} already exists with a different {', '.join(differing)}"
            )
        return False

    async def get(self, job_id: str) -> Job:
        """The job with this id, as stored now.

        Raises:
            JobNotFound: no job has this id.
        """
        return self._stored(job_id).job

    async def claim(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
    ) -> ClaimedJob | None:
        """Claim the head of a queue with a free slot: highest priority, then oldest.

        Args:
            queues: these queues; with ``agents`` None too, every queue but the reserved.
            agents: every session of these agents as well (the mail's ``to.agentId``).
            lease_s: how long the claim holds without a heartbeat.
            worker_id: who claims (kept on the job, as the reports show it).

        Returns:
            The claimed job, or None when no queue has a claimable head.
        """
        now = self.clock.now()
        until = self._lease_until(lease_s)
        running = Counter(s.job.queue for s in self.jobs.values() if s.job.state is RUNNING)
        heads: dict[str, StoredJob] = {}
        for stored in sorted(self.jobs.values(), key=_claim_order):
            queue = stored.job.queue
            if stored.job.state is not JobState.QUEUED or queue in heads:
                continue
            if _may_claim_at(stored, now):
                heads[queue] = stored
        # The head of each queue first, then the filter: a worker for one agent never takes
        # the job behind another agent's head in a shared session.
        heads = {q: s for q, s in heads.items() if served(s.job, queues=queues, agents=agents)}
        free = [s for s in heads.values() if running[s.job.queue] < self.queue_concurrency]
        if not free:
            return None
        stored = min(free, key=_claim_order)
        stored.job = stored.job.model_copy(update={"state": RUNNING})
        stored.claim_token = uuid.uuid4().hex
        stored.lease_expires_at = until
        stored.worker_id, stored.started_at = worker_id, now
        return ClaimedJob(stored.job, stored.claim_token, until, stored.recovery_count)

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
        """Claim up to ``limit`` turns, one :meth:`claim` after another, in claim order.

        With ``batch`` above 1, each head claimed takes up to ``batch - 1`` more queued
        jobs of its queue that may be claimed now, in claim order (see the port).

        Returns:
            The claimed jobs, each turn's together; fewer than ``limit`` turns when no
            other head could be claimed.
        """
        taken: list[ClaimedJob] = []
        turns = 0
        while turns < limit:
            claimed = await self.claim(
                queues=queues, agents=agents, lease_s=lease_s, worker_id=worker_id
            )
            if claimed is None:
                break
            turns += 1
            taken.append(claimed)
            taken += self._followers(claimed, batch - 1, lease_s=lease_s)
        return taken

    def _followers(self, head: ClaimedJob, count: int, *, lease_s: float) -> list[ClaimedJob]:
        """Up to ``count`` more queued jobs of ``head``'s queue, claimed behind it."""
        now = self.clock.now()
        until = self._lease_until(lease_s)
        behind = [
            stored
            for stored in sorted(self.jobs.values(), key=_claim_order)
            if stored.job.state is JobState.QUEUED
            and stored.job.queue == head.job.queue
            and _may_claim_at(stored, now)
        ][: max(0, count)]
        first = self.jobs[head.job.job_id]
        taken = []
        for stored in behind:
            stored.job = stored.job.model_copy(update={"state": RUNNING})
            stored.claim_token = uuid.uuid4().hex
            stored.lease_expires_at = until
            stored.worker_id, stored.started_at = first.worker_id, first.started_at
            taken.append(ClaimedJob(stored.job, stored.claim_token, until, stored.recovery_count))
        return taken

    async def heartbeat(self, *, job_id: str, claim_token: str, lease_s: float) -> bool:
        """Extend the lease of a job this claim still holds.

        Returns:
            True when a cancellation was requested.

        Raises:
            StaleClaim: the job is not running under this claim any more.
        """
        stored = self.jobs.get(job_id)
        if stored is None or stored.job.state is not RUNNING or stored.claim_token != claim_token:
            raise StaleClaim(f"job {job_id!r} is no longer held by this claim")
        stored.lease_expires_at = _within(self._lease_until(lease_s), stored.cancel_deadline)
        return stored.cancellation is not None

    async def record_turn(self, *, job_id: str, claim_token: str, turn: Turn) -> None:
        """Record where the turn of a job this claim holds runs.

        Raises:
            StaleClaim: the job is not running under this claim any more.
        """
        stored = self.jobs.get(job_id)
        if stored is None or stored.job.state is not RUNNING or stored.claim_token != claim_token:
            raise StaleClaim(f"job {job_id!r} is no longer held by this claim")
        stored.turn = turn

    async def turns_on_host(self, *, host: str, boot_id: str) -> list[tuple[str, Turn]]:
        """``(job_id, turn)`` of every running job whose turn was recorded on this host."""
        return [
            (job_id, stored.turn)
            for job_id, stored in sorted(self.jobs.items())
            if stored.job.state is RUNNING
            and stored.turn is not None
            and (stored.turn.host, stored.turn.boot_id) == (host, boot_id)
        ]

    async def finish(
        self, *, job_id: str, claim_token: str, event: ClaimEvent, traceparent: str | None = None
    ) -> Finished:
        """Carry out what the worker reports about a job it holds (see PostgresJobs).

        Raises:
            JobNotFound: no job has this id.
            StaleClaim: the job is not running under this claim.
        """
        stored = self._stored(job_id)
        now = self.clock.now()
        decision = decide_job(stored.facts(claim_token), event, now=now, limits=self.limits)
        if isinstance(decision, Refuse):
            raise StaleClaim(f"job {job_id!r}: {decision.reason}")
        before = stored.job.outcome
        keys = await _carry_out(
            stored, decision, now, traceparent, outbox=self.outbox, limits=self.limits
        )
        return Finished(job_id, decision, _outcome_after(before, decision), keys)

    async def settle(
        self,
        *,
        job_id: str,
        claim_token: str,
        outcome: Outcome,
        content: object,
        diagnostic: str | None = None,
    ) -> list[str]:
        """Settle a running job and write its replies (a recorded cancellation wins).

        Returns:
            The reply keys written (none for a job without mail, or a replay).

        Raises:
            JobNotFound: no job has this id.
            StaleClaim: the job is not running under this claim.
        """
        event = SettleRequested(outcome, content, diagnostic)
        finished = await self.finish(job_id=job_id, claim_token=claim_token, event=event)
        return finished.keys

    async def cancel(self, *, job_id: str, content: str) -> Outcome | None:
        """Record a cancellation; a queued job settles ``cancelled`` at once.

        Returns:
            The job's outcome when it is settled, None while it still runs.

        Raises:
            InvalidInput: the content cannot be stored.
            ContentTooLarge: the content is above ``max_content_bytes``.
            JobNotFound: no job has this id.
        """
        check_stored_content(content, limit_bytes=self.limits.max_content_bytes)
        stored = self._stored(job_id)
        now = self.clock.now()
        decision = decide_job(stored.facts(), CancelRequested(content), now=now, limits=self.limits)
        before = stored.job.outcome
        await _carry_out(stored, decision, now, None, outbox=self.outbox, limits=self.limits)
        if stored.job.state is RUNNING and stored.cancel_deadline is None:
            # A worker that does not stop its turn loses the job within the cancel grace.
            stored.cancel_deadline = now + timedelta(seconds=DEFAULT_CANCEL_GRACE_S)
            stored.lease_expires_at = _within(stored.lease_expires_at, stored.cancel_deadline)
        return _outcome_after(before, decision)

    async def recover_expired(self) -> list[tuple[str, str]]:
        """Requeue, or settle, running jobs whose lease ended a kill grace ago or more.

        Returns:
            ``(job_id, what)`` for each job handled: ``requeued`` or the outcome.
        """
        now = self.clock.now()
        ended_by = now - timedelta(seconds=self.kill_grace_s)
        expired = [
            s
            for s in sorted(self.jobs.values(), key=lambda s: (s.lease_expires_at, s.order))
            if s.job.state is RUNNING and s.lease_expires_at is not None
            if s.lease_expires_at <= ended_by
        ]
        handled: list[tuple[str, str]] = []
        for stored in expired:
            decision = decide_job(stored.facts(), LeaseExpired(), now=now, limits=self.limits)
            await _carry_out(stored, decision, now, None, outbox=self.outbox, limits=self.limits)
            if isinstance(decision, Settle):
                handled.append((stored.job.job_id, decision.outcome.value))
            elif isinstance(decision, Requeue):
                handled.append((stored.job.job_id, "requeued"))
        return handled

    async def queued_backlog(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        digests: bool = False,
    ) -> tuple[int, datetime | None]:
        """How many jobs wait for a worker of ``queues`` and ``agents``, and the oldest's time.

        Informational mail waiting for its digest counts only with ``digests``.
        """
        now = self.clock.now()
        waiting = [
            s.created_at
            for s in self.jobs.values()
            if s.job.state is JobState.QUEUED
            and served(s.job, queues=queues, agents=agents)
            and (digests or s.digest_at is None or s.digest_at <= now)
        ]
        return len(waiting), min(waiting, default=None)

    def _stored(self, job_id: str) -> StoredJob:
        stored = self.jobs.get(job_id)
        if stored is None:
            raise JobNotFound(f"no job has id {job_id!r}")
        return stored

    def _lease_until(self, lease_s: float) -> datetime:
        if not lease_s > 0 or not math.isfinite(lease_s):
            raise InvalidInput("lease_s must be a positive number of seconds", field="lease_s")
        return self.clock.now() + timedelta(seconds=lease_s)


def _within(lease: datetime | None, deadline: datetime | None) -> datetime | None:
    """``lease``, but never past ``deadline`` (None: no deadline)."""
    if lease is None or deadline is None:
        return lease
    return min(lease, deadline)


async def _carry_out(
    stored: StoredJob,
    decision: Decision,
    now: datetime,
    traceparent: str | None,
    *,
    outbox: Outbox,
    limits: Limits,
) -> list[str]:
    """Apply what :func:`~birddog.core.lifecycle.decide_job` decided to a stored job."""
    if isinstance(decision, Requeue):
        stored.job = stored.job.model_copy(update={"state": JobState.QUEUED})
        stored.claim_token = stored.lease_expires_at = None
        stored.recovery_count += 1
        stored.diagnostic = decision.diagnostic or stored.diagnostic
    elif isinstance(decision, RecordCancellation):
        stored.cancellation = decision.content
    elif isinstance(decision, Settle):
        return await _settle(stored, decision, now, traceparent, outbox=outbox, limits=limits)
    return []


async def _settle(
    stored: StoredJob,
    settle: Settle,
    now: datetime,
    traceparent: str | None,
    *,
    outbox: Outbox,
    limits: Limits,
) -> list[str]:
    """Settle a stored job and write the replies its mail owes into ``outbox``."""
    settled = stored.job.model_copy(update={"state": JobState.SETTLED, "outcome": settle.outcome})
    try:
        replies = replies_for(
            settled,
            content=settle.content,
            diagnostic=settle.diagnostic,
            now=now,
            max_content_bytes=limits.max_content_bytes,
        )
    except InvalidInput:
        replies = []  # not an agent job: it has no mail, so it owes no replies
    # The claim token stays: a replay of this settlement by its claim is kept, not refused.
    stored.job = settled
    stored.lease_expires_at = None
    stored.settled_at = now
    stored.content, stored.diagnostic = settle.content, settle.diagnostic
    if settle.records_cancellation:
        stored.cancellation = settle.content
    rows = [new_row(reply, now=now, traceparent=traceparent) for reply in replies]
    return await outbox.add(rows) if rows else []


REPLAYED_FIELDS: Final = (
    "queue",
    "lane",
    "priority",
    "payload",
    "recovery",
    "not_before",
    "expires_in_s",
)
"""The fields a replayed enqueue must match."""

RUNNING: Final = JobState.RUNNING


def _digest_at(job: Job, now: datetime, schedules: Mapping[str, DigestSchedule]) -> datetime | None:
    """An informational job's digest time, from its agent's schedule (as enqueue's)."""
    agent, kind = agent_of(job), job.payload.get("kind")
    if agent is None or kind not in DIGEST_KINDS:
        return None
    return next_digest(schedules.get(agent, DEFAULT_DIGEST), now)


def _may_claim_at(stored: StoredJob, now: datetime) -> bool:
    """Whether a queued job's not-before and digest have passed and its expiry has not."""
    job = stored.job
    if job.not_before is not None and job.not_before > now:
        return False
    if stored.digest_at is not None and stored.digest_at > now:
        return False
    expires_in_s = job.expires_in_s
    since = stored.created_at if stored.digest_at is None else stored.digest_at
    return expires_in_s is None or since + timedelta(seconds=expires_in_s) > now


def served(job: Job, *, queues: Sequence[str] | None, agents: Sequence[str] | None) -> bool:
    """Whether a worker of ``queues`` and ``agents`` (both None: every queue) serves ``job``."""
    reserved = job.queue.startswith(RESERVED_QUEUE_PREFIX)
    if queues is None and agents is None:
        return not reserved
    if job.queue in (queues or ()):
        return True
    return not reserved and agent_of(job) in (agents or ())


def agent_of(job: Job) -> str | None:
    """The agent a job's mail is addressed to (None: no mail)."""
    mail = job.payload.get("mail")
    to = mail.get("to") if isinstance(mail, dict) else None
    agent = to.get("agentId") if isinstance(to, dict) else None
    return agent if isinstance(agent, str) else None


def _claim_order(stored: StoredJob) -> tuple[int, datetime, int]:
    """Highest priority first, then the oldest."""
    return (-stored.job.priority, stored.created_at, stored.order)


def _outcome_after(before: Outcome | None, decision: Decision) -> Outcome | None:
    """The job's outcome once ``decision`` is carried out."""
    if isinstance(decision, Settle):
        return decision.outcome
    return before if isinstance(decision, Keep) else None
