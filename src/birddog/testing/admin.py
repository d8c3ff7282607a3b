"""The operator's commands in memory: outbox counts and lists, job counts, reports, retention.

Each reads (or prunes) the outbox, job store, route book and mailbox fakes as its Postgres
adapter reads the database: :class:`InMemoryOutboxAdmin` (``PostgresOutbox``'s counts and
lists), :class:`InMemoryJobAdmin` (``PostgresJobs``' counts), :class:`InMemoryReports`
(``PostgresReports``, with ``daemons`` standing for the daemons table) and
:class:`InMemoryRetention` (``PostgresRetention``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from birddog.core.delivery import OutboxRow, RowState
from birddog.core.jobs import DEFAULT_MAX_HOLD_S, DEFAULT_MAX_LEASE_S, Job, JobState
from birddog.core.kinds import DEFAULT_KIND, INTERACTIVE_KINDS
from birddog.core.live import turn_ran_by
from birddog.core.mail import Outcome
from birddog.core.retention import PruneReport, RetentionPolicy
from birddog.ports import JOB_STATES, Clock
from birddog.testing.jobs import InMemoryJobs, StoredJob
from birddog.testing.mail import InMemoryMailbox, mail_of
from birddog.testing.outbox import InMemoryOutbox
from birddog.testing.routes import InMemoryRoutes

__all__ = [
    "DaemonSeen",
    "InMemoryJobAdmin",
    "InMemoryOutboxAdmin",
    "InMemoryReports",
    "InMemoryRetention",
]


class InMemoryOutboxAdmin:
    """What the outbox fake holds, as operators read it (an :class:`~birddog.ports.OutboxAdmin`).

    Args:
        outbox: the replies (its ``held`` agents are the held recipients).
        clock: the time ``in_flight``, ``status`` and ``age`` are judged at.
    """

    def __init__(self, outbox: InMemoryOutbox, *, clock: Clock) -> None:
        self.outbox = outbox
        self.clock = clock

    async def counts(self) -> dict[str, Any]:
        """Rows by state, held and in-flight counts, the oldest pending and next due times."""
        now = self.clock.now()
        pending = [row for row in self.outbox.rows.values() if row.state is RowState.PENDING]
        return {
            "pending": len(pending),
            "dead": len(self.outbox.rows) - len(pending),
            "held": sum(row.agent_id in self.outbox.held for row in pending),
            "in_flight": sum(self._in_flight(row.key, now) for row in pending),
            "oldest_pending_at": min((row.created_at for row in pending), default=None),
            "next_due_at": await self.outbox.next_due_at(),
        }

    async def list_pending(self, limit: int = 50) -> list[dict[str, Any]]:
        """The oldest pending rows (by creation, then key), as ``birddog.pending`` shows them."""
        now = self.clock.now()
        rows = sorted(
            (row for row in self.outbox.rows.values() if row.state is RowState.PENDING),
            key=lambda row: (row.created_at, row.key),
        )
        return [self._pending_row(row, now) for row in rows[:limit]]

    async def list_dead(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest dead letters (newest death first, then key), as ``dead_letters`` shows."""
        rows = sorted(self.outbox.dead_letters.values(), key=lambda row: row.key)
        rows.sort(key=lambda row: row.due_at, reverse=True)
        return [
            {
                **_reply_columns(row),
                "dead_reason": None if row.dead_reason is None else str(row.dead_reason),
                "dead_at": row.due_at,
            }
            for row in rows[:limit]
        ]

    def _in_flight(self, key: str, now: datetime) -> bool:
        lease = self.outbox._leases.get(key)
        return lease is not None and lease[1] > now

    def _pending_row(self, row: OutboxRow, now: datetime) -> dict[str, Any]:
        held = row.agent_id in self.outbox.held
        in_flight = self._in_flight(row.key, now)
        held_since = self.outbox._held_at.get(row.agent_id) if held else None
        if held:
            status = "held"
        elif in_flight:
            status = "in_flight"
        else:
            status = "due" if row.due_at <= now else "waiting"
        age_until = (held_since or now) if held else now
        return {
            **_reply_columns(row),
            "held": held,
            "held_since": held_since,
            "in_flight": in_flight,
            "age": max(age_until - row.created_at, timedelta(0)),
            "next_try_at": row.due_at,
            "status": status,
        }


