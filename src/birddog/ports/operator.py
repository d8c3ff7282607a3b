"""The operator's ports: the console's and commands' reads and actions, and their values.

The pages (pending, dead, routes, jobs) and one mail's story, with the values a page
carries; dead-letter replay; what the outbox holds; the reports of ``birddog status``
and ``birddog check``; retention; the agents' accounts (``birddog agent``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from birddog.core.jobs import JobState
from birddog.core.mail import AgentAddress
from birddog.core.retention import PruneReport, RetentionPolicy
from birddog.core.tokens import AgentAdded, AgentInfo, IssuedToken

PENDING_STATUSES: Final = ("held", "in_flight", "due", "waiting")
"""The ``status`` values of ``birddog.pending`` a page can be filtered by."""

JOB_STATES: Final = tuple(state.value for state in JobState)
"""The job states a page can be filtered by."""

PREVIEW_CHARS: Final = 2000
"""How much of a mail's content or a job's result a story shows."""


__all__ = [
    "JOB_STATES",
    "PENDING_STATUSES",
    "PREVIEW_CHARS",
    "Admin",
    "AgentAccounts",
    "DeadLetterReplay",
    "DeadLetters",
    "Listing",
    "OutboxAdmin",
    "Overview",
    "Reports",
    "Retention",
    "Story",
]


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of rows and the cursor of the next page.

    Attributes:
        rows: the rows, one dict each (column name to value).
        next_cursor: pass it as ``after`` for the next page; None on the last page.
    """

    rows: list[dict[str, Any]]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Overview:
    """The console's first page: what the mail room holds and how it is doing.

    Attributes:
        outbox: ``pending``, ``dead``, ``held``, ``in_flight``, ``oldest_pending_at`` and
            ``next_due_at`` (see :meth:`birddog.postgres.outbox.PostgresOutbox.counts`).
        jobs: jobs by state (every state present).
        activity: ``(minute, delivered, dead)`` for each minute of the last hour, oldest
            first.
        daemons: drain daemons and workers seen lately, newest beat first.
    """

    outbox: dict[str, Any]
    jobs: dict[str, int]
    activity: list[tuple[datetime, int, int]]
    daemons: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Story:
    """One mail, end to end: its job, its replies, their attempts, receipts and mailbox rows.

    Attributes:
        key: what was asked for (a job id, a mail key or a reply key).
        mail_keys: the mail keys the story covers.
        jobs: the jobs that carry the mail (the mail without its content, a preview).
        replies: replies still pending or dead, with their attempt logs.
        receipts: delivered replies, with their attempt logs.
        mailbox: replies delivered into the mailbox table.
    """

    key: str
    mail_keys: list[str]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)
    receipts: list[dict[str, Any]] = field(default_factory=list)
    mailbox: list[dict[str, Any]] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """Whether anything at all matched the key."""
        return bool(self.jobs or self.replies or self.receipts or self.mailbox)


