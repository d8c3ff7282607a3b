"""The Postgres job store: Watchdog-shaped jobs in ``birddog.jobs``.

A sender enqueues a job inside its own transaction with :func:`enqueue_accepted_job`; a
worker claims it with :meth:`PostgresJobs.claim` (``FOR UPDATE SKIP LOCKED``, a claim
token and a lease), keeps the lease with :meth:`PostgresJobs.heartbeat`, and settles it
with :meth:`PostgresJobs.settle`, which writes the job's replies into the outbox and arms
one wake in the same transaction: a settlement is never committed without its fan-out,
nor the fan-out without its settlement.

The life of a job::

    queued ──claim──▶ running ──settle / interrupt (no budget)──▶ settled
      ▲                  │
      └── lease expired / interrupt, while recovery_count < recovery.maxRecoveries

A recorded cancellation wins over whatever the executor reports: a cancelled queued job
settles ``cancelled`` at once; a running one settles ``cancelled`` when its worker settles
or stops, or when its lease expires. Every value reaches SQL as a ``$n`` parameter, and
JSON travels as text, so the statements behave the same on BirdDog's pool and on a
caller's connection whatever JSON codec it has.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, LiteralString, Protocol, TypeAlias

import asyncpg
import structlog
from asyncpg.pool import PoolConnectionProxy
from pydantic import JsonValue
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from birddog.core.delivery import new_row
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import (
    InvalidInput,
    InvalidJobPayload,
    JobConflict,
    JobNotFound,
    StaleClaim,
    StoreUnavailable,
)
from birddog.core.fanout import replies_for
from birddog.core.jobs import (
    DEFAULT_MAX_CONTENT_BYTES,
    Job,
    JobState,
    Recovery,
    check_content_size,
)
from birddog.core.mail import Outcome, Reply
from birddog.core.model import check_text
from birddog.ports import Clock
from birddog.postgres.outbox import insert_rows
from birddog.postgres.pool import Connection, Pool, store_errors
from birddog.postgres.sql import queries
from birddog.postgres.wake import schedule_wake_on

log = structlog.get_logger("birddog.jobs")

JOBS_CHANNEL: Final = "birddog_jobs"
"""Enqueued and requeued jobs are announced here (payload: the queue), at commit."""

LEASE_EXPIRED_DIAGNOSTIC: Final = "worker lease expired; nobody knows whether the work happened"
"""The diagnostic of a job settled ``outcome_unknown`` by :meth:`PostgresJobs.recover_expired`."""

RECOVER_BATCH: Final = 100
"""Expired jobs handled per transaction by :meth:`PostgresJobs.recover_expired`."""

_JOB_FIELDS: Final = ("queue", "lane", "priority", "payload", "recovery")
"""The fields a replayed enqueue must match, by their JSON names."""

SenderConnection: TypeAlias = (
    "Connection | PoolConnectionProxy[asyncpg.Record] | AsyncConnection | AsyncSession"
)
"""What :func:`enqueue_accepted_job` runs on: an asyncpg connection (pooled or not), or a
SQLAlchemy ``AsyncConnection`` or ``AsyncSession`` on the asyncpg driver."""

_Conn: TypeAlias = "Connection | PoolConnectionProxy[asyncpg.Record]"


class _Row(Protocol):
    """A result row by column name: an asyncpg ``Record`` or a SQLAlchemy ``RowMapping``."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job a worker holds: run it, heartbeat, then settle it with the claim token.

    Attributes:
        job: the job, state ``running``.
        claim_token: the token of this claim (uuid text); only it can settle the job.
        lease_expires_at: when the claim lapses unless a heartbeat extends it.
        recovery_count: how many times the job was queued again after losing a worker.
    """

    job: Job
    claim_token: str
    lease_expires_at: datetime
    recovery_count: int


# --------------------------------------------------------------------------------------
# enqueue, inside the caller's transaction
# --------------------------------------------------------------------------------------


async def enqueue_accepted_job(
    conn: SenderConnection, job: Job, *, created_at: datetime | None = None
) -> bool:
    """Insert a queued job inside the caller's transaction; roll back and nothing was sent.

    Enqueueing the same ``jobId`` again is a replay: it is accepted (and writes nothing)
    only when queue, lane, priority, payload and recovery all match the stored job,
    whatever state that job has reached. A new job is announced with
    ``NOTIFY birddog_jobs`` (payload: its queue), which Postgres delivers at commit.

    Args:
        conn: an asyncpg connection (in a transaction or not; without one, the insert and
            its notification commit together on their own), or a SQLAlchemy
            ``AsyncConnection``/``AsyncSession`` on the asyncpg driver (its transaction
            begins if needed and stays open for the caller to commit).
        job: the job, as :func:`birddog.agent_job` returns it: queued, no outcome.
        created_at: the job's age for claim order (default: the database's clock).

    Returns:
        True when the job was inserted, False when it was an identical replay.

    Raises:
        InvalidInput: the job is not queued, has an outcome, or its payload holds what
            PostgreSQL JSON cannot store (NUL, lone surrogates, NaN); nothing is written.
        JobConflict: a job with this id exists with different fields, named in the message.
        StoreUnavailable: the database could not be reached.
    """
    if not isinstance(job, Job):
        job = Job.model_validate(job)
    if job.state is not JobState.QUEUED:
        raise InvalidInput(f"an enqueued job must be queued, not {job.state.value}", field="state")
    if job.outcome is not None:
        raise InvalidInput("an enqueued job has no outcome yet", field="outcome")
    payload = _json_text(job.payload, field="payload")
    recovery = None if job.recovery is None else job.recovery.model_dump_json()
    args = (job.job_id, job.queue, job.lane, job.priority, payload, recovery, created_at)
    rows = await _run_on_sender(conn, queries["jobs_enqueue"], args)
    if rows:
        return True
    stored = await _run_on_sender(conn, queries["jobs_get"], (job.job_id,))
    if not stored:
        # The insert met the id, yet this transaction cannot read it: it was deleted
        # meanwhile, or the caller's snapshot predates its commit. Nothing to compare.
        raise StoreUnavailable(f"job {job.job_id!r} changed while it was enqueued; try again")
    differing = _differing_fields(job, _job_from_row(stored[0]))
    if differing:
        raise JobConflict(
            f"job {job.job_id!r} already exists with a different {', '.join(differing)}; "
            "a replayed enqueue must match the stored job exactly"
        )
    return False


async def _run_on_sender(
    conn: SenderConnection, sql: LiteralString, args: Sequence[object]
) -> list[_Row]:
    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, AsyncConnection):
        if conn.dialect.driver != "asyncpg":
            raise TypeError(
                "enqueue_accepted_job needs SQLAlchemy's asyncpg driver "
                f"(postgresql+asyncpg://), not {conn.dialect.driver}"
            )
        # exec_driver_sql goes through SQLAlchemy's cursor, which begins the
        # connection's transaction first; the raw driver connection would not.
        try:
            with store_errors("enqueue_accepted_job"):
                result = await conn.exec_driver_sql(sql, tuple(args))
                return [row._mapping for row in result]
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreUnavailable(
                    f"database unavailable during enqueue_accepted_job: {type(exc).__name__}"
                ) from exc
            raise
    if isinstance(conn, asyncpg.Connection | PoolConnectionProxy):
        with store_errors("enqueue_accepted_job"):
            if conn.is_in_transaction():
                return list(await conn.fetch(sql, *args))
            async with conn.transaction():
                return list(await conn.fetch(sql, *args))
    raise TypeError(
        "enqueue_accepted_job needs an asyncpg connection or a SQLAlchemy "
        f"AsyncConnection/AsyncSession, not {type(conn).__name__}"
    )


def _differing_fields(job: Job, stored: Job) -> list[str]:
    return [name for name in _JOB_FIELDS if getattr(job, name) != getattr(stored, name)]


def _json_text(value: JsonValue, *, field: str) -> str:
    """JSON text PostgreSQL's jsonb accepts, or InvalidInput naming the offending field."""
    problem = _json_problem(value, field)
    if problem is not None:
        where, why = problem
        raise InvalidInput(f"{where} {why}", field=where)
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _json_problem(value: object, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        try:
            check_text(value)
        except ValueError as exc:
            return path, str(exc)
    elif isinstance(value, float) and not math.isfinite(value):
        return path, "must be a finite number (JSON has no NaN or Infinity)"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            problem = _json_problem(key, path) or _json_problem(item, f"{path}.{key}")
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}.{index}")
            if problem is not None:
                return problem
    return None


