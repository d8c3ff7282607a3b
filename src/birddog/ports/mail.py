"""The mail ports: the ask store, the mailboxes and their notices, sent jobs, the spool.

What the mail service (``birddog.service``) and the MCP and A2A servers are written
against.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Literal, Protocol

from birddog.core.ask import Posted
from birddog.core.ask_facts import AskFacts
from birddog.core.jobs import Job
from birddog.core.mail import AgentAddress, Mail, Outcome
from birddog.core.mailbox import MailboxEntry
from birddog.core.spool import Outgoing, SpoolRow, SpoolStatus
from birddog.core.tasks import SentJob
from birddog.ports.delivery import Listener

__all__ = [
    "Answers",
    "AskStore",
    "Mailbox",
    "MailboxFeed",
    "Notices",
    "SentJobs",
    "Spool",
    "SpoolAdmin",
]


class AskStore(Protocol):
    """Writes the mail of an ask or a send, after checking it (``PostgresAsks``)."""

    async def send(
        self,
        job: Job,
        *,
        mailbox_for: AgentAddress | None,
        require_mailbox: bool,
        timeout_s: float,
    ) -> Posted:
        """Check, then enqueue the job of a mail, in one transaction.

        The target must be known (a route, or its session was sent work before); the
        same key again is a replay when the mail is the same, a conflict otherwise.

        Args:
            job: the agent job carrying the mail.
            mailbox_for: give this agent a mailbox route when it has none.
            require_mailbox: an ask: its reply to ``mailbox_for`` lands in the mailbox
                whatever ``mailbox_for``'s route (the job is marked ``askerMailbox``).
            timeout_s: the longest wait for a database connection.
        """
        ...

    async def write(self, outgoing: Outgoing, *, timeout_s: float) -> Posted:
        """Write one mail as its sender asked: checked as :meth:`send`, or enqueued as it is.

        A sender and the spool's forwarder both write through this, so a spooled mail
        meets the same rules later as it would have at once.

        Args:
            outgoing: the job and how its write is checked.
            timeout_s: the longest wait for a database connection.
        """
        ...

    async def ensure_mailbox(self, agent_id: str, *, timeout_s: float) -> bool:
        """Give ``agent_id`` a mailbox route when it has none; True when one was added."""
        ...

    async def server_identity(self, *, timeout_s: float) -> str | None:
        """Which server and database this store writes to (None: this login may not tell).

        The spool's forwarder compares it with the one a spooled mail recorded.
        """
        ...

    async def mail(self, key: str, *, timeout_s: float) -> Mail | None:
        """The mail sent under ``key`` (None: none, or its job is not readable as one)."""

    async def facts(self, key: str, asker: AgentAddress, *, timeout_s: float) -> AskFacts:
        """Where the ask with mail ``key`` stands for ``asker``: its job, its reply, the beats."""
        ...


class Answers(Protocol):
    """Where replies land for a mailbox route, and who waits for them (``PostgresMailbox``)."""

    async def wait(
        self, key: str, timeout_s: float, *, owner: AgentAddress | None = None
    ) -> MailboxEntry | None:
        """The reply to mail ``key`` once it is in a mailbox; None after ``timeout_s``.

        With ``owner``, only a reply in that agent session's mailbox counts.
        """
        ...

    async def ack(self, keys: Sequence[str], *, timeout_s: float | None = None) -> list[str]:
        """Mark replies read; the keys that were unread and now are read."""
        ...


class Mailbox(Answers, Protocol):
    """The agents' mailboxes: replies delivered into them, read, listed and acknowledged."""

    async def read(
        self,
        agent_id: str,
        session_id: str | None = None,
        *,
        limit: int = 100,
        since: datetime | None = None,
        exclude: Sequence[str] = (),
    ) -> list[MailboxEntry]:
        """Unread replies of ``agent_id`` (of ``session_id``, if given), oldest first."""
        ...

    async def latest(
        self, owner: AgentAddress, *, limit: int = 100, timeout_s: float | None = None
    ) -> list[MailboxEntry]:
        """The latest replies in ``owner``'s mailbox, read or not, newest first."""
        ...

    async def unread_count(self, owner: AgentAddress, *, timeout_s: float | None = None) -> int:
        """How many unread replies ``owner``'s mailbox holds."""
        ...

    async def owned(
        self, keys: Sequence[str], owner: AgentAddress, *, timeout_s: float | None = None
    ) -> dict[str, MailboxEntry]:
        """The replies among ``keys`` that are in ``owner``'s mailbox, read or not."""
        ...

    async def replies(
        self, mail_keys: Sequence[str], *, timeout_s: float | None = None
    ) -> list[MailboxEntry]:
        """Every reply to any of ``mail_keys`` in any mailbox, read or not."""
        ...


class MailboxFeed(Mailbox, Protocol):
    """A mailbox read as replies arrive (``PostgresMailbox``; ``birddog inbox --follow``)."""

    def follow(
        self,
        agent_id: str,
        session_id: str | None = None,
        *,
        stop: asyncio.Event,
        limit: int = 100,
    ) -> AsyncIterator[list[MailboxEntry]]:
        """Yield unread replies in batches as they arrive, each once, until ``stop`` is set.

        The first batch holds what is unread now; empty batches are not yielded.
        """
        ...