def _reply_columns(row: OutboxRow) -> dict[str, Any]:
    """The columns ``birddog.pending`` and ``birddog.dead_letters`` share."""
    facts = row.reply.reply
    return {
        "key": row.key,
        "recipient_agent_id": row.agent_id,
        "recipient_session_id": row.recipient.session_id,
        "in_reply_to": row.reply.in_reply_to,
        "command_id": facts.command_id,
        "outcome": str(facts.outcome),
        "attempts": row.attempts,
        "deferrals": row.deferrals,
        "last_error": row.last_error,
        "created_at": row.created_at,
    }


class InMemoryJobAdmin:
    """The operator's job commands over the job store fake (a :class:`~birddog.ports.JobAdmin`).

    Args:
        jobs: the jobs.
    """

    def __init__(self, jobs: InMemoryJobs) -> None:
        self.job_store = jobs

    async def get(self, job_id: str) -> Job:
        """The job with this id (raises ``JobNotFound`` when there is none)."""
        return await self.job_store.get(job_id)

    async def cancel(self, *, job_id: str, content: str) -> Outcome | None:
        """Cancel a job: the outcome if it settled, None while it still runs."""
        return await self.job_store.cancel(job_id=job_id, content=content)

    async def counts(self) -> dict[str, int]:
        """How many jobs are in each state (every state present)."""
        counts = dict.fromkeys(JOB_STATES, 0)
        for stored in self.job_store.jobs.values():
            counts[stored.job.state.value] += 1
        return counts

    async def not_yet_due(self) -> tuple[int, datetime | None]:
        """How many queued jobs may not run before a later time, and the earliest such time."""
        now = self.job_store.clock.now()
        later = [
            stored.job.not_before
            for stored in self.job_store.jobs.values()
            if stored.job.state is JobState.QUEUED
            and stored.job.not_before is not None
            and stored.job.not_before > now
        ]
        return len(later), min(later, default=None)

    async def turns_since(self, since: datetime) -> list[dict[str, Any]]:
        """The turns settled since ``since`` (jobs of one claim), by first kind and how; spawns."""
        turns: dict[tuple[object, ...], list[StoredJob]] = {}
        for stored in self.job_store.jobs.values():
            if (
                stored.job.state is JobState.SETTLED
                and stored.settled_at is not None
                and stored.settled_at >= since
                and stored.started_at is not None
            ):
                key = (_agent_of(stored.job), stored.job.queue, stored.worker_id, stored.started_at)
                turns.setdefault(key, []).append(stored)
        groups: dict[tuple[str, str], list[int]] = {}
        for jobs in turns.values():
            first = min(jobs, key=lambda s: (-s.job.priority, s.created_at, s.job.job_id))
            kind = _kind_of(first.job)
            counts = groups.setdefault((kind, turn_ran_by(first.worker_id, kind)), [0] * 3)
            counts[0] += 1
            counts[1] += len(jobs)
            counts[2] += _spawned(jobs)
        return [
            {"kind": kind, "how": how, "turns": turns_, "mails": mails, "spawns": spawns}
            for (kind, how), (turns_, mails, spawns) in sorted(groups.items())
        ]


def _spawned(jobs: list[StoredJob]) -> int:
    """1 when a turn recorded a process it started (an MCP server's never does), else 0."""
    return int(any(s.turn is not None and not s.worker_id.startswith("mcp:") for s in jobs))


LEASE_SLACK_S = 60.0
"""A lease may end this far past the server's longest before check names it (clock skew)."""


def _agent_of(job: Job) -> str:
    """The agent a job's queue belongs to (its mail's ``to``; '' for a job without mail)."""
    mail = mail_of(job)
    return "" if mail is None else mail.to.agent_id


def _waits_since(stored: StoredJob) -> datetime:
    """Since when a queued job waits for a worker: its digest time, else its enqueue."""
    return stored.created_at if stored.digest_at is None else stored.digest_at


def _kind_of(job: Job) -> str:
    """The job's kind as the jobs table keeps it: the payload's, for mail; else a task."""
    if mail_of(job) is None:
        return DEFAULT_KIND.value
    return str(job.payload.get("kind") or DEFAULT_KIND.value)


@dataclass(frozen=True, slots=True)
class DaemonSeen:
    """A row of the daemons table as :class:`InMemoryReports` keeps it.

    Attributes:
        daemon_id: the process's id.
        kind: ``drain`` or ``worker``.
        host: where it runs.
        pid: its process id.
        started_at: when it started.
        seen_at: its last beat.
        stopped_at: when it stopped cleanly (None: running, or vanished).
    """

    daemon_id: str
    kind: str
    host: str
    pid: int
    started_at: datetime
    seen_at: datetime
    stopped_at: datetime | None = None


