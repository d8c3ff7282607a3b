"""The delivery ports: the outbox, the transports, the wake, the clock, the listener.

What the drain engine and the mail room are written against (``birddog.testing`` has the
fakes; ``birddog.postgres`` and ``birddog.http`` the real adapters).
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
from birddog.core.mail import Reply
from birddog.core.policy import NO_POLICY, RoutePolicy

RouteKind = Literal["http", "mailbox", "a2a"]
"""How an agent takes its replies: posted to its inbox URL, written to the mailbox table, or
posted to an A2A push config's URL as a StreamResponse."""


__all__ = [
    "HTTP_ROUTE",
    "Clock",
    "Listener",
    "Outbox",
    "OutboxRows",
    "Page",
    "ParcelTransport",
    "RouteHint",
    "RouteKind",
    "Settled",
    "Transport",
    "WakeBoard",
    "WakeScheduler",
]


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
