"""The ports BirdDog is written against: outbox, transport, wake, routes, tokens, asks and more.

Each is a small ``Protocol`` with keyword-only arguments. ``birddog.testing`` has the
in-memory fakes; ``birddog.postgres`` and ``birddog.http`` the real adapters. The last
section is the operator's side (the console's reads and actions), with the values its
pages carry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, Protocol, runtime_checkable

from birddog.core.ask import Posted
from birddog.core.ask_facts import AskFacts
from birddog.core.delivery import (
    Attempt,
    DeliveryResult,
    OutboxRow,
    Parcel,
    Receipt,
    RowOutcome,
    UndecodableRow,
)
from birddog.core.jobs import Job, JobState
from birddog.core.lifecycle import ClaimEvent, Finished
from birddog.core.mail import AgentAddress, Mail, Outcome, Reply
from birddog.core.mailbox import MailboxEntry
from birddog.core.policy import NO_POLICY, RoutePolicy
from birddog.core.spool import Outgoing, SpoolRow, SpoolStatus
from birddog.core.tasks import SentJob
from birddog.core.turns import Turn

RouteKind = Literal["http", "mailbox", "a2a"]
"""How an agent takes its replies: posted to its inbox URL, written to the mailbox table, or
posted to an A2A push config's URL as a StreamResponse."""


@dataclass(frozen=True, slots=True)
class RouteHint:
    """What the drain engine needs to know of a claimed row's route.

    Attributes:
        kind: ``http`` (posted) or ``mailbox`` (written to the mailbox table, not posted).
        batch_size: the most replies one post may carry.
        policy: what the route overrides of the daemon's defaults (the age limit and
            attempts of its rows' delivery decision).
    """

    kind: RouteKind = "http"
    batch_size: int = 1
    policy: RoutePolicy = NO_POLICY


HTTP_ROUTE = RouteHint()
"""The hint for a recipient without a route, or with a plain HTTP route."""


@dataclass(frozen=True, slots=True)
class Page:
    """A claimed page of due rows in key order.

    Attributes:
        rows: the claimed rows, in key order.
        claim: the claim token; only this claim can apply outcomes to these rows.
        more: the page was full, so more due rows may follow its last key.
        undecodable: claimed rows whose stored reply could not be read (buried at once).
        routes: the route hint of each recipient in the page that has a route.
    """

    rows: Sequence[OutboxRow]
    claim: str
    more: bool
    undecodable: Sequence[UndecodableRow] = ()
    routes: Mapping[str, RouteHint] = field(default_factory=dict)

    def route(self, agent_id: str) -> RouteHint:
        """The route hint for a recipient of this page (``http`` when it has none)."""
        return self.routes.get(agent_id, HTTP_ROUTE)

    @property
    def last_key(self) -> str | None:
        """The key to continue after, or None for an empty page."""
        keys = [row.key for row in self.rows[-1:]] + [row.key for row in self.undecodable]
        return max(keys) if keys else None

    @property
    def size(self) -> int:
        """Every row the claim holds, decodable or not."""
        return len(self.rows) + len(self.undecodable)


@dataclass(frozen=True, slots=True)
class Settled:
    """One claimed row's outcome, ready to be stored.

    Attributes:
        claim: the claim token the row was taken under (only that claim may store it).
        outcome: its receipt, or the row rescheduled or dead.
        attempt: the attempt it came from, appended to the row's attempt log (the last
            20 kept; a receipt copies the log); None appends nothing.
        mailbox: a receipt delivered into the mailbox table (written with it, with
            ``NOTIFY birddog_mailbox``).
    """

    claim: str
    outcome: RowOutcome
    attempt: Attempt | None = None
    mailbox: bool = False


