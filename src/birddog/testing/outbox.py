"""The in-memory outbox: the reference implementation of the outbox port and its neighbours."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from birddog.core.delivery import (
    ATTEMPT_LOG_MAX,
    Attempt,
    OutboxRow,
    Receipt,
    RowState,
    UndecodableRow,
)
from birddog.core.errors import InvalidInput
from birddog.core.mail import Reply
from birddog.ports import Clock, Page, RouteHint, Settled, WakeScheduler
from birddog.testing.clock import FrozenClock

__all__ = ["InMemoryOutbox"]


class InMemoryOutbox:
    """An outbox in a dict: the reference implementation of the outbox port.

    It is also the fake of the ports around the outbox: dead-letter replay
    (:class:`~birddog.ports.DeadLetters`) and rows written in a caller's transaction
    (:class:`~birddog.ports.OutboxRows`: here, at once).

    Args:
        clock: the time a replayed dead letter is due again (default: a frozen clock).
        wake: told the due time of replayed and added rows (default: nobody).

    Attributes:
        rows: pending and dead rows by key.
        receipts: receipts by key.
        held: agent ids whose rows are held (not claimed) until released.
        mailboxes: agent ids with a mailbox route (their replies are not posted).
        mailbox: replies delivered into a mailbox, by key.
        attempt_logs: each key's attempt log (the last 20, oldest first), kept with its
            row and, once delivered, its receipt.
        buried: rows that could not be decoded, buried as dead letters, by key.
    """

    def __init__(self, *, clock: Clock | None = None, wake: WakeScheduler | None = None) -> None:
        self.clock: Clock = clock or FrozenClock()
        self.wake = wake
        self.rows: dict[str, OutboxRow] = {}
        self.receipts: dict[str, Receipt] = {}
        self.held: set[str] = set()
        self.mailboxes: set[str] = set()
        self.mailbox: dict[str, Reply] = {}
        self.attempt_logs: dict[str, list[Attempt]] = {}
        self.buried: dict[str, UndecodableRow] = {}
        self._held_at: dict[str, datetime] = {}
        self._leases: dict[str, tuple[str, datetime]] = {}
        self._replays = _Replays(self)

    async def add(self, rows: Sequence[OutboxRow]) -> list[str]:
        """Store rows whose key has neither a row nor a receipt; return the keys added."""
        added = []
        for row in rows:
            if row.key in self.rows or row.key in self.receipts:
                continue
            self.rows[row.key] = row
            added.append(row.key)
        return added

    async def add_rows(
        self, rows: Sequence[OutboxRow], *, wake_at: datetime | None = None
    ) -> list[str]:
        """Store rows as :meth:`add` does (this call is the transaction); wake for ``wake_at``."""
        added = await self.add(rows)
        if added and wake_at is not None and self.wake is not None:
            await self.wake.schedule_wake(at=wake_at)
        return added

    async def dead_recipients(
        self, *, key: str | None = None, agent_id: str | None = None
    ) -> list[str]:
        """The recipients of the dead letters :meth:`replay` would put back, by agent id."""
        return self._replays.recipients(key, agent_id)

    async def replay(self, *, key: str | None = None, agent_id: str | None = None) -> list[str]:
        """Put dead letters back to pending, due now, with fresh attempts and age.

        Raises:
            InvalidInput: neither ``key`` nor ``agent_id`` was given.
        """
        return await self._replays.replay(key, agent_id)

    async def claim_page(
        self,
        *,
        after_key: str | None,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str] = (),
    ) -> Page:
        """Claim up to ``limit`` due, unheld, unleased pending rows after ``after_key``."""
        keys = [k for k in sorted(self.rows) if after_key is None or k > after_key]
        claim = uuid.uuid4().hex
        rows = self._claim(keys, claim, limit=limit, now=now, lease_s=lease_s, skip=skip_agents)
        return self._page(rows, claim, limit)

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

        With ``newest``, up to that many of the latest-due claimable rows come first.
        """
        keys = sorted(self.rows, key=lambda k: (self.rows[k].due_at, k))
        claim = uuid.uuid4().hex
        fresh = min(max(newest, 0), limit)
        rows = self._claim(
            keys[::-1], claim, limit=fresh, now=now, lease_s=lease_s, skip=skip_agents
        )
        rows += self._claim(
            keys, claim, limit=limit - len(rows), now=now, lease_s=lease_s, skip=skip_agents
        )
        return self._page(sorted(rows, key=lambda r: r.key), claim, limit)

    def _claim(
        self,
        keys: list[str],
        claim: str,
        *,
        limit: int,
        now: datetime,
        lease_s: float,
        skip: Collection[str],
    ) -> list[OutboxRow]:
        rows: list[OutboxRow] = []
        for key in keys:
            if len(rows) >= limit:
                break
            row = self.rows[key]
            lease = self._leases.get(key)
            if (
                row.state is RowState.PENDING
                and row.due_at <= now
                and row.recipient.agent_id not in self.held
                and row.recipient.agent_id not in skip
                and (lease is None or lease[1] <= now)
            ):
                rows.append(row)
                self._leases[key] = (claim, now + timedelta(seconds=lease_s))
        return rows

    def _page(self, rows: list[OutboxRow], claim: str, limit: int) -> Page:
        routes = {
            row.recipient.agent_id: RouteHint(kind="mailbox")
            for row in rows
            if row.recipient.agent_id in self.mailboxes
        }
        return Page(rows=rows, claim=claim, more=len(rows) == limit, routes=routes)

    async def store(self, items: Sequence[Settled]) -> list[str]:
        """Store outcomes of rows from any number of claims; rows a claim lost are skipped."""
        stored = []
        for item in items:
            key = item.outcome.key
            lease = self._leases.get(key)
            if lease is None or lease[0] != item.claim:
                continue
            del self._leases[key]
            if item.attempt is not None:
                log = [*self.attempt_logs.get(key, []), item.attempt]
                self.attempt_logs[key] = log[-ATTEMPT_LOG_MAX:]
            outcome = item.outcome
            if isinstance(outcome, Receipt):
                row = self.rows.pop(key)
                self.receipts[key] = outcome
                if item.mailbox:
                    self.mailbox[key] = row.reply
            elif isinstance(outcome, UndecodableRow):
                self.buried[key] = outcome
            else:
                self.rows[key] = outcome
            stored.append(key)
        return stored

    async def release_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """Give rows back untouched: the lease of each row still held by its claim ends."""
        for claim, key in items:
            lease = self._leases.get(key)
            if lease is not None and lease[0] == claim:
                del self._leases[key]

    async def get(self, key: str) -> OutboxRow | Receipt | None:
        """The row or receipt under ``key``, if any."""
        return self.rows.get(key) or self.receipts.get(key)

    async def has_pending(self) -> bool:
        """Whether any reply still awaits a delivery attempt (held ones included)."""
        return any(row.state is RowState.PENDING for row in self.rows.values())

    async def next_due_at(self) -> datetime | None:
        """The earliest time a pending, unheld reply is owed an attempt."""
        due = [
            row.due_at
            for row in self.rows.values()
            if row.state is RowState.PENDING and row.recipient.agent_id not in self.held
        ]
        return min(due, default=None)

    async def next_claimable_at(
        self, *, now: datetime, skip_agents: Collection[str] = ()
    ) -> datetime | None:
        """The earliest due time of a row a claim at ``now`` could take (unleased, unheld)."""
        times = []
        for key, row in self.rows.items():
            agent = row.recipient.agent_id
            lease = self._leases.get(key)
            if (
                row.state is RowState.PENDING
                and agent not in self.held
                and agent not in skip_agents
                and (lease is None or lease[1] <= now)
            ):
                times.append(row.due_at)
        return min(times, default=None)

    def release_lease(self, key: str) -> None:
        """End the lease on ``key``, whoever holds it (a replayed row is claimable at once)."""
        self._leases.pop(key, None)

    @property
    def dead_letters(self) -> dict[str, OutboxRow]:
        """The dead rows by key."""
        return {key: row for key, row in self.rows.items() if row.state is RowState.DEAD}

    def hold(self, agent_id: str, *, now: datetime | None = None) -> None:
        """Hold a recipient: its rows stay, untouched and unaged, until released.

        Args:
            agent_id: the recipient.
            now: when the hold begins (needed for the release to give rows their age
                back; a second hold keeps the first time).
        """
        self.held.add(agent_id)
        if now is not None:
            self._held_at.setdefault(agent_id, now)

    def release(self, agent_id: str, *, now: datetime | None = None) -> None:
        """Release a held recipient; its pending rows get back the age they had at the hold.

        Args:
            agent_id: the recipient.
            now: when the hold ends; rows written during the hold age from here.
        """
        self.held.discard(agent_id)
        held_at = self._held_at.pop(agent_id, None)
        if held_at is None or now is None:
            return
        for key, row in self.rows.items():
            start = max(held_at, row.created_at)
            if row.recipient.agent_id == agent_id and row.state is RowState.PENDING and now > start:
                self.rows[key] = replace(row, created_at=row.created_at + (now - start))