class InMemoryReports:
    """The operator's reports over the fakes (a :class:`~birddog.ports.Reports`).

    Args:
        outbox: the replies.
        jobs: the jobs.
        routes: the routes (their holds).
        clock: the time ages are judged at (the database's ``now()``).

    Attributes:
        daemons: the processes seen, by id (a test adds them).
    """

    def __init__(
        self,
        *,
        outbox: InMemoryOutbox,
        jobs: InMemoryJobs,
        routes: InMemoryRoutes,
        clock: Clock,
    ) -> None:
        self.outbox = outbox
        self.job_store = jobs
        self.route_book = routes
        self.clock = clock
        self.daemons: dict[str, DaemonSeen] = {}

    def _ago(self, seconds: float) -> datetime:
        return self.clock.now() - timedelta(seconds=seconds)

    def _pending(self) -> list[OutboxRow]:
        return [row for row in self.outbox.rows.values() if row.state is RowState.PENDING]

    async def daemons_seen(self, *, within_s: float) -> list[dict[str, Any]]:
        """Running processes that beat within ``within_s``, newest beat first."""
        since = self._ago(within_s)
        seen = [d for d in self.daemons.values() if d.seen_at > since and d.stopped_at is None]
        seen.sort(key=lambda d: d.seen_at, reverse=True)
        return [
            {
                "daemon_id": d.daemon_id,
                "kind": d.kind,
                "host": d.host,
                "pid": d.pid,
                "started_at": d.started_at,
                "seen_at": d.seen_at,
            }
            for d in seen
        ]

    async def stale_pending(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Pending, unheld replies created more than ``older_than_s`` ago, oldest first."""
        before = self._ago(older_than_s)
        rows = [
            row
            for row in self._pending()
            if row.agent_id not in self.outbox.held and row.created_at < before
        ]
        rows.sort(key=lambda row: row.created_at)
        return [
            {
                "key": row.key,
                "recipient_agent_id": row.agent_id,
                "created_at": row.created_at,
                "attempts": row.attempts,
                "last_error": row.last_error,
            }
            for row in rows[:limit]
        ]

    async def new_dead(self, *, within_s: float, limit: int) -> list[dict[str, Any]]:
        """Dead letters that died within ``within_s`` (a dead row's ``due_at``), newest first."""
        since = self._ago(within_s)
        rows = [row for row in self.outbox.dead_letters.values() if row.due_at > since]
        rows.sort(key=lambda row: row.due_at, reverse=True)
        return [
            {
                "key": row.key,
                "recipient_agent_id": row.agent_id,
                "dead_reason": None if row.dead_reason is None else str(row.dead_reason),
                "dead_at": row.due_at,
            }
            for row in rows[:limit]
        ]

    async def stale_queued(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Jobs queued more than ``older_than_s`` ago (informational: past their digest)."""
        before = self._ago(older_than_s)
        queued = [
            stored
            for stored in self.job_store.jobs.values()
            if stored.job.state is JobState.QUEUED
            and (stored.digest_at is not None or _kind_of(stored.job) in INTERACTIVE_KINDS)
            and _waits_since(stored) < before
        ]
        queued.sort(key=lambda stored: (_waits_since(stored), stored.job.job_id))
        return [
            {
                "job_id": stored.job.job_id,
                "queue": stored.job.queue,
                "priority": stored.job.priority,
                "created_at": stored.created_at,
                "kind": _kind_of(stored.job),
                "digest_at": stored.digest_at,
            }
            for stored in queued[:limit]
        ]

    async def overdue_running(self, *, grace_s: float, limit: int) -> list[dict[str, Any]]:
        """Running jobs whose lease ended more than ``grace_s`` ago, longest overdue first."""
        before = self._ago(grace_s)
        overdue = [
            (stored.lease_expires_at, stored)
            for stored in self.job_store.jobs.values()
            if stored.job.state is JobState.RUNNING
            and stored.lease_expires_at is not None
            and stored.lease_expires_at < before
        ]
        overdue.sort(key=lambda pair: (pair[0], pair[1].job.job_id))
        return [
            {
                "job_id": stored.job.job_id,
                "queue": stored.job.queue,
                "worker_id": stored.worker_id,
                "lease_expires_at": lease,
            }
            for lease, stored in overdue[:limit]
        ]

    async def held_queues(self, *, limit: int) -> list[dict[str, Any]]:
        """Running jobs holding their queue past the default limits, longest first."""
        now = self.clock.now()
        stored_jobs = list(self.job_store.jobs.values())

        def waiting(held: StoredJob) -> int:
            def same_queue(other: StoredJob) -> bool:
                return (_agent_of(other.job), other.job.queue) == (
                    _agent_of(held.job),
                    held.job.queue,
                )

            return sum(
                other.job.state is JobState.QUEUED and same_queue(other) for other in stored_jobs
            )

        held = [
            stored
            for stored in stored_jobs
            if stored.job.state is JobState.RUNNING
            and (
                (
                    stored.lease_expires_at is not None
                    and stored.lease_expires_at
                    > now + timedelta(seconds=DEFAULT_MAX_LEASE_S + LEASE_SLACK_S)
                )
                or (
                    stored.started_at is not None
                    and stored.started_at < now - timedelta(seconds=DEFAULT_MAX_HOLD_S)
                    and waiting(stored) > 0
                )
            )
        ]
        held.sort(key=lambda stored: (stored.started_at or now, stored.job.job_id))
        return [
            {
                "job_id": stored.job.job_id,
                "queue": stored.job.queue,
                "worker_id": stored.worker_id,
                "started_at": stored.started_at,
                "lease_expires_at": stored.lease_expires_at,
                "waiting": waiting(stored),
            }
            for stored in held[:limit]
        ]

    async def long_holds(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Recipients held more than ``older_than_s``, longest first, with replies waiting."""
        before = self._ago(older_than_s)
        held = [
            (route.held_at, route.agent_id)
            for route in self.route_book.routes.values()
            if not route.enabled and route.held_at is not None and route.held_at < before
        ]
        pending = self._pending()
        return [
            {
                "agent_id": agent_id,
                "held_at": held_at,
                "waiting": sum(row.agent_id == agent_id for row in pending),
            }
            for held_at, agent_id in sorted(held)[:limit]
        ]

    async def due_without_daemon(self, *, within_s: float) -> dict[str, Any] | None:
        """Replies due while no drain daemon beat within ``within_s``; None when all is well."""
        now = self.clock.now()
        drains = sorted(
            (d for d in self.daemons.values() if d.kind == "drain"), key=lambda d: d.seen_at
        )
        since = self._ago(within_s)
        if any(d.stopped_at is None and d.seen_at > since for d in drains):
            return None
        disabled = {a for a, route in self.route_book.routes.items() if not route.enabled}
        due = [
            row.due_at
            for row in self._pending()
            if row.due_at <= now and row.agent_id not in disabled
        ]
        if not due:
            return None
        return {
            "due": len(due),
            "oldest_due_at": min(due),
            "last_seen_at": drains[-1].seen_at if drains else None,
            "last_stopped_at": drains[-1].stopped_at if drains else None,
        }


class InMemoryRetention:
    """Retention over the fakes (a :class:`~birddog.ports.Retention`).

    Cut-offs are ``clock.now() - retention``, as :class:`PostgresRetention`'s are; a dead
    row died at its ``due_at``, a job settled at its ``settled_at``.

    Args:
        outbox: receipts and dead letters.
        jobs: settled jobs.
        mailbox: read mailbox replies.
        clock: the current time.
    """

    def __init__(
        self,
        *,
        outbox: InMemoryOutbox,
        jobs: InMemoryJobs,
        mailbox: InMemoryMailbox,
        clock: Clock,
    ) -> None:
        self.outbox = outbox
        self.job_store = jobs
        self.mailbox = mailbox
        self.clock = clock

    async def prune(self, policy: RetentionPolicy) -> PruneReport:
        """Delete what ``policy`` no longer keeps; how many rows, by kind."""
        now = self.clock.now()

        def before(keep_s: float | None) -> datetime | None:
            return None if keep_s is None else now - timedelta(seconds=keep_s)

        receipts = _drop(self.outbox.receipts, before(policy.receipts_s), lambda r: r.delivered_at)
        jobs = _drop(self.job_store.jobs, before(policy.jobs_settled_s), lambda s: s.settled_at)
        dead = _drop(
            self.outbox.rows,
            before(policy.dead_s),
            lambda row: row.due_at if row.state is RowState.DEAD else None,
        )
        read = _drop(self.mailbox.entries, before(policy.mailbox_read_s), lambda e: e.read_at)
        return PruneReport(receipts=receipts, jobs=jobs, dead_letters=dead, mailbox=read)


def _drop(rows: dict[str, Any], before: datetime | None, when: Any) -> int:
    """Delete the rows whose time (``when(row)``, None: never) is before ``before``."""
    if before is None:
        return 0
    gone = [key for key, row in rows.items() if (at := when(row)) is not None and at < before]
    for key in gone:
        del rows[key]
    return len(gone)