class Outbox(Protocol):
    """Durable storage for owed replies, their receipts and dead letters.

    Keys order by their UTF-8 bytes (``COLLATE "C"``), both for sorting and for the
    exclusive ``after_key`` filter, so paging never skips or repeats a row.
    """

    async def add(self, rows: Sequence[OutboxRow]) -> list[str]:
        """Store rows whose key has neither a row nor a receipt; return the keys added."""
        ...

    async def claim_page(
        self,
        *,
        after_key: str | None,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str] = (),
    ) -> Page:
        """Claim up to ``limit`` due, unheld, unleased pending rows after ``after_key``.

        Rows addressed to an agent in ``skip_agents`` are left alone (busy recipients).
        """
        ...

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

        The claim the drain engine uses: no cursor, oldest owed first, and a cost that
        does not grow with rows due later. With ``newest``, up to that many of the
        latest-due claimable rows are taken first (fresh replies overtake a backlog).
        """
        ...

    async def store(self, items: Sequence[Settled]) -> list[str]:
        """Store outcomes of rows from any number of claims, all at once.

        Rows no longer held by their claim (another drainer took them after the lease
        ended) are skipped.

        Returns:
            The keys whose outcome was stored, in the order given.
        """
        ...

    async def release_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """Give rows back untouched, so another drain may take them at once.

        Args:
            items: ``(claim, key)`` of each row; a row no longer held by that claim is
                left alone.
        """
        ...

    async def get(self, key: str) -> OutboxRow | Receipt | None:
        """The row or receipt under ``key``, if any."""
        ...

    async def has_pending(self) -> bool:
        """Whether any reply still awaits a delivery attempt (held ones included)."""
        ...

    async def next_due_at(self) -> datetime | None:
        """The earliest time a pending, unheld reply is owed an attempt."""
        ...

    async def next_claimable_at(
        self, *, now: datetime, skip_agents: Collection[str] = ()
    ) -> datetime | None:
        """The earliest due time of a row a claim at ``now`` could take.

        Rows under a live lease, of held recipients and of ``skip_agents`` do not count.
        """
        ...


class Transport(Protocol):
    """Delivers one reply and reports what the recipient answered."""

    async def post(self, reply: Reply) -> bool | DeliveryResult:
        """Post the reply; ``True`` or :class:`Accepted` only on an explicit acknowledgement.

        Raising counts as a failure.
        """
        ...


@runtime_checkable
class ParcelTransport(Transport, Protocol):
    """A transport that posts stored replies as they are: the drain's fast path.

    The engine uses :meth:`post_parcels` when its transport has it (the HTTP transport
    does), so a claimed reply's stored JSON is the POST body, never parsed into a model
    and dumped again.
    """

    async def post_parcels(self, parcels: Sequence[Parcel]) -> list[DeliveryResult]:
        """Post replies to one recipient; one result per parcel, in order.

        One parcel is one post; several (a recipient whose route takes batches) are one
        post of a batch.
        """
        ...


class WakeScheduler(Protocol):
    """Arms a durable timer that runs the drain at a time."""

    async def schedule_wake(self, *, at: datetime) -> None:
        """Make sure a drain runs at ``at`` or earlier."""
        ...


@runtime_checkable
class WakeBoard(WakeScheduler, Protocol):
    """The wake scheduler a resident drainer sleeps on.

    A drainer going to sleep records when it will look again on its own; a wake armed
    earlier than that (``schedule_wake``) must then reach it (a ``NOTIFY``).
    """

    async def going_to_sleep(self, *, until: datetime, now: datetime) -> datetime:
        """Record that this drainer looks again by ``until`` (or an earlier armed wake).

        The drainer must look for due rows once more after this returns, before it
        sleeps: a wake armed while it was deciding is either visible to that look or
        announced to it.

        Args:
            until: when the drainer would look again on its own.
            now: the drainer's clock.

        Returns:
            When to look again: ``until``, or an armed wake between ``now`` and it.
        """
        ...


@dataclass(frozen=True, slots=True)
class Route:
    """Where an agent's replies go, how they are signed, and whether the agent is held.

    Attributes:
        agent_id: the recipient agent id.
        url: the inbox URL (``http`` or ``https`` only), set by the operator, never by mail;
            None for a mailbox route.
        secret: the Standard Webhooks signing secret, ``whsec_<base64>``; None for a
            mailbox route (nothing is posted, so nothing is signed).
        enabled: False while the recipient is held: its rows stay, untouched and unaged.
        kind: ``http`` (posted to ``url``), ``mailbox`` (written to ``birddog.mailbox``) or
            ``a2a`` (an A2A push config: posted to ``url`` as a StreamResponse, with the
            ``Authorization`` and token ``secret`` holds as JSON).
        batch_size: the most replies put in one signed POST (1: one reply per post).
        held_at: when the current hold began (None while enabled).
        previous_secret: a rotated-out secret that still signs, beside ``secret``, until
            ``previous_secret_until``.
        previous_secret_until: when ``previous_secret`` stops signing.
        policy: what the route overrides of the daemon's defaults (post timeout, age
            limit, attempts) for this recipient.
    """

    agent_id: str
    url: str | None
    secret: str | None
    enabled: bool = True
    kind: RouteKind = "http"
    batch_size: int = 1
    held_at: datetime | None = None
    previous_secret: str | None = None
    previous_secret_until: datetime | None = None
    policy: RoutePolicy = NO_POLICY

    def __repr__(self) -> str:
        return (
            f"Route(agent_id={self.agent_id!r}, kind={self.kind!r}, url={self.url!r}, "
            f"enabled={self.enabled}, batch_size={self.batch_size})"
        )

    def signing_secrets(self, now: datetime) -> list[str]:
        """The secrets a post is signed with at ``now``.

        The current secret first, then the previous one while its overlap lasts.

        Args:
            now: the time of the post.

        Returns:
            One or two secrets; empty for a mailbox route.
        """
        secrets = [self.secret] if self.secret is not None else []
        if (
            self.previous_secret is not None
            and self.previous_secret_until is not None
            and now < self.previous_secret_until
        ):
            secrets.append(self.previous_secret)
        return secrets


class RouteBook(Protocol):
    """Looks up where an agent's replies go."""

    async def route(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown."""
        ...


class TokenBook(Protocol):
    """Tells which agent session a bearer token names (the caller of an HTTP endpoint)."""

    async def authenticate(self, token: str) -> AgentAddress | None:
        """The agent session ``token`` names; None for an unknown, revoked or malformed one.

        Never raises for what the caller presented; only a database that is away raises
        (:class:`~birddog.StoreUnavailable`).
        """
        ...


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
            require_mailbox: refuse when ``mailbox_for`` has an inbox URL route.
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


class OutboxRows(Protocol):
    """Writes outbox rows inside a transaction of the caller's own (``CallerOutbox``)."""

    async def add_rows(
        self, rows: Sequence[OutboxRow], *, wake_at: datetime | None = None
    ) -> list[str]:
        """Store rows whose key has neither a row nor a receipt; the keys added.

        With ``wake_at``, the drain's wake is armed for then when rows were added. The
        rows commit with the caller's transaction, or not at all.
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
        """Whether any mail (of ``lane``) waits."""
        ...

    async def is_waiting(self, key: str) -> bool:
        """Whether mail under ``key`` waits."""
        ...

    async def mail(self, key: str) -> Mail | None:
        """The mail waiting under ``key`` (the latest), or None."""
        ...

    async def waiting(
        self, *, after_id: int = 0, limit: int = 64, lane: tuple[str, str] | None = None
    ) -> list[SpoolRow]:
        """The waiting rows after ``after_id`` (of ``lane``), in spool order."""
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


class Clock(Protocol):
    """The current time."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


class Listener(Protocol):
    """Reports wakes: ``wait`` is True on a notification or after a reconnect."""

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a wake."""
        ...


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
        self, *, queues: Sequence[str] | None = None, agents: Sequence[str] | None = None
    ) -> tuple[int, datetime | None]:
        """How many jobs wait for a worker of ``queues`` and ``agents``, and the oldest's time."""
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

    :meth:`queued_backlog` tells a worker run with ``once`` whether it has drained.
    """

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
    ) -> Sequence[ClaimedJobLike]:
        """Claim up to ``limit`` jobs as :meth:`claim` does; fewer: nothing more to take now."""
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


# ---- the operator's side -------------------------------------------------------------

PENDING_STATUSES: Final = ("held", "in_flight", "due", "waiting")
"""The ``status`` values of ``birddog.pending`` a page can be filtered by."""

JOB_STATES: Final = tuple(state.value for state in JobState)
"""The job states a page can be filtered by."""

PREVIEW_CHARS: Final = 2000
"""How much of a mail's content or a job's result a story shows."""


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


class RouteHolds(Protocol):
    """Holds and releases recipients (``PostgresRoutes``)."""

    async def hold(self, agent_id: str) -> Route:
        """Hold an agent: its replies wait, untouched and unaged."""
        ...

    async def release(self, agent_id: str) -> Route:
        """Release a held agent; its waiting replies go out now."""
        ...


class RouteEdits(RouteHolds, RouteBook, Protocol):
    """Adds, changes, holds and releases routes (``PostgresRoutes``; the console)."""

    async def add(
        self,
        agent_id: str,
        url: str | None = None,
        secret: str | None = None,
        enabled: bool = True,
        *,
        kind: RouteKind = "http",
        batch_size: int = 1,
        policy: RoutePolicy = NO_POLICY,
    ) -> Route:
        """Add an agent's route: an inbox URL (its secret made when not given) or a mailbox."""
        ...

    async def update(
        self,
        agent_id: str,
        *,
        url: str | None = None,
        secret: str | None = None,
        batch_size: int | None = None,
        policy: RoutePolicy = NO_POLICY,
        cleared: frozenset[str] = frozenset(),
    ) -> Route:
        """Change an agent's inbox URL, secret, batch size or policy (None keeps each)."""
        ...


class RouteList(Protocol):
    """Lists every route (``PostgresRoutes.list``; the MCP tool ``agents``)."""

    async def list(self) -> list[Route]:
        """Every route, by agent id."""
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
