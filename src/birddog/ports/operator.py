"""The operator's ports: the console's and commands' reads and actions, and their values.

The pages (pending, dead, routes, jobs) and one mail's story, with the values a page
carries; dead-letter replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from birddog.core.jobs import JobState

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
    "DeadLetterReplay",
    "DeadLetters",
    "Listing",
    "Overview",
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