class _Replays:
    """The outbox's dead letters put back to pending (its :meth:`InMemoryOutbox.replay`)."""

    def __init__(self, outbox: InMemoryOutbox) -> None:
        self.outbox = outbox

    def recipients(self, key: str | None, agent_id: str | None) -> list[str]:
        """The recipients of the dead letters named, by agent id."""
        return sorted({row.recipient.agent_id for row in self._dead(key, agent_id)})

    async def replay(self, key: str | None, agent_id: str | None) -> list[str]:
        """Put the dead letters named back to pending, due now; wake a drain for then."""
        if key is None and agent_id is None:
            raise InvalidInput("name a dead letter key or a recipient agent id", field="key")
        outbox = self.outbox
        now = outbox.clock.now()
        replayed = []
        for row in self._dead(key, agent_id):
            outbox.rows[row.key] = replace(
                row,
                state=RowState.PENDING,
                attempts=0,
                deferrals=0,
                due_at=now,
                created_at=now,
                dead_reason=None,
            )
            outbox.release_lease(row.key)
            replayed.append(row.key)
        if replayed and outbox.wake is not None:
            await outbox.wake.schedule_wake(at=now)
        return sorted(replayed)

    def _dead(self, key: str | None, agent_id: str | None) -> list[OutboxRow]:
        return [
            row
            for row in self.outbox.dead_letters.values()
            if (key is None or row.key == key)
            and (agent_id is None or row.recipient.agent_id == agent_id)
        ]