# --------------------------------------------------------------------------------------
# the store workers and operators use
# --------------------------------------------------------------------------------------


class _UtcClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Settlement:
    """One job to settle in a transaction that holds its row lock."""

    row: _Row
    outcome: Outcome
    content: str
    diagnostic: str | None


class PostgresJobs:
    """The job store: claim, heartbeat, settle (with fan-out), cancel, recover.

    Args:
        pool: the asyncpg pool (from :func:`birddog.postgres.pool.create_pool`).
        schedule_wake: arm the drain's wake when a settlement writes replies (turn off
            only when something else wakes the drain).
        max_content_bytes: the largest settlement or cancellation content accepted.
        clock: the current time (default: the system clock, UTC); leases, settlement
            times and reply times come from it, so tests can freeze time.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        schedule_wake: bool = True,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        clock: Clock | None = None,
    ) -> None:
        self.pool = pool
        self.schedule_wake = schedule_wake
        self.max_content_bytes = max_content_bytes
        self.clock: Clock = clock or _UtcClock()

    async def claim(
        self,
        *,
        queues: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
    ) -> ClaimedJob | None:
        """Claim the next queued job: highest priority first, then the oldest.

        One statement (``FOR UPDATE SKIP LOCKED``): concurrent claimers never get the same
        job and never wait on each other.

        Args:
            queues: claim only from these queues (session ids); None for every queue.
            lease_s: how long the claim holds without a heartbeat.
            worker_id: who claims, recorded on the job for operators.

        Returns:
            The claimed job, or None when no job is queued.

        Raises:
            InvalidInput: ``lease_s`` is not positive, or ``queues`` is a bare string.
            StoreUnavailable: the database could not be reached.
        """
        claimed = await self.claim_many(
            queues=queues, lease_s=lease_s, worker_id=worker_id, limit=1
        )
        return claimed[0] if claimed else None

    async def claim_many(
        self,
        *,
        queues: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
        limit: int = 1,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` queued jobs in one statement, in claim order.

        Args:
            queues: claim only from these queues; None for every queue.
            lease_s: how long each claim holds without a heartbeat.
            worker_id: who claims, recorded on the jobs.
            limit: the most jobs to claim.

        Returns:
            The claimed jobs, highest priority first, then oldest.

        Raises:
            InvalidInput: ``limit`` is below 1, ``lease_s`` is not positive, or ``queues``
                is a bare string.
            StoreUnavailable: the database could not be reached.
        """
        if limit < 1:
            raise InvalidInput("limit must be at least 1", field="limit")
        lease_until = self._lease_until(lease_s)
        if isinstance(queues, str):
            raise InvalidInput("queues must be a list of queue names, not a string", field="queues")
        queue_list = None if queues is None else list(queues)
        with store_errors("claim"):
            rows = await self.pool.fetch(
                queries["jobs_claim"], queue_list, limit, lease_until, worker_id or None
            )
        rows = sorted(rows, key=lambda row: (-row["priority"], row["created_at"], row["job_id"]))
        return [
            ClaimedJob(
                job=_job_from_row(row),
                claim_token=str(row["claim_token"]),
                lease_expires_at=row["lease_expires_at"],
                recovery_count=row["recovery_count"],
            )
            for row in rows
        ]

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
            StoreUnavailable: the database could not be reached.
        """
        token = _token(claim_token)
        lease_until = self._lease_until(lease_s)
        if token is None:
            raise StaleClaim(f"claim token {claim_token!r} is not a claim token")
        with store_errors("heartbeat"):
            cancel_requested = await self.pool.fetchval(
                queries["jobs_heartbeat"], job_id, token, lease_until
            )
        if cancel_requested is None:
            raise StaleClaim(f"job {job_id!r} is no longer held by this claim")
        return bool(cancel_requested)

    async def settle(
        self,
        *,
        job_id: str,
        claim_token: str,
        outcome: Outcome,
        content: str,
        diagnostic: str | None = None,
        meta: object = None,
    ) -> list[str]:
        """Settle a running job and write its replies, in one transaction.

        A recorded cancellation wins: the job settles ``cancelled`` and its replies carry
        the cancellation content instead. Replaying the settlement with the same claim
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
            InvalidInput: the outcome is unknown or the content holds NUL or a lone
                surrogate; nothing is written and the job stays running.
            ContentTooLarge: the content is above ``max_content_bytes``; nothing written.
            JobNotFound: no job has this id.
            StaleClaim: the job is not running under this claim (another claim holds it,
                it was recovered, or it settled otherwise).
            StoreUnavailable: the database could not be reached; nothing was committed.
        """
        del meta  # for the caller's own fan-out wrapper only
        outcome = _outcome(outcome)
        self._check_content(content)
        token = _token(claim_token)
        now = self.clock.now()
        with store_errors("settle"):
            async with self.pool.acquire() as conn, conn.transaction():
                row = await self._lock(conn, job_id)
                if row["state"] == JobState.SETTLED:
                    if token is not None and row["claim_token"] == token:
                        replayed = Outcome(row["outcome"])
                        if replayed is outcome or (
                            replayed is Outcome.CANCELLED and row["cancel_requested_at"]
                        ):
                            return []
                    raise StaleClaim(f"job {job_id!r} is already settled {row['outcome']}")
                _check_claim(row, token)
                return await self._settle_locked(
                    conn, [self._settlement(row, outcome, content, diagnostic)], now
                )

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
            StoreUnavailable: the database could not be reached; nothing was committed.
        """
        token = _token(claim_token)
        now = self.clock.now()
        with store_errors("interrupt"):
            async with self.pool.acquire() as conn, conn.transaction():
                row = await self._lock(conn, job_id)
                if (
                    row["state"] == JobState.SETTLED
                    and token is not None
                    and row["claim_token"] == token
                    and row["outcome"] in (Outcome.INTERRUPTED, Outcome.CANCELLED)
                ):
                    return Outcome(row["outcome"])
                _check_claim(row, token)
                if row["cancel_requested_at"] is None and _budget_left(row):
                    await conn.fetch(
                        queries["jobs_requeue"], [job_id], [bounded_diagnostic(diagnostic)]
                    )
                    return None
                settlement = self._settlement(row, Outcome.INTERRUPTED, "", diagnostic)
                await self._settle_locked(conn, [settlement], now)
                return settlement.outcome

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
            StoreUnavailable: the database could not be reached; nothing was committed.
        """
        self._check_content(content)
        now = self.clock.now()
        with store_errors("cancel"):
            async with self.pool.acquire() as conn, conn.transaction():
                row = await self._lock(conn, job_id)
                if row["state"] == JobState.SETTLED:
                    return Outcome(row["outcome"])
                await conn.fetch(queries["jobs_request_cancel"], job_id, now, content)
                if row["state"] == JobState.RUNNING:
                    return None
                settlement = _Settlement(row, Outcome.CANCELLED, content, None)
                await self._settle_locked(conn, [settlement], now)
                return Outcome.CANCELLED

    async def recover_expired(
        self, *, now: datetime | None = None, limit: int = RECOVER_BATCH
    ) -> list[tuple[str, str]]:
        """Handle running jobs whose lease expired: their worker is gone.

        Each job is queued again while ``recovery_count < recovery.maxRecoveries``
        (``recovery_count`` + 1, claim cleared); otherwise it settles ``outcome_unknown``
        (nobody knows whether the work happened) and its replies are written. A job
        whose cancellation was recorded settles ``cancelled`` instead. One transaction per
        batch of ``limit`` jobs, until none is left; jobs another transaction holds (a
        worker settling right now) are skipped.

        Args:
            now: the time leases are judged at (default: the store's clock).
            limit: jobs per transaction.

        Returns:
            ``(job_id, what)`` for each job handled, ``what`` being ``requeued``,
            ``outcome_unknown`` or ``cancelled``.

        Raises:
            InvalidInput: ``limit`` is below 1.
            StoreUnavailable: the database could not be reached; batches already
                committed stay committed.
        """
        if limit < 1:
            raise InvalidInput("limit must be at least 1", field="limit")
        at = now or self.clock.now()
        handled: list[tuple[str, str]] = []
        while True:
            with store_errors("recover_expired"):
                async with self.pool.acquire() as conn, conn.transaction():
                    rows = await conn.fetch(queries["jobs_lock_expired"], at, limit)
                    batch = await self._recover_locked(conn, rows, at)
            handled.extend(batch)
            if len(rows) < limit:
                return handled

    async def get(self, job_id: str) -> Job:
        """The job with this id.

        Args:
            job_id: the job.

        Returns:
            The job as stored now.

        Raises:
            JobNotFound: no job has this id.
            StoreUnavailable: the database could not be reached.
        """
        with store_errors("get"):
            row = await self.pool.fetchrow(queries["jobs_get"], job_id)
        if row is None:
            raise JobNotFound(f"no job has id {job_id!r}")
        return _job_from_row(row)

    async def counts(self) -> dict[str, int]:
        """How many jobs are queued, running and settled.

        Returns:
            Counts by state; every state is present, zero when empty.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        with store_errors("counts"):
            rows = await self.pool.fetch(queries["jobs_counts"])
        counts = dict.fromkeys((state.value for state in JobState), 0)
        counts.update({row["state"]: row["jobs"] for row in rows})
        return counts

    # ---- inside a transaction that holds the rows' locks -----------------------------

    async def _lock(self, conn: _Conn, job_id: str) -> _Row:
        row = await conn.fetchrow(queries["jobs_lock"], job_id)
        if row is None:
            raise JobNotFound(f"no job has id {job_id!r}")
        return row

    async def _recover_locked(
        self, conn: _Conn, rows: Sequence[_Row], now: datetime
    ) -> list[tuple[str, str]]:
        requeue: list[str] = []
        settle: list[_Settlement] = []
        handled: list[tuple[str, str]] = []
        for row in rows:
            if row["cancel_requested_at"] is None and _budget_left(row):
                requeue.append(row["job_id"])
                handled.append((row["job_id"], "requeued"))
            else:
                settlement = self._settlement(
                    row, Outcome.OUTCOME_UNKNOWN, "", LEASE_EXPIRED_DIAGNOSTIC
                )
                settle.append(settlement)
                handled.append((row["job_id"], settlement.outcome.value))
        if requeue:
            await conn.fetch(queries["jobs_requeue"], requeue, [None] * len(requeue))
        if settle:
            await self._settle_locked(conn, settle, now)
        return handled

    def _settlement(
        self, row: _Row, outcome: Outcome, content: str, diagnostic: str | None
    ) -> _Settlement:
        """What settling this row comes to: a recorded cancellation wins."""
        if row["cancel_requested_at"] is not None:
            return _Settlement(row, Outcome.CANCELLED, row["cancel_content"] or "", diagnostic)
        return _Settlement(row, outcome, content, diagnostic)

    async def _settle_locked(
        self, conn: _Conn, settlements: Sequence[_Settlement], now: datetime
    ) -> list[str]:
        """Mark the jobs settled, write their replies, arm one wake: all or nothing."""
        replies: list[Reply] = []
        diagnostics: list[str | None] = []
        for item in settlements:
            diagnostic = None if item.diagnostic is None else bounded_diagnostic(item.diagnostic)
            diagnostics.append(diagnostic)
            # Built before the first write, so a reply that cannot exist fails the
            # settlement while nothing has changed yet.
            replies.extend(self._replies(item, diagnostic, now))
        await conn.fetch(
            queries["jobs_settle"],
            [item.row["job_id"] for item in settlements],
            [item.outcome.value for item in settlements],
            [item.content for item in settlements],
            diagnostics,
            now,
        )
        if not replies:
            return []
        keys = await insert_rows(conn, [new_row(reply, now=now) for reply in replies])
        if keys and self.schedule_wake:
            await schedule_wake_on(conn, now)
        return keys

    def _replies(self, item: _Settlement, diagnostic: str | None, now: datetime) -> list[Reply]:
        settled = _job_from_row(item.row).model_copy(
            update={"state": JobState.SETTLED, "outcome": item.outcome}
        )
        try:
            return replies_for(
                settled,
                content=item.content,
                diagnostic=diagnostic,
                now=now,
                max_content_bytes=self.max_content_bytes,
            )
        except InvalidJobPayload as exc:
            # The store is Watchdog-shaped and never requires a BirdDog payload; a job
            # that is not an agent job has no mail, so it owes no replies.
            log.warning("job_settled_without_replies", job_id=settled.job_id, field=exc.field)
            return []

    def _check_content(self, content: str) -> None:
        if not isinstance(content, str):
            raise InvalidInput("content must be a string", field="content")
        try:
            check_text(content)
        except ValueError as exc:
            raise InvalidInput(f"content {exc}", field="content") from None
        check_content_size(content, limit_bytes=self.max_content_bytes)

    def _lease_until(self, lease_s: float) -> datetime:
        if not lease_s > 0 or not math.isfinite(lease_s):
            raise InvalidInput("lease_s must be a positive number of seconds", field="lease_s")
        return self.clock.now() + timedelta(seconds=lease_s)


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------


def _job_from_row(row: _Row) -> Job:
    recovery = row["recovery"]
    return Job(
        job_id=row["job_id"],
        queue=row["queue"],
        lane=row["lane"],
        priority=row["priority"],
        state=JobState(row["state"]),
        payload=json.loads(row["payload"]),
        recovery=None if recovery is None else Recovery.model_validate_json(recovery),
        outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
    )


def _budget_left(row: _Row) -> bool:
    recovery = row["recovery"]
    budget = 0 if recovery is None else Recovery.model_validate_json(recovery).max_recoveries
    return bool(row["recovery_count"] < budget)


def _check_claim(row: _Row, token: uuid.UUID | None) -> None:
    if row["state"] != JobState.RUNNING or token is None or row["claim_token"] != token:
        raise StaleClaim(
            f"job {row['job_id']!r} is not running under this claim (it is {row['state']})"
        )


def _token(claim_token: str) -> uuid.UUID | None:
    """The claim token as a UUID; None when it cannot be one (so it holds nothing)."""
    try:
        return uuid.UUID(str(claim_token))
    except ValueError:
        return None


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
    "PostgresJobs",
    "SenderConnection",
    "enqueue_accepted_job",
]
