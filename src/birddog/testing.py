"""Fakes for tests, one for every port: outbox, job store, listener, transport, clock, wake.

:class:`InMemoryOutbox`, :class:`InMemoryJobs`, :class:`ManualListener`,
:class:`RecordingTransport`, :class:`FrozenClock` and :class:`ManualWake` hold state you
can inspect (``rows``, ``jobs``, ``waits``, ``sent``, ``scheduled``) and obey the same
contract as the real adapters; one contract suite per port runs against both.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import secrets
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Final

from birddog.core.delivery import (
    ATTEMPT_LOG_MAX,
    Attempt,
    DeliveryResult,
    OutboxRow,
    Receipt,
    RowState,
    UndecodableRow,
    new_row,
)
from birddog.core.errors import InvalidInput, JobConflict, JobNotFound, StaleClaim
from birddog.core.fanout import replies_for
from birddog.core.jobs import (
    DEFAULT_MAX_CONTENT_BYTES,
    RESERVED_QUEUE_PREFIX,
    Job,
    JobState,
    check_stored_content,
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
from birddog.core.mail import AgentAddress, Outcome, Reply
from birddog.core.tokens import TOKEN_BYTES, make_token
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.ports import ClaimedJob, Clock, Outbox, Page, RouteHint, Settled
from birddog.runtime import wait_event

Answer = bool | DeliveryResult
AnswerFn = Callable[[Reply], Answer | Awaitable[Answer]]


class InMemoryOutbox:
    """An outbox in a dict: the reference implementation of the outbox port.

    Attributes:
        rows: pending and dead rows by key.
        receipts: receipts by key.
        held: agent ids whose rows are held (not claimed) until released.
        mailboxes: agent ids with a mailbox route (their replies are not posted).
        mailbox: replies delivered into a mailbox, by key.
        attempt_logs: each key's attempt log (the last 20, oldest first), kept with its
            row and, once delivered, its receipt.
        buried: rows that could not be decoded, buried as dead letters, by key.
    """

    def __init__(self) -> None:
        self.rows: dict[str, OutboxRow] = {}
        self.receipts: dict[str, Receipt] = {}
        self.held: set[str] = set()
        self.mailboxes: set[str] = set()
        self.mailbox: dict[str, Reply] = {}
        self.attempt_logs: dict[str, list[Attempt]] = {}
        self.buried: dict[str, UndecodableRow] = {}
        self._held_at: dict[str, datetime] = {}
        self._leases: dict[str, tuple[str, datetime]] = {}

    async def add(self, rows: Sequence[OutboxRow]) -> list[str]:
        """Store rows whose key has neither a row nor a receipt; return the keys added."""
        added = []
        for row in rows:
            if row.key in self.rows or row.key in self.receipts:
                continue
            self.rows[row.key] = row
            added.append(row.key)
        return added

    async def claim_page(
        self,
        *,
        after_key: str | None,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str] = (),
    ) -> Page:
        """Claim up to ``limit`` due, unheld, unleased pending rows after ``after_key``."""
        keys = [k for k in sorted(self.rows) if after_key is None or k > after_key]
        claim = uuid.uuid4().hex
        rows = self._claim(keys, claim, limit=limit, now=now, lease_s=lease_s, skip=skip_agents)
        return self._page(rows, claim, limit)

    async def claim_due(
        self,
        *,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str] = (),
        newest: int = 0,
    ) -> Page:
        """Claim up to ``limit`` of the earliest-due (then lowest-key) claimable rows.

        With ``newest``, up to that many of the latest-due claimable rows come first.
        """
        keys = sorted(self.rows, key=lambda k: (self.rows[k].due_at, k))
        claim = uuid.uuid4().hex
        fresh = min(max(newest, 0), limit)
        rows = self._claim(
            keys[::-1], claim, limit=fresh, now=now, lease_s=lease_s, skip=skip_agents
        )
        rows += self._claim(
            keys, claim, limit=limit - len(rows), now=now, lease_s=lease_s, skip=skip_agents
        )
        return self._page(sorted(rows, key=lambda r: r.key), claim, limit)

    def _claim(
        self,
        keys: list[str],
        claim: str,
        *,
        limit: int,
        now: datetime,
        lease_s: float,
        skip: Collection[str],
    ) -> list[OutboxRow]:
        rows: list[OutboxRow] = []
        for key in keys:
            if len(rows) >= limit:
                break
            row = self.rows[key]
            lease = self._leases.get(key)
            if (
                row.state is RowState.PENDING
                and row.due_at <= now
                and row.recipient.agent_id not in self.held
                and row.recipient.agent_id not in skip
                and (lease is None or lease[1] <= now)
            ):
                rows.append(row)
                self._leases[key] = (claim, now + timedelta(seconds=lease_s))
        return rows

    def _page(self, rows: list[OutboxRow], claim: str, limit: int) -> Page:
        routes = {
            row.recipient.agent_id: RouteHint(kind="mailbox")
            for row in rows
            if row.recipient.agent_id in self.mailboxes
        }
        return Page(rows=rows, claim=claim, more=len(rows) == limit, routes=routes)

    async def store(self, items: Sequence[Settled]) -> list[str]:
        """Store outcomes of rows from any number of claims; rows a claim lost are skipped."""
        stored = []
        for item in items:
            key = item.outcome.key
            lease = self._leases.get(key)
            if lease is None or lease[0] != item.claim:
                continue
            del self._leases[key]
            if item.attempt is not None:
                log = [*self.attempt_logs.get(key, []), item.attempt]
                self.attempt_logs[key] = log[-ATTEMPT_LOG_MAX:]
            outcome = item.outcome
            if isinstance(outcome, Receipt):
                row = self.rows.pop(key)
                self.receipts[key] = outcome
                if item.mailbox:
                    self.mailbox[key] = row.reply
            elif isinstance(outcome, UndecodableRow):
                self.buried[key] = outcome
            else:
                self.rows[key] = outcome
            stored.append(key)
        return stored

    async def release_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """Give rows back untouched: the lease of each row still held by its claim ends."""
        for claim, key in items:
            lease = self._leases.get(key)
            if lease is not None and lease[0] == claim:
                del self._leases[key]

    async def get(self, key: str) -> OutboxRow | Receipt | None:
        """The row or receipt under ``key``, if any."""
        return self.rows.get(key) or self.receipts.get(key)

    async def has_pending(self) -> bool:
        """Whether any reply still awaits a delivery attempt (held ones included)."""
        return any(row.state is RowState.PENDING for row in self.rows.values())

    async def next_due_at(self) -> datetime | None:
        """The earliest time a pending, unheld reply is owed an attempt."""
        due = [
            row.due_at
            for row in self.rows.values()
            if row.state is RowState.PENDING and row.recipient.agent_id not in self.held
        ]
        return min(due, default=None)

    async def next_claimable_at(
        self, *, now: datetime, skip_agents: Collection[str] = ()
    ) -> datetime | None:
        """The earliest due time of a row a claim at ``now`` could take (unleased, unheld)."""
        times = []
        for key, row in self.rows.items():
            agent = row.recipient.agent_id
            lease = self._leases.get(key)
            if (
                row.state is RowState.PENDING
                and agent not in self.held
                and agent not in skip_agents
                and (lease is None or lease[1] <= now)
            ):
                times.append(row.due_at)
        return min(times, default=None)

    @property
    def dead_letters(self) -> dict[str, OutboxRow]:
        """The dead rows by key."""
        return {key: row for key, row in self.rows.items() if row.state is RowState.DEAD}

    def hold(self, agent_id: str, *, now: datetime | None = None) -> None:
        """Hold a recipient: its rows stay, untouched and unaged, until released.

        Args:
            agent_id: the recipient.
            now: when the hold begins (needed for the release to give rows their age
                back; a second hold keeps the first time).
        """
        self.held.add(agent_id)
        if now is not None:
            self._held_at.setdefault(agent_id, now)

    def release(self, agent_id: str, *, now: datetime | None = None) -> None:
        """Release a held recipient; its pending rows get back the age they had at the hold.

        Args:
            agent_id: the recipient.
            now: when the hold ends; rows written during the hold age from here.
        """
        self.held.discard(agent_id)
        held_at = self._held_at.pop(agent_id, None)
        if held_at is None or now is None:
            return
        for key, row in self.rows.items():
            start = max(held_at, row.created_at)
            if row.recipient.agent_id == agent_id and row.state is RowState.PENDING and now > start:
                self.rows[key] = replace(row, created_at=row.created_at + (now - start))


class RecordingTransport:
    """A transport that records every reply and answers with a function or a fixed value.

    Args:
        answer: ``True``/``False``, a delivery result, or a (sync or async) function of the
            reply returning one. A function may raise to simulate a transport error.

    Attributes:
        sent: every reply posted, in order, retries included.
    """

    def __init__(self, answer: Answer | AnswerFn = True) -> None:
        self.answer = answer
        self.sent: list[Reply] = []

    async def post(self, reply: Reply) -> Answer:
        """Record the reply and answer."""
        self.sent.append(reply)
        if not callable(self.answer):
            return self.answer
        result = self.answer(reply)
        if inspect.isawaitable(result):
            return await result
        return result


class FrozenClock:
    """A clock that moves only when told.

    Args:
        at: the starting time (default 2026-01-01 UTC).
    """

    def __init__(self, at: datetime | None = None) -> None:
        self.at = at or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The frozen time."""
        return self.at

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward and return the new time."""
        self.at += timedelta(seconds=seconds)
        return self.at


@dataclass
class ManualWake:
    """A wake scheduler that only records what it was asked.

    Attributes:
        scheduled: every requested wake time, in order.
        slept: every time a drainer going to sleep was told to look again, in order.
    """

    scheduled: list[datetime] = field(default_factory=list)

    slept: list[datetime] = field(default_factory=list)

    async def schedule_wake(self, *, at: datetime) -> None:
        """Record the wake."""
        self.scheduled.append(at)

    async def going_to_sleep(self, *, until: datetime, now: datetime) -> datetime:
        """Record a drainer going to sleep; it looks again by ``until`` or an armed wake."""
        armed = [at for at in self.scheduled if now < at < until]
        self.slept.append(min(armed, default=until))
        return self.slept[-1]

    @property
    def earliest(self) -> datetime | None:
        """The earliest wake requested so far."""
        return min(self.scheduled, default=None)


class InMemoryTokenBook:
    """Bearer tokens and the agent sessions they name (a :class:`~birddog.ports.TokenBook`).

    Args:
        tokens: who each token is.

    Attributes:
        tokens: who each token is; change it to revoke or add one.
    """

    def __init__(self, tokens: dict[str, AgentAddress] | None = None) -> None:
        self.tokens: dict[str, AgentAddress] = dict(tokens or {})

    def issue(self, address: AgentAddress) -> str:
        """A new token (``bd_`` and 32 random bytes, as ``birddog agent`` makes) for ``address``."""
        token = make_token(secrets.token_bytes(TOKEN_BYTES))
        self.tokens[token] = address
        return token

    def revoke(self, token: str) -> None:
        """End ``token``; an unknown one is ignored."""
        self.tokens.pop(token, None)

    async def authenticate(self, token: str) -> AgentAddress | None:
        """The agent session ``token`` names; None for an unknown or malformed one."""
        return self.tokens.get(token) if isinstance(token, str) else None


class ManualListener:
    """A listener the test rings: :meth:`notify` is a ``NOTIFY``, :meth:`wait` reports it.

    A notification given while nobody waits is kept for the next :meth:`wait`, as a
    ``LISTEN`` connection keeps it; one wait takes every notification given before it.

    Args:
        max_wait_s: the longest one :meth:`wait` lasts, whatever the caller asks (an idle
            ``LISTEN`` that times out soon); None waits as long as asked.

    Attributes:
        waits: how many times :meth:`wait` was called.
    """

    def __init__(self, *, max_wait_s: float | None = None) -> None:
        self.max_wait_s = max_wait_s
        self.waits = 0
        self._rung = asyncio.Event()

    def notify(self) -> None:
        """Announce new work, as a ``NOTIFY`` would."""
        self._rung.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (at most ``max_wait_s``) for a notification.

        Args:
            timeout_s: the longest wait the caller allows.

        Returns:
            True when notified (before or during the wait), False when the time passed.
        """
        self.waits += 1
        if self.max_wait_s is not None:
            timeout_s = min(timeout_s, self.max_wait_s)
        if not await wait_event(self._rung, timeout_s):
            return False
        self._rung.clear()
        return True


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
            JobConflict: a job with this id exists with different fields.
        """
        if job.state is not JobState.QUEUED or job.outcome is not None:
            raise InvalidInput("an enqueued job must be queued, with no outcome", field="state")
        stored = self.jobs.get(job.job_id)
        if stored is None:
            self.jobs[job.job_id] = StoredJob(job, len(self.jobs), self.clock.now())
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
            worker_id: who claims (unused: kept for the port's shape).

        Returns:
            The claimed job, or None when no queue has a claimable head.
        """
        del worker_id
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
        heads = {q: s for q, s in heads.items() if _served(s.job, queues=queues, agents=agents)}
        free = [s for s in heads.values() if running[s.job.queue] < self.queue_concurrency]
        if not free:
            return None
        stored = min(free, key=_claim_order)
        stored.job = stored.job.model_copy(update={"state": RUNNING})
        stored.claim_token = uuid.uuid4().hex
        stored.lease_expires_at = until
        return ClaimedJob(stored.job, stored.claim_token, until, stored.recovery_count)

    async def claim_many(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
        limit: int = 1,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs, one :meth:`claim` after another, in claim order.

        Returns:
            The claimed jobs; fewer than ``limit`` when no other head could be claimed.
        """
        taken: list[ClaimedJob] = []
        while len(taken) < limit:
            claimed = await self.claim(
                queues=queues, agents=agents, lease_s=lease_s, worker_id=worker_id
            )
            if claimed is None:
                break
            taken.append(claimed)
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
        stored.lease_expires_at = self._lease_until(lease_s)
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
        self, *, queues: Sequence[str] | None = None, agents: Sequence[str] | None = None
    ) -> tuple[int, datetime | None]:
        """How many jobs wait for a worker of ``queues`` and ``agents``, and the oldest's time."""
        waiting = [
            s.created_at
            for s in self.jobs.values()
            if s.job.state is JobState.QUEUED and _served(s.job, queues=queues, agents=agents)
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


def _may_claim_at(stored: StoredJob, now: datetime) -> bool:
    """Whether a queued job's not-before has passed and its expiry has not."""
    job = stored.job
    if job.not_before is not None and job.not_before > now:
        return False
    expires_in_s = job.expires_in_s
    return expires_in_s is None or stored.created_at + timedelta(seconds=expires_in_s) > now


def _served(job: Job, *, queues: Sequence[str] | None, agents: Sequence[str] | None) -> bool:
    """Whether a worker of ``queues`` and ``agents`` (both None: every queue) serves ``job``."""
    reserved = job.queue.startswith(RESERVED_QUEUE_PREFIX)
    if queues is None and agents is None:
        return not reserved
    if job.queue in (queues or ()):
        return True
    return not reserved and _agent_of(job) in (agents or ())


def _agent_of(job: Job) -> str | None:
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
