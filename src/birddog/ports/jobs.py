"""The job ports: the store a worker claims and settles through, and what goes with it.

Its reaper and backlog, cancellations, turns, a process's row among the running daemons,
and the operator's job commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from birddog.core.jobs import Job
from birddog.core.lifecycle import ClaimEvent, Finished
from birddog.core.mail import Outcome
from birddog.core.turns import Turn

__all__ = [
    "ClaimedJob",
    "ClaimedJobLike",
    "DaemonRow",
    "JobAdmin",
    "JobBacklog",
    "JobCancels",
    "JobReaper",
    "JobStore",
    "TurnRecords",
]


class DaemonRow(Protocol):
    """This process's row among the running daemons and workers (``birddog status``)."""

    async def seen(self) -> None:
        """Record that this process is alive."""
        ...

    async def gone(self) -> None:
        """Mark the row stopped, on a clean stop."""
        ...


class JobReaper(Protocol):
    """Recovers running jobs whose lease expired (the reaper every process may run)."""

    async def recover_expired(self) -> list[tuple[str, str]]:
        """Queue again, or settle, the jobs whose worker is gone: ``(job_id, what)`` each."""
        ...


class JobBacklog(Protocol):
    """Says how much work waits (a worker's queue gauges)."""

    async def queued_backlog(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        digests: bool = False,
    ) -> tuple[int, datetime | None]:
        """How many jobs wait for a worker of ``queues`` and ``agents``, and the oldest's time.

        Informational mail waiting for its digest waits for no worker and is left out,
        unless ``digests`` (a live session, which takes it at once).
        """
        ...


class ClaimedJobLike(Protocol):
    """A claimed job: the job, the claim token that may settle it, its trace context."""

    @property
    def claim_token(self) -> str:
        """The token of this claim."""
        ...

    @property
    def job(self) -> Job:
        """The claimed job."""
        ...

    @property
    def traceparent(self) -> str | None:
        """The W3C context the job was enqueued in (None: not traced)."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job a worker holds: run it, heartbeat, then settle it with the claim token.

    Attributes:
        job: the job, state ``running``.
        claim_token: the token of this claim (uuid text); only it can settle the job.
        lease_expires_at: when the claim lapses unless a heartbeat extends it.
        recovery_count: how many times the job was queued again after losing a worker.
        traceparent: the W3C context the job was enqueued in (None: not traced).
    """

    job: Job
    claim_token: str
    lease_expires_at: datetime
    recovery_count: int
    traceparent: str | None = None


class JobStore(JobBacklog, Protocol):
    """The job store operations a worker needs (``PostgresJobs``).

    :meth:`queued_backlog` tells a worker run with ``once`` whether it has drained;
    :meth:`get` tells a live session why a job is not its to settle.
    """

    async def get(self, job_id: str) -> Job:
        """The job with this id, as stored now (raises ``JobNotFound`` when there is none)."""
        ...

    async def claim(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
    ) -> ClaimedJobLike | None:
        """Claim the next job of ``queues`` or of ``agents``' sessions (both None: any), or None."""
        ...

    async def claim_many(
        self,
        *,
        queues: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        lease_s: float = 60.0,
        worker_id: str = "",
        limit: int = 1,
        batch: int = 1,
    ) -> Sequence[ClaimedJobLike]:
        """Claim up to ``limit`` turns as :meth:`claim` does; fewer: nothing more to take now.

        With ``batch`` above 1 each turn is the head of a queue and up to ``batch - 1``
        more queued jobs of that queue behind it (claimable now, in claim order), all
        running under their own claim tokens; the head holds the queue's slot, so no
        other turn of the queue starts until it settles. The jobs of one turn are
        consecutive in the result.
        """
        ...

    async def heartbeat(self, *, job_id: str, claim_token: str, lease_s: float) -> bool:
        """Extend the lease; True when a cancellation was requested."""
        ...

    async def record_turn(self, *, job_id: str, claim_token: str, turn: Turn) -> None:
        """Record where the claimed job's turn runs (its supervisor), under the claim."""
        ...

    async def finish(
        self, *, job_id: str, claim_token: str, event: ClaimEvent, traceparent: str | None = None
    ) -> Finished:
        """Carry out the lifecycle's decision for a result or a stop, fan-out included.

        The replies' posts continue ``traceparent`` (the settlement's span), if given.
        """
        ...


class JobCancels(Protocol):
    """Records cancellations (``PostgresJobs.cancel``)."""

    async def cancel(self, *, job_id: str, content: str) -> Outcome | None:
        """Cancel a job: the outcome if it settled, None while it still runs."""
        ...


class TurnRecords(Protocol):
    """Where running jobs' turns run, as workers recorded them (``PostgresJobs``)."""

    async def turns_on_host(self, *, host: str, boot_id: str) -> list[tuple[str, Turn]]:
        """``(job_id, turn)`` of every running job whose turn was recorded on this host."""
        ...


class JobAdmin(JobCancels, Protocol):
    """The operator's job commands: one job, counts, cancels (``PostgresJobs``)."""

    async def get(self, job_id: str) -> Job:
        """The job with this id, as stored now (raises ``JobNotFound`` when there is none)."""
        ...

    async def counts(self) -> dict[str, int]:
        """How many jobs are in each state (every state present)."""
        ...

    async def not_yet_due(self) -> tuple[int, datetime | None]:
        """How many queued jobs may not run before a later time, and the earliest such time."""
        ...

    async def turns_since(self, since: datetime) -> list[dict[str, Any]]:
        """The turns settled since ``since``, by first mail's ``kind`` and ``how`` they ran.

        A turn is the jobs one claim took together; ``how`` is ``live`` for a live
        session's process's claims (claimer ``mcp:...`` or ``live:...``:
        :func:`birddog.core.live.turn_ran_by`), ``digest`` for another claimer's turn whose
        first mail is informational (taken once its digest was due), else ``worker``; a
        turn that recorded a process it started (a ``--command`` agent,
        :mod:`birddog.spawn`) spawned one. Each row: ``kind``, ``how``, ``turns``,
        ``mails`` and ``spawns``, by kind then how.
        """
        ...
