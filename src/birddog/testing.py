"""Fakes for tests: outbox, transport, clock, wake and token book, all in memory.

They hold state you can inspect (``rows``, ``receipts``, ``sent``, ``scheduled``) and obey
the same contract as the real adapters; one contract suite runs against both.
"""

from __future__ import annotations

import hashlib
import inspect
import secrets
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from birddog.core.delivery import (
    ATTEMPT_LOG_MAX,
    Attempt,
    DeliveryResult,
    OutboxRow,
    Receipt,
    RowOutcome,
    RowState,
    UndecodableRow,
)
from birddog.core.mail import AgentAddress, Reply
from birddog.core.tokens import TOKEN_BYTES, make_token, token_digest
from birddog.ports import Page, RouteHint, Settled, settled

Answer = bool | DeliveryResult
AnswerFn = Callable[[Reply], Answer | Awaitable[Answer]]


class InMemoryOutbox:
    """An outbox in a dict: the reference implementation of the outbox port.

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

    def __init__(self) -> None:
        self.rows: dict[str, OutboxRow] = {}
        self.receipts: dict[str, Receipt] = {}
        self.held: set[str] = set()
        self.mailboxes: set[str] = set()
        self.mailbox: dict[str, Reply] = {}
        self.attempt_logs: dict[str, list[Attempt]] = {}
        self.buried: dict[str, UndecodableRow] = {}
        self._held_at: dict[str, datetime] = {}
        self._leases: dict[str, tuple[str, datetime]] = {}

    async def add(self, rows: Sequence[OutboxRow]) -> list[str]:
        """Store rows whose key has neither a row nor a receipt; return the keys added."""
        added = []
        for row in rows:
            if row.key in self.rows or row.key in self.receipts:
                continue
            self.rows[row.key] = row
            added.append(row.key)
        return added

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

    async def apply(
        self,
        *,
        page: Page,
        outcomes: Sequence[RowOutcome],
        attempts: Sequence[Attempt | None] = (),
        mailbox: Collection[str] = (),
    ) -> list[str]:
        """Store one claim's outcomes; rows no longer held by the claim are skipped."""
        return await self.store(settled(page, outcomes, attempts, mailbox))

    async def release_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """Give rows back untouched: the lease of each row still held by its claim ends."""
        for claim, key in items:
            lease = self._leases.get(key)
            if lease is not None and lease[0] == claim:
                del self._leases[key]

    async def release_claim(self, *, page: Page) -> None:
        """Give a page's rows back untouched: their lease ends now."""
        await self.release_rows([(page.claim, row.key) for row in page.rows])

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


class RecordingTransport:
    """A transport that records every reply and answers with a function or a fixed value.

    Args:
        answer: ``True``/``False``, a delivery result, or a (sync or async) function of the
            reply returning one. A function may raise to simulate a transport error.

    Attributes:
        sent: every reply posted, in order, retries included.
    """

    def __init__(self, answer: Answer | AnswerFn = True) -> None:
        self.answer = answer
        self.sent: list[Reply] = []

    async def post(self, reply: Reply) -> Answer:
        """Record the reply and answer."""
        self.sent.append(reply)
        if not callable(self.answer):
            return self.answer
        result = self.answer(reply)
        if inspect.isawaitable(result):
            return await result
        return result


class FrozenClock:
    """A clock that moves only when told.

    Args:
        at: the starting time (default 2026-01-01 UTC).
    """

    def __init__(self, at: datetime | None = None) -> None:
        self.at = at or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The frozen time."""
        return self.at

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward and return the new time."""
        self.at += timedelta(seconds=seconds)
        return self.at


@dataclass
class ManualWake:
    """A wake scheduler that only records what it was asked.

    Attributes:
        scheduled: every requested wake time, in order.
        slept: every time a drainer going to sleep was told to look again, in order.
    """

    scheduled: list[datetime] = field(default_factory=list)

    slept: list[datetime] = field(default_factory=list)

    async def schedule_wake(self, *, at: datetime) -> None:
        """Record the wake."""
        self.scheduled.append(at)

    async def going_to_sleep(self, *, until: datetime, now: datetime) -> datetime:
        """Record a drainer going to sleep; it looks again by ``until`` or an armed wake."""
        armed = [at for at in self.scheduled if now < at < until]
        self.slept.append(min(armed, default=until))
        return self.slept[-1]

    @property
    def earliest(self) -> datetime | None:
        """The earliest wake requested so far."""
        return min(self.scheduled, default=None)


@dataclass
class InMemoryTokenBook:
    """A token book in memory: tokens issued here name the address they were issued for.

    Attributes:
        tokens: the live tokens' addresses, by the token's digest (never the token).
    """

    tokens: dict[bytes, AgentAddress] = field(default_factory=dict)

    def issue(self, address: AgentAddress, *, raw: bytes | None = None) -> str:
        """A new token for ``address`` (from ``raw``, 32 bytes, when given: reproducible)."""
        token = make_token(raw if raw is not None else secrets.token_bytes(TOKEN_BYTES))
        self.tokens[hashlib.sha256(token.encode("ascii")).digest()] = address
        return token

    def revoke(self, token: str) -> None:
        """End ``token``; an unknown one is ignored."""
        digest = token_digest(token)
        if digest is not None:
            self.tokens.pop(digest, None)

    async def authenticate(self, token: str) -> AgentAddress | None:
        """The address ``token`` names; None for an unknown, revoked or malformed one."""
        digest = token_digest(token)
        return None if digest is None else self.tokens.get(digest)