class Notices(Protocol):
    """The process's one listening connection: who hears what (``PostgresNotices``)."""

    def subscribe(
        self, channel: str, payload: str | None = None, *, wake: asyncio.Event | None = None
    ) -> AbstractContextManager[Listener]:
        """Hear ``channel`` (only ``payload``, if given) for as long as the block lasts.

        Each notification also sets ``wake``, if given (one waiter of several channels).
        """
        ...

    def reconnects(self, event: asyncio.Event) -> AbstractContextManager[asyncio.Event]:
        """Set ``event`` each time the connection is open again after it was lost."""
        ...


class SentJobs(Protocol):
    """Sent mail as its sender reads it back: its job, by id or by context (A2A tasks)."""

    async def get(self, job_id: str, *, timeout_s: float) -> SentJob | None:
        """The job with this id (None: no such job)."""
        ...

    async def of_context(
        self,
        *,
        queue: str,
        agent_id: str,
        from_agent_id: str,
        after_job_id: str | None,
        limit: int,
        timeout_s: float,
    ) -> list[SentJob]:
        """The jobs ``from_agent_id`` sent to ``agent_id``'s session ``queue``, by job id."""
        ...

    async def add_reply_to(
        self, job_id: str, address: AgentAddress, *, caller: AgentAddress, timeout_s: float
    ) -> Literal["added", "present", "settled", "missing"]:
        """Add ``address`` to the replyTo of ``caller``'s mail of job ``job_id`` while unsettled."""
        ...

    async def remove_reply_to(
        self, job_id: str, address: AgentAddress, *, caller: AgentAddress, timeout_s: float
    ) -> bool:
        """Remove ``address`` from that replyTo while unsettled; True when it was removed."""
        ...

    async def cancel(
        self, job_id: str, *, caller: AgentAddress, content: str, timeout_s: float
    ) -> Outcome | None:
        """Cancel ``caller``'s job ``job_id`` (cancel-wins); its outcome once settled.

        Raises:
            JobNotFound: no such job, or its mail is not ``caller``'s agent's.
        """
        ...


class Spool(Protocol):
    """Mail accepted while the database is away, kept durably until forwarded (``SqliteSpool``).

    Rows keep spool order, and with it the order of each lane (sender, recipient
    session). A row is durable when :meth:`put` returns; only :meth:`delete` (after the
    forwarder wrote it) or :meth:`quarantine` removes it from the waiting mail.
    """

    def exists(self) -> bool:
        """Whether anything was ever spooled here (a spool never written to holds nothing)."""
        ...

    async def put(self, outgoing: Outgoing) -> int:
        """Keep one mail, durably; its place in spool order.

        Raises:
            SpoolFull: the spool holds its bound already; nothing was written or dropped.
            SpoolFailed: the spool cannot be written.
        """
        ...

    async def has_waiting(self, lane: tuple[str, str] | None = None) -> bool:
        """Whether any mail (of ``lane``) meant for this spool's database waits."""
        ...

    async def is_waiting(self, key: str) -> bool:
        """Whether mail under ``key`` waits."""
        ...

    async def mail(self, key: str) -> Mail | None:
        """The mail waiting under ``key`` (the latest), or None."""
        ...

    async def waiting(
        self,
        *,
        after_id: int = 0,
        limit: int = 64,
        lane: tuple[str, str] | None = None,
        adopt: bool = False,
    ) -> list[SpoolRow]:
        """The waiting rows meant for this spool's database after ``after_id`` (of ``lane``).

        In spool order; ``adopt``: every waiting row, whatever database it was meant for
        (:func:`~birddog.core.spool.meant_for` says which are).
        """
        ...

    async def note_server(self, server: str | None) -> None:
        """Remember the identity of the server this spool's database was found on."""
        ...

    async def delete(self, ids: Sequence[int]) -> None:
        """Remove forwarded rows, at once."""
        ...

    async def quarantine(self, row_id: int, reason: str) -> None:
        """Move one row aside with ``reason`` (a no-op if it is gone)."""
        ...

    async def quarantine_aged(self) -> list[str]:
        """Move every row spooled longer ago than the spool's age limit aside; their keys."""
        ...

    async def note_forward(self, error: str | None) -> None:
        """Record how a forward ended: cleanly (None) or with ``error``."""
        ...

    def forwarding(self, *, wait_s: float = 0.0) -> AbstractAsyncContextManager[bool]:
        """Hold the spool's one forwarder lock for a block, if it can be had within ``wait_s``.

        The block is given True once the lock is held, False when another forwarder kept it.
        """
        ...


class SpoolAdmin(Protocol):
    """The operator's side of the spool: what it holds, and its quarantine (``spool status``)."""

    async def status(self) -> SpoolStatus:
        """What the spool holds: counts, bytes, the oldest mail, the last forward's error."""
        ...

    async def quarantined(self, *, limit: int) -> list[dict[str, object]]:
        """The latest quarantined mails: ``key``, ``reason``, ``spooled_at``, ``quarantined_at``."""
        ...

    async def quarantine_reason(self, key: str) -> str | None:
        """Why mail under ``key`` was quarantined (the latest), or None if it was not."""
        ...

    async def requeue(self) -> int:
        """Put every quarantined mail that can be decoded back at the end; how many went."""
        ...
