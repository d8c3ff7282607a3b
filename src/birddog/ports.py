"""The ports BirdDog is written against: outbox, transport, wake, routes, clock, jobs, wakes.

Each is a small ``Protocol`` with keyword-only arguments. ``birddog.testing`` has the
in-memory fakes; ``birddog.postgres`` and ``birddog.http`` the real adapters.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from birddog.core.delivery import (
    Attempt,
    DeliveryResult,
    OutboxRow,
    Parcel,
    Receipt,
    RowOutcome,
    UndecodableRow,
)
from birddog.core.jobs import Job
from birddog.core.lifecycle import ClaimEvent, Finished
from birddog.core.mail import Reply
from birddog.core.turns import Turn

RouteKind = Literal["http", "mailbox"]
"""How an agent takes its replies: posted to its inbox URL, or written to the mailbox table."""


@dataclass(frozen=True, slots=True)
class RouteHint:
    """What the drain engine needs to know of a claimed row's route.

    Attributes:
        kind: ``http`` (posted) or ``mailbox`` (written to the mailbox table, not posted).
        batch_size: the most replies one post may carry.
    """

    kind: RouteKind = "http"
    batch_size: int = 1


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


def settled(
    page: Page,
    outcomes: Sequence[RowOutcome],
    attempts: Sequence[Attempt | None] = (),
    mailbox: Collection[str] = (),
) -> list[Settled]:
    """One claim's outcomes as :class:`Settled` items (what ``Outbox.apply`` stores).

    Args:
        page: the claim.
        outcomes: one per row.
        attempts: the attempt behind each outcome, in the same order (missing: none).
        mailbox: keys of receipts delivered into the mailbox table.

    Returns:
        The items, in the order of ``outcomes``.
    """
    return [
        Settled(
            claim=page.claim,
            outcome=outcome,
            attempt=attempts[index] if index < len(attempts) else None,
            mailbox=outcome.key in mailbox,
        )
        for index, outcome in enumerate(outcomes)
    ]


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

    async def apply(
        self,
        *,
        page: Page,
        outcomes: Sequence[RowOutcome],
        attempts: Sequence[Attempt | None] = (),
        mailbox: Collection[str] = (),
    ) -> list[str]:
        """Store one claim's outcomes at once (:meth:`store` for a single page).

        Args:
            page: the claim the rows were taken under.
            outcomes: one per row.
            attempts: the attempt behind each outcome, in the same order (None: none).
            mailbox: keys of receipts delivered into the mailbox table.

        Returns:
            The keys whose outcome was stored.
        """
        ...

    async def release_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """Give rows back untouched, so another drain may take them at once.

        Args:
            items: ``(claim, key)`` of each row; a row no longer held by that claim is
                left alone.
        """
        ...

    async def release_claim(self, *, page: Page) -> None:
        """Give a page's rows back untouched (their lease ends now); nothing is stored."""
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
        kind: ``http`` (posted to ``url``) or ``mailbox`` (written to ``birddog.mailbox``).
        batch_size: the most replies put in one signed POST (1: one reply per post).
        held_at: when the current hold began (None while enabled).
        previous_secret: a rotated-out secret that still signs, beside ``secret``, until
            ``previous_secret_until``.
        previous_secret_until: when ``previous_secret`` stops signing.
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


class JobStore(Protocol):
    """The job store operations a worker needs (``PostgresJobs``)."""

    async def claim(
        self, *, queues: Sequence[str] | None = None, lease_s: float = 60.0, worker_id: str = ""
    ) -> ClaimedJobLike | None:
        """Claim the next job, or None."""
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


class TurnRecords(Protocol):
    """Where running jobs' turns run, as workers recorded them (``PostgresJobs``)."""

    async def turns_on_host(self, *, host: str, boot_id: str) -> list[tuple[str, Turn]]:
        """``(job_id, turn)`` of every running job whose turn was recorded on this host."""
        ...