class Admin(Protocol):
    """The operator's reads: pages of rows and one mail's story (``PostgresAdmin``)."""

    async def overview(self, *, now: datetime) -> Overview:
        """Counts by state, activity over the last hour, live processes."""
        ...

    async def pending(
        self,
        *,
        recipient: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Pending replies, the next due first."""
        ...

    async def dead(
        self, *, recipient: str | None = None, after: str | None = None, limit: int = 50
    ) -> Listing:
        """Dead letters, the newest death first."""
        ...

    async def routes(self, *, after: str | None = None, limit: int = 100) -> Listing:
        """Routes, by agent id, secrets never included."""
        ...

    async def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Jobs: running, then queued, then settled."""
        ...

    async def job(self, job_id: str) -> dict[str, Any]:
        """One job as the story shows it (raises ``JobNotFound`` when there is none)."""
        ...

    async def story(self, key: str) -> Story:
        """One mail's story by mail key, reply key or job id."""
        ...


class DeadLetterReplay(Protocol):
    """Puts dead letters back to pending (``PostgresOutbox.replay``)."""

    async def replay(self, *, key: str | None = None, agent_id: str | None = None) -> list[str]:
        """Replay one dead letter or an agent's; the keys put back."""
        ...


class DeadLetters(DeadLetterReplay, Protocol):
    """Replays dead letters and names their recipients (``PostgresOutbox``)."""

    async def dead_recipients(
        self, *, key: str | None = None, agent_id: str | None = None
    ) -> list[str]:
        """The recipients of the dead letters ``replay`` would put back, by agent id."""
        ...


class OutboxAdmin(Protocol):
    """What the outbox holds, for operators (``PostgresOutbox``; ``pending``, ``dead``)."""

    async def counts(self) -> dict[str, Any]:
        """Rows by state, the oldest pending row's time and the next due time.

        Keys: ``pending``, ``dead``, ``held``, ``in_flight``, ``oldest_pending_at``,
        ``next_due_at``.
        """
        ...

    async def list_pending(self, limit: int = 50) -> list[dict[str, Any]]:
        """The oldest pending replies, as the ``birddog.pending`` view shows them."""
        ...

    async def list_dead(self, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent dead letters, as the ``birddog.dead_letters`` view shows them."""
        ...


class Reports(Protocol):
    """Who is running and what is stuck (``PostgresReports``; ``birddog status`` and ``check``).

    Each answer is a list of dicts, one per row, the oldest (or most overdue) first,
    except :meth:`new_dead` and :meth:`daemons_seen`, newest first.
    """

    async def daemons_seen(self, *, within_s: float) -> list[dict[str, Any]]:
        """Running processes that beat within ``within_s`` (``kind``, ``host``, ``pid``...)."""
        ...

    async def stale_pending(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Pending, unheld replies created more than ``older_than_s`` ago."""
        ...

    async def new_dead(self, *, within_s: float, limit: int) -> list[dict[str, Any]]:
        """Dead letters that died within ``within_s``."""
        ...

    async def stale_queued(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Jobs queued more than ``older_than_s`` ago (informational: past their digest time)."""
        ...

    async def overdue_running(self, *, grace_s: float, limit: int) -> list[dict[str, Any]]:
        """Running jobs whose lease ended more than ``grace_s`` ago."""
        ...

    async def held_queues(self, *, limit: int) -> list[dict[str, Any]]:
        """Running jobs holding their queue past the server's limits, with ``waiting``."""
        ...

    async def long_holds(self, *, older_than_s: float, limit: int) -> list[dict[str, Any]]:
        """Recipients held more than ``older_than_s``, with ``waiting`` (their pending replies)."""
        ...

    async def due_without_daemon(self, *, within_s: float) -> dict[str, Any] | None:
        """Replies due while no drain daemon beat within ``within_s`` (None: all is well).

        ``due``, ``oldest_due_at``, ``last_seen_at`` and ``last_stopped_at`` (of the last
        drain daemon seen; None when none ever ran).
        """
        ...


class Retention(Protocol):
    """Deletes what a retention policy no longer keeps (``PostgresRetention``)."""

    async def prune(self, policy: RetentionPolicy) -> PruneReport:
        """Delete receipts, settled jobs, dead letters and read mailbox rows past the policy."""
        ...


class AgentAccounts(Protocol):
    """Agents that act as themselves and their bearer tokens (``PostgresAgents``)."""

    async def add(self, address: AgentAddress, *, login: bool = False) -> AgentAdded:
        """Add an agent: a mailbox route when it has none, its first token, a login if asked."""
        ...

    async def issue(self, address: AgentAddress) -> IssuedToken:
        """Issue another token for an agent that was added (raises ``AgentNotFound``)."""
        ...

    async def revoke(self, agent_id: str, *, token_id: str | None = None) -> list[str]:
        """End an agent's tokens (or the one ``token_id``); the ids revoked."""
        ...

    async def revoke_login(self, agent_id: str) -> str | None:
        """Drop an agent's database login; the login dropped, None when it had none."""
        ...

    async def list(self) -> list[AgentInfo]:
        """Every agent that was added, by id, with its live tokens (never a token's text)."""
        ...
