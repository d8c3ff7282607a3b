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

from typing import Final

from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.core.lifecycle import DEFAULT_MAX_QUEUED_S, LEASE_EXPIRED_DIAGNOSTIC, Finished, Limits
from birddog.core.turns import DEFAULT_KILL_GRACE_S
from birddog.ports import ClaimedJob, Clock
from birddog.postgres.enqueue import SenderConnection, enqueue_accepted_job
from birddog.postgres.job_claims import CLAIM_ATTEMPTS, PostgresJobClaims
from birddog.postgres.job_config import JobStoreSettings
from birddog.postgres.job_operations import RECOVER_BATCH, PostgresJobOperations
from birddog.postgres.pool import Pool

JOBS_CHANNEL: Final = "birddog_jobs"
"""Enqueued and requeued jobs are announced here (payload: the queue), at commit."""


class PostgresJobs:
    """The job store: its workers' side and its operators' side, composed.

    The one object the wiring passes around. It holds two objects over the same
    settings: :attr:`claims` (:class:`~birddog.postgres.job_claims.PostgresJobClaims`:
    claim, heartbeat, record a turn, the backlog, finish, settle, interrupt) and
    :attr:`operations` (:class:`~birddog.postgres.job_operations.PostgresJobOperations`:
    cancel, get, counts, turns on a host, repair the heads, the reapers). Their methods
    are its own, bound once here, so each signature is written in one place.

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

    Attributes:
        settings: what both sides share.
        claims: the workers' side.
        operations: the operators' and reapers' side.

    Raises:
        InvalidInput: ``queue_concurrency`` is below 1.
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
        self.settings = JobStoreSettings(
            pool=pool,
            clock=clock,
            limits=Limits(max_content_bytes=max_content_bytes, max_queued_s=max_queued_s),
            schedule_wake=schedule_wake,
            queue_concurrency=queue_concurrency,
            kill_grace_s=kill_grace_s,
        )
        self.claims = claims = PostgresJobClaims(self.settings)
        self.operations = operations = PostgresJobOperations(self.settings)
        self.claim = claims.claim
        self.claim_many = claims.claim_many
        self.heartbeat = claims.heartbeat
        self.record_turn = claims.record_turn
        self.queued_backlog = claims.queued_backlog
        self.finish = claims.finish
        self.settle = claims.settle
        self.interrupt = claims.interrupt
        self.cancel = operations.cancel
        self.get = operations.get
        self.counts = operations.counts
        self.not_yet_due = operations.not_yet_due
        self.turns_since = operations.turns_since
        self.turns_on_host = operations.turns_on_host
        self.repair_queue_heads = operations.repair_queue_heads
        self.recover_expired = operations.recover_expired
        self.cancel_queued_too_long = operations.cancel_queued_too_long

    @property
    def limits(self) -> Limits:
        """The content size and the maximum queued age jobs are judged by."""
        return self.settings.limits

    @property
    def kill_grace_s(self) -> float:
        """How long after a lease ended its job is recovered."""
        return self.settings.kill_grace_s

    @property
    def max_content_bytes(self) -> int:
        """The largest settlement or cancellation content accepted, in UTF-8 bytes."""
        return self.settings.limits.max_content_bytes


__all__ = [
    "CLAIM_ATTEMPTS",
    "JOBS_CHANNEL",
    "LEASE_EXPIRED_DIAGNOSTIC",
    "RECOVER_BATCH",
    "ClaimedJob",
    "Finished",
    "JobStoreSettings",
    "PostgresJobClaims",
    "PostgresJobOperations",
    "PostgresJobs",
    "SenderConnection",
    "enqueue_accepted_job",
]
