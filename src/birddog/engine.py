"""The drain engine: the one way BirdDog delivers what the outbox owes.

It claims due rows under a lease, posts them, and stores every outcome a claim at a time,
decided by the pure :func:`~birddog.core.delivery.decide`. Two ways to run it:

- **a page** (:meth:`DeliveryEngine.drain_page`, the spec's ``drainOutbox`` and
  ``MailRoom.drain_outbox``): claim up to ``page_size`` rows in key order after a cursor,
  post them all, wait for every post, store the outcomes; a full page arms a wake for now.
- **continuously** (:meth:`DeliveryEngine.serve`, the daemon): keep up to ``window_size``
  rows in hand, claimed in due order as room frees. Each recipient gets as many posts in
  flight as its adaptive limit allows (:mod:`birddog.core.flow`); claimed rows beyond that
  wait, ready, and start the moment one of that recipient's posts finishes, so a busy
  recipient never waits for a claim. Outcomes are stored as posts finish (lingering
  ``linger_s`` to store them in batches). When nothing more is claimable the engine sleeps
  on the wake board (:class:`~birddog.ports.WakeBoard`): until the earliest claimable row,
  an armed wake, a notification, a post finishing, or its backstop.

Both share one admission (mailbox rows are delivered without a post, rows that cannot be
decoded or sent are buried at once), one place that stores outcomes (:meth:`collect`),
one release path (rows given back untouched) and one wake policy: after storing, the
engine arms a wake for the earliest retry or deferral it wrote (and, for a full page, for
now).

Every claimed row is held until its outcome is stored or it is released: at most
``window_size`` rows, so a crash repeats at most that many posts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from birddog import tracing
from birddog.core.delivery import (
    Accepted,
    Attempt,
    DeadReason,
    DeliveryResult,
    Failed,
    OutboxRow,
    Receipt,
    Rejected,
    RowOutcome,
    RowState,
    UndecodableRow,
    as_result,
    attempt_of,
    unsendable,
)
from birddog.core.delivery import (
    decide_delivery as decide,
)
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import StoreRefused
from birddog.core.flow import FlowControl, Signal
from birddog.core.schedule import Random, RetrySchedule
from birddog.core.text import inert
from birddog.ports import (
    Clock,
    Listener,
    Outbox,
    Page,
    ParcelTransport,
    Settled,
    Transport,
    WakeBoard,
    WakeScheduler,
)

log = structlog.get_logger("birddog.engine")

PAGE_SIZE = 64
"""A drain reads at most this many rows."""

NEWEST_SHARE = 4
"""A continuous claim takes 1/4 of its rows latest-due first, the rest earliest-due first.

Fresh replies then overtake a backlog as long as they arrive slower than a quarter of
the claims (taken newest first, a faster stream would leave its older members to the
backlog's turn); the backlog itself keeps three quarters.
"""


READY_RECHECK_S = 0.1
"""While rows are held ready, the longest wait before the engine looks at them again."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything the engine needs to know besides its ports.

    Attributes:
        schedule: the retry schedule and age limit.
        page_size: the most rows one claim takes (a page).
        lease_s: how long a claim holds its rows before another drainer may take them.
        post_timeout_s: a post still running after this is cancelled and counts as a
            failure; None leaves the timeout to a transport that enforces its own.
        window_size: the most rows held at once (posts in flight and rows ready).
        per_recipient: the most posts in flight to one recipient.
        slow_start: posts in flight to a recipient not heard from lately, to begin with.
        quiet_s: a recipient silent this long starts again with ``slow_start``.
        ready_horizon_s: rows held ready for a recipient: what it can take in this long.
        linger_s: after a post finishes, how long to wait for more before storing.
    """

    schedule: RetrySchedule = field(default_factory=RetrySchedule)
    page_size: int = PAGE_SIZE
    lease_s: float = 60.0
    post_timeout_s: float | None = 30.0
    window_size: int = 256
    per_recipient: int = 16
    slow_start: int = 2
    quiet_s: float = 60.0
    ready_horizon_s: float = 0.5
    linger_s: float = 0.005

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError("page_size must be at least 1")
        if self.window_size < 1 or self.per_recipient < 1:
            raise ValueError("window_size and per_recipient must be at least 1")

    @property
    def ready_max_s(self) -> float:
        """How long a claimed row may wait, ready, before it is given back unposted.

        A post started later could still be out when the claim's lease ends, and another
        drainer could post the same reply meanwhile.
        """
        post = self.post_timeout_s if self.post_timeout_s is not None else self.lease_s / 2
        return max(0.0, self.lease_s - post) / 2


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What one drain (or one store of finished posts) did.

    Attributes:
        claimed: rows whose outcome was decided (posted, delivered to a mailbox, buried).
        delivered: keys that became receipts.
        retried: keys rescheduled after a failure.
        deferred: keys moved by a deferral, without a strike.
        dead: ``(key, reason)`` of rows that became dead letters.
        skipped: keys whose outcome was not stored because another claim took the row.
        more: the page was full; a wake was scheduled for now to continue after it.
        results: each posted key's delivery result.
        dead_rows: the dead letters themselves (for alerts), in ``dead`` order.
    """

    claimed: int = 0
    delivered: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    dead: list[tuple[str, DeadReason]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    more: bool = False
    results: dict[str, DeliveryResult] = field(default_factory=dict, repr=False)
    dead_rows: list[OutboxRow | UndecodableRow] = field(default_factory=list, repr=False)

    def counts(self) -> Counter[str]:
        """Counts by outcome, for logs and metrics."""
        return Counter(
            delivered=len(self.delivered),
            retried=len(self.retried),
            deferred=len(self.deferred),
            dead=len(self.dead),
            skipped=len(self.skipped),
        )

    def add(self, other: DrainReport) -> DrainReport:
        """This report and ``other`` together (``more`` from either)."""
        return DrainReport(
            claimed=self.claimed + other.claimed,
            delivered=self.delivered + other.delivered,
            retried=self.retried + other.retried,
            deferred=self.deferred + other.deferred,
            dead=self.dead + other.dead,
            skipped=self.skipped + other.skipped,
            more=self.more or other.more,
            results=self.results | other.results,
            dead_rows=self.dead_rows + other.dead_rows,
        )


@dataclass(eq=False, slots=True)
class _Claim:
    """A claim the engine still holds rows of (hashed by identity)."""

    page: Page
    taken_at: float
    """``time.monotonic()`` of the claim: a row ready longer than ``ready_max_s`` goes back."""


@dataclass(eq=False, slots=True)
class _Done:
    """A claimed row whose fate is known and not yet stored."""

    claim: _Claim
    row: OutboxRow | UndecodableRow
    result: DeliveryResult | None
    attempt: Attempt | None
    mailbox: bool = False


@dataclass(eq=False, slots=True)
class _Post:
    """One post in flight: a row of one recipient, or a batch of its rows."""

    items: list[tuple[_Claim, OutboxRow]]
    at: datetime
    started: float = field(default_factory=time.perf_counter)
    ended: float = 0.0

    @property
    def agent(self) -> str:
        """The recipient."""
        return self.items[0][1].agent_id


class DeliveryEngine:
    """Claims, posts and stores: the drain, for a page or continuously.

    Args:
        outbox: where owed replies, receipts and dead letters live.
        transport: posts one reply.
        wake: arms wakes; continuous mode sleeps on it when it is a
            :class:`~birddog.ports.WakeBoard` (else it just waits for its timer).
        clock: the current time.
        config: sizes, timeouts and the retry schedule.
        rng: the jitter source for retry delays.
        on_wake_latency: told, after each wake, how late its first claimed row was (s).
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        transport: Transport,
        wake: WakeScheduler,
        clock: Clock,
        config: EngineConfig,
        rng: Random,
        on_wake_latency: Callable[[float], None] | None = None,
    ) -> None:
        self.outbox = outbox
        self.transport = transport
        self.wake = wake
        self.clock = clock
        self.config = config
        self.rng = rng
        self.on_wake_latency = on_wake_latency
        self._parcels = transport if isinstance(transport, ParcelTransport) else None
        self.flow = FlowControl(
            ceiling=config.per_recipient,
            initial=config.slow_start,
            quiet_s=config.quiet_s,
            horizon_s=config.ready_horizon_s,
            hold_max=config.window_size,
        )
        self._held = 0
        self._ready: dict[str, deque[tuple[_Claim, OutboxRow]]] = {}
        self._flying: Counter[str] = Counter()
        self._flying_rows: Counter[str] = Counter()
        self._batch: dict[str, int] = {}
        self._posts: dict[asyncio.Task[list[DeliveryResult]], _Post] = {}
        self._cancelled: list[_Post] = []
        self._done: list[_Done] = []
        self._stale: list[tuple[_Claim, OutboxRow]] = []
        self._progress = asyncio.Event()
        self._dry: frozenset[str] | None = None
        self._given_back = 0  # releases of surplus rows so far (see fill)
        self._sleep_until: datetime | None = None
        self._woken = True

    # ------------------------------------------------------------------ state

    @property
    def held(self) -> int:
        """Rows claimed and neither stored nor given back (at most ``window_size``)."""
        return self._held

    @property
    def in_flight(self) -> int:
        """Posts started and not yet finished."""
        return len(self._posts)

    @property
    def full(self) -> bool:
        """No room to claim another row."""
        return self._held >= self.config.window_size

    # ------------------------------------------------------------------ page mode

    async def drain_page(self, *, after_key: str | None) -> tuple[DrainReport, str | None]:
        """Post one page of due rows in key order after ``after_key``; store every outcome.

        An empty page after a cursor starts again from the first key. Every row of the
        page is posted at once (no per-recipient limit: the page is the spec's unit).
        Cancelled (shutdown), the page's rows are given back untouched.

        Args:
            after_key: continue after this key; None starts at the beginning.

        Returns:
            What the drain did (``more``: a wake for now was armed), and the cursor for
            the next drain (None: start again from the top).
        """
        page = await self._claim_page(after_key)
        if page.size == 0 and after_key is not None:
            page = await self._claim_page(None)
        self._admit(page, whole=True)
        try:
            while self._posts:
                await asyncio.wait(set(self._posts))
        except asyncio.CancelledError:
            # Stopped mid-page: nothing was decided, so give the rows back at once rather
            # than leave them leased. A post that reached its recipient is posted again
            # later; delivery is at least once and the reply key is the idempotency key.
            await asyncio.shield(self._abandon(grace_s=0.0))
            raise
        if page.more:
            report = await self.collect(wake_at=self.clock.now())
        else:
            # A host drains page by page on its own timer: arm it for the next owed row.
            report = await self.collect(wake_next_due=True)
        return replace(report, more=page.more), page.last_key if page.more else None

    async def _claim_page(self, after_key: str | None) -> Page:
        page = await self.outbox.claim_page(
            after_key=after_key,
            limit=self.config.page_size,
            now=self.clock.now(),
            lease_s=self.config.lease_s,
        )
        self._held += page.size
        return page

    # ------------------------------------------------------------------ continuous mode

    async def serve(
        self,
        *,
        stop: asyncio.Event,
        listener: Listener | None,
        backstop_s: float,
        on_report: Callable[[DrainReport], None],
        once: bool = False,
    ) -> None:
        """Drain continuously in due order until ``stop`` (or, with ``once``, until idle).

        Database errors propagate; the caller backs off and calls again, and the engine
        carries on with what it holds (posts in flight, outcomes not yet stored). Call
        :meth:`close` when done.

        Args:
            stop: set to return (after the current step).
            listener: reports wakes (``NOTIFY``); None never listens.
            backstop_s: the longest sleep without a wake.
            on_report: told what each store of outcomes did.
            once: return when nothing is held and nothing is claimable now (no sleeping
                on the wake board: a drainer that leaves must not promise to look again).
        """
        while not stop.is_set():
            more = await self._step(on_report, force=once)
            if self._done or self._stale or self._room_again():
                continue
            if more:
                if self._saturated():
                    await self._wait(stop, None, timeout_s=backstop_s)
                continue
            if once:
                if self._held:
                    await self._wait(stop, None, timeout_s=backstop_s)
                    continue
                now = self.clock.now()
                due = await self.outbox.next_claimable_at(now=now)
                if due is None or due > now:
                    return
                continue
            now = self.clock.now()
            if self._sleep_until is None or self._sleep_until <= now:
                self._sleep_until = await self._go_to_sleep(now, backstop_s)
                # The wake protocol's last look: a wake armed while this drainer was
                # deciding to sleep is visible to this claim, or was announced to it.
                await self.fill(force=True)
                if self._done or self._stale:
                    continue
            timeout_s = (self._sleep_until - self.clock.now()).total_seconds()
            if await self._wait(stop, listener, timeout_s=timeout_s):
                self._woken = True
                self._dry = None
                self._sleep_until = None

    async def _step(self, on_report: Callable[[DrainReport], None], *, force: bool) -> bool:
        """Store what is known while claiming into the room left: the two overlap.

        Storing is a commit (the slow part of a round trip); claiming meanwhile, on
        another connection, keeps posts flowing instead of waiting for it.

        Returns:
            Whether more rows may be due right now (the last claim came back full).
        """
        storing = asyncio.ensure_future(self.collect())
        try:
            more = await self.fill(force=force)
            while more and not self._saturated():
                more = await self.fill()
        finally:
            # Always wait for the store, even when the claim failed: it owns its rows.
            report = await storing
        on_report(report)
        return more

    async def _go_to_sleep(self, now: datetime, backstop_s: float) -> datetime:
        until = now + timedelta(seconds=backstop_s)
        due = await self.outbox.next_claimable_at(now=now, skip_agents=self._skip(now))
        if due is not None and due > now:
            until = min(until, due)
        if isinstance(self.wake, WakeBoard):
            return await self.wake.going_to_sleep(until=until, now=now)
        return until

    async def fill(self, *, force: bool = False) -> bool:
        """Claim the earliest-due rows into the room left (one claim), and start them.

        Recipients that hold all they may are left out of the claim. After a claim came
        back short, the engine does not claim again (unless ``force``) until a wake, or
        until a recipient that was left out can take more. One claim per call, so that
        the caller stores finished outcomes between claims.

        Args:
            force: claim even when the last claim found nothing more.

        Returns:
            True when the claim came back full (or none was worth making with the window
            this full): more rows may be due right now.
        """
        now = self.clock.now()
        # A recipient whose posts slowed down holds less now than when its rows came.
        self._give_back_surplus(now)
        if self.full:
            return True
        skip = self._skip(now)
        if not force and self._dry is not None and self._dry <= skip:
            return False
        if not force and self._saturated():
            return True
        limit = min(self.config.page_size, self.config.window_size - self._held)
        given_back = self._given_back
        page = await self.outbox.claim_due(
            limit=limit,
            now=now,
            lease_s=self.config.lease_s,
            skip_agents=skip,
            # A few of the latest-due rows first: a fresh reply overtakes a backlog.
            newest=max(1, limit // NEWEST_SHARE) if limit > 1 else 0,
        )
        self._held += page.size
        if self._woken and page.rows:
            self._woken = False
            if self.on_wake_latency is not None:
                late = (now - min(row.due_at for row in page.rows)).total_seconds()
                self.on_wake_latency(max(0.0, late))
        self._admit(page, whole=False)
        if page.more:
            self._dry = None
            return True
        # Whatever is left due belongs to the recipients this claim left out (they held
        # all they may), unless rows were given back while it was out: then nothing is
        # known. Not the recipients left out now: their posts may have ended meanwhile.
        self._dry = skip if self._given_back == given_back else None
        return False

    def _room_again(self) -> bool:
        """A recipient left out of the last (short) claim can take more now."""
        return self._dry is not None and not self._dry <= self._skip(self.clock.now())

    def _saturated(self) -> bool:
        """No claim is worth making now: the window is full, or nearly, with enough ready.

        Less than a page of the window free while at least as many rows wait ready: the
        engine claims a page at a time rather than a row at a time.
        """
        free = self.config.window_size - self._held
        if free <= 0:
            return True
        return free < self.config.page_size and sum(map(len, self._ready.values())) >= free

    def _skip(self, now: datetime) -> frozenset[str]:
        holding = Counter(self._flying_rows)
        for agent, ready in self._ready.items():
            holding[agent] += len(ready)
        waited = self._waited()
        return frozenset(
            agent
            for agent, count in holding.items()
            if count >= self._hold(agent, now, waited.get(agent, 0.0))
        )

    def _hold(self, agent: str, now: datetime, waited_s: float) -> int:
        """The rows the engine may hold for ``agent``: its posts' worth, in batches if batched."""
        return self.flow.hold(agent, now=now, waited_s=waited_s) * self._batch.get(agent, 1)

    def _waited(self) -> dict[str, float]:
        """How long each recipient's oldest post in flight has been out (seconds)."""
        started: dict[str, float] = {}
        for post in self._posts.values():
            agent = post.agent
            if agent not in started or post.started < started[agent]:
                started[agent] = post.started
        clock = time.perf_counter()
        return {agent: clock - at for agent, at in started.items()}

    # ------------------------------------------------------------------ admission

    def _admit(self, page: Page, *, whole: bool) -> None:
        """Take a claimed page in: bury, deliver to mailboxes, make the rest ready, start."""
        claim = _Claim(page=page, taken_at=time.monotonic())
        now = self.clock.now()
        for buried in page.undecodable:
            attempt = Attempt(at=now, result="rejected", status=None, ms=0, error=buried.error)
            self._done.append(_Done(claim, buried, None, attempt))
        whole_posts: dict[str, list[tuple[_Claim, OutboxRow]]] = {}
        for row in page.rows:
            agent = row.agent_id
            route = page.route(agent)
            if route.batch_size > 1:
                self._batch[agent] = route.batch_size
            else:
                self._batch.pop(agent, None)
            if route.kind == "mailbox":
                self._decided(claim, row, Accepted(), now, mailbox=True)
            elif (why := unsendable(row.parcel)) is not None:
                self._decided(claim, row, Rejected(why, dead_reason=DeadReason.UNSENDABLE), now)
            elif whole:
                whole_posts.setdefault(agent, []).append((claim, row))
            else:
                self._ready.setdefault(agent, deque()).append((claim, row))
        for agent, items in whole_posts.items():
            size = self._batch.get(agent, 1)
            for start in range(0, len(items), size):
                self._start(items[start : start + size])
        if not whole:
            self._give_back_surplus(now)
            self._pump(now)

    def _decided(
        self,
        claim: _Claim,
        row: OutboxRow,
        result: DeliveryResult,
        now: datetime,
        *,
        mailbox: bool = False,
    ) -> None:
        attempt = attempt_of(result, at=now, seconds=0.0)
        self._done.append(_Done(claim, row, result, attempt, mailbox=mailbox))

    def _give_back_surplus(self, now: datetime) -> None:
        """Rows held beyond what a recipient may hold go back (at the next store).

        After a claim (it may bring more than a recipient has room for), and before one:
        a recipient whose posts have slowed down holds less than when its rows came.
        """
        if not self._ready:
            return
        waited = self._waited()
        for agent, ready in list(self._ready.items()):
            hold = self._hold(agent, now, waited.get(agent, 0.0))
            room = max(hold - self._flying_rows[agent], 0)
            while len(ready) > room:
                self._stale.append(ready.pop())
            if not ready:
                del self._ready[agent]  # nothing held ready: no reason to look again soon

    def _pump(self, now: datetime) -> None:
        """Start ready rows of every recipient that has room (after a claim)."""
        for agent in list(self._ready):
            self._pump_agent(agent, now)

    def _pump_agent(self, agent: str, now: datetime) -> None:
        """Start ``agent``'s ready rows while it has room: the moment one of its posts ends.

        A recipient that takes batches gets a partial batch only when none of its posts is
        out (so a lone reply waits for no one); while one is, its rows gather until a full
        batch is ready or that post ends, as Nagle's algorithm gathers small writes.
        """
        ready = self._ready.get(agent)
        if ready is None:
            return
        limit = self.flow.limit(agent, now=now)
        size = self._batch.get(agent, 1)
        expired = time.monotonic() - self.config.ready_max_s
        while (
            ready
            and self._flying[agent] < limit
            and (len(ready) >= size or not self._flying[agent])
        ):
            batch: list[tuple[_Claim, OutboxRow]] = []
            while ready and len(batch) < size:
                claim, row = ready.popleft()
                if claim.taken_at < expired:
                    self._stale.append((claim, row))
                else:
                    batch.append((claim, row))
            if batch:
                self._start(batch)
        if not ready:
            del self._ready[agent]

    def _start(self, items: list[tuple[_Claim, OutboxRow]]) -> None:
        """Post one row, or a batch of one recipient's rows, as one post."""
        post = _Post(items=items, at=self.clock.now())
        rows = [row for _, row in items]
        task = asyncio.ensure_future(self._post(rows))
        self._posts[task] = post  # the engine holds every post it started, until it ends
        task.add_done_callback(self._on_done)
        self._flying[post.agent] += 1
        self._flying_rows[post.agent] += len(items)

    async def _send(self, rows: list[OutboxRow]) -> list[DeliveryResult]:
        if self._parcels is not None:
            # The stored JSON goes out as it is: no model on the way.
            results = await self._parcels.post_parcels([row.parcel for row in rows])
            if len(results) != len(rows):
                count = f"{len(results)} results for {len(rows)} replies"
                return [Failed(f"transport answered {count}")] * len(rows)
            return [as_result(result) for result in results]
        # A transport without the fast path posts each reply on its own.
        return [as_result(await self.transport.post(row.reply)) for row in rows]

    async def _post(self, rows: list[OutboxRow]) -> list[DeliveryResult]:
        """Post one row's reply (or a batch); a traced post is its ``birddog.post`` span.

        The span is a child of the first traced row's context, linked to the others'.
        """
        traced = [row.traceparent for row in rows if row.traceparent is not None]
        if not traced:
            return await self._post_once(rows)
        ids: dict[str, str | int] = {
            "reply_key": rows[0].key,
            "recipient": rows[0].agent_id,
            "replies": len(rows),
        }
        with tracing.span(
            "post", parent=traced[0], links=traced[1:], kind="client", attributes=ids
        ) as span:
            results = await self._post_once(rows)
            span.note(result="/".join(sorted({type(r).__name__.lower() for r in results})))
            return results

    async def _post_once(self, rows: list[OutboxRow]) -> list[DeliveryResult]:
        """Post one row's reply (or a batch); a timeout or a raise is a failure, never a crash."""
        timeout_s = self.config.post_timeout_s
        try:
            if timeout_s is None:
                return await self._send(rows)
            async with asyncio.timeout(timeout_s):
                return await self._send(rows)
        except TimeoutError:
            return [Failed(f"no answer within {timeout_s or 0:g} s")] * len(rows)
        except Exception as exc:
            return [Failed(bounded_diagnostic(f"{type(exc).__name__}: {exc}"))] * len(rows)

    def _on_done(self, task: asyncio.Task[list[DeliveryResult]]) -> None:
        """A post ended: note its outcome, teach flow control, start the recipient's next.

        Runs as the task's done callback, so a recipient's next post starts at once, even
        while the engine waits on the database.
        """
        post = self._posts.pop(task, None)
        if post is None:
            return
        seconds = time.perf_counter() - post.started
        agent = post.agent
        self._flying[agent] -= 1
        if self._flying[agent] <= 0:
            del self._flying[agent]
        self._flying_rows[agent] -= len(post.items)
        if self._flying_rows[agent] <= 0:
            del self._flying_rows[agent]
        if task.cancelled():
            # Only the engine cancels a post (closing): its rows go back untouched.
            self._cancelled.append(post)
            return
        results = _task_results(task, len(post.items))
        now = self.clock.now()
        self.flow.answered(agent, _signal(results), seconds=seconds, now=now)
        for (claim, row), result in zip(post.items, results, strict=True):
            attempt = attempt_of(result, at=post.at, seconds=seconds)
            self._done.append(_Done(claim, row, result, attempt))
        self._pump_agent(agent, now)
        self._progress.set()

    # ------------------------------------------------------------------ storing

    async def collect(
        self, *, wake_at: datetime | None = None, wake_next_due: bool = False
    ) -> DrainReport:
        """Store every known outcome (one ``apply`` per claim) and arm the next wake.

        The wake policy: one wake, for the earliest of the retries and deferrals just
        written, ``wake_at``, and (with ``wake_next_due``) the outbox's earliest owed row.
        Rows that went stale while ready are given back here too. Outcomes whose store
        fails (the database is away) are kept, and stored by the next call.

        Args:
            wake_at: also arm a wake for this time (a full page: now).
            wake_next_due: also arm a wake for the earliest owed row in the outbox.

        Returns:
            What was stored.
        """
        report = DrainReport()
        if self._done:
            pending, self._done = self._done, []
            try:
                try:
                    report, retry_at = await self._store(pending, self.clock.now())
                except StoreRefused:
                    # One row's stored fields can make the whole statement fail.
                    report, retry_at = await self._store_apart(pending)
            except BaseException:
                # Not stored (the database is away): keep them for the next call.
                self._done = pending + self._done
                raise
            self._held -= len(pending)
            wake_at = _earliest(wake_at, retry_at)
        if self._stale:
            stale, self._stale = self._stale, []
            await self._release(stale, wake=False)
            # They are claimable again: a claim that missed them proves nothing.
            self._given_back += 1
            self._dry = None
        if wake_next_due:
            wake_at = _earliest(wake_at, await self.outbox.next_due_at())
        if wake_at is not None:
            await self.wake.schedule_wake(at=wake_at)
        return report

    async def _store_apart(self, items: list[_Done]) -> tuple[DrainReport, datetime | None]:
        """Store outcomes one by one after the database refused them together.

        A row whose own outcome is refused (its stored fields are damaged: a count at
        the integer's limit, say) is buried as ``undecodable`` with the reason, so it
        cannot hold back the others. If even that is refused, the row is left to its
        lease, logged, and comes back after it.

        Raises:
            StoreUnavailable: the database went away; nothing of ``items`` is lost (the
                ones stored are skipped when they come back: their claim ended).
        """
        report = DrainReport()
        retry_at: datetime | None = None
        for done in items:
            now = self.clock.now()
            try:
                stored, when = await self._store([done], now)
            except StoreRefused as refused:
                buried = _Done(done.claim, _unstorable(done.row, refused), None, None)
                try:
                    stored, when = await self._store([buried], now)
                except StoreRefused:
                    stored, when = DrainReport(claimed=1, skipped=[done.row.key]), None
                    # No traceback: the server's text may quote the row. Class and SQLSTATE.
                    log.error(  # noqa: TRY400
                        "row_unstorable", key=inert(done.row.key), error=str(refused)
                    )
            report = report.add(stored)
            retry_at = _earliest(retry_at, when)
        return report, retry_at

    async def _store(
        self, items: list[_Done], now: datetime
    ) -> tuple[DrainReport, datetime | None]:
        """Decide and store known outcomes (one transaction); the earliest retry written."""
        settled: list[Settled] = []
        for done in items:
            row = done.row
            outcome: RowOutcome = (
                row
                if isinstance(row, UndecodableRow) or done.result is None
                else decide(row, done.result, now=now, schedule=self.config.schedule, rng=self.rng)
            )
            settled.append(Settled(done.claim.page.claim, outcome, done.attempt, done.mailbox))
        stored = set(await self.outbox.store(settled))
        report = DrainReport(claimed=len(items))
        retry_at: datetime | None = None
        for done, item in zip(items, settled, strict=True):
            outcome = item.outcome
            key = outcome.key
            if done.result is not None:
                report.results[key] = done.result
            if key not in stored:
                report.skipped.append(key)
            elif isinstance(outcome, Receipt):
                report.delivered.append(key)
            elif outcome.state is RowState.DEAD:
                report.dead.append((key, outcome.dead_reason or DeadReason.REJECTED))
                report.dead_rows.append(outcome)
            else:
                retry_at = _earliest(retry_at, outcome.due_at)
                before = done.row
                if isinstance(before, OutboxRow) and outcome.deferrals > before.deferrals:
                    report.deferred.append(key)
                else:
                    report.retried.append(key)
        return report, retry_at

    # ------------------------------------------------------------------ waiting

    async def _wait(
        self, stop: asyncio.Event, listener: Listener | None, *, timeout_s: float
    ) -> bool:
        """Wait for a post to end, a wake, ``stop``, or ``timeout_s``.

        After the first post ends, linger up to ``linger_s`` while more end (up to a
        page's worth), starting each recipient's next ready row at once, so outcomes are
        stored, and claims made, a batch at a time.

        Returns:
            True after a wake: a notification, a lost listener, or the timeout.
        """
        if timeout_s <= 0:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # Rows held ready for a recipient whose posts are out: look again soon, since the
        # longer those posts take the fewer rows it may hold (see FlowControl.hold), and
        # what it gives back may be all that another recipient is waiting for.
        wait_s = min(timeout_s, READY_RECHECK_S) if self._ready else timeout_s
        woken = False
        if not self._done:
            self._progress.clear()
            waiters: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self._progress.wait()),
            ]
            wake: asyncio.Future[bool] | None = None
            if listener is not None:
                wake = asyncio.ensure_future(listener.wait(wait_s))
                waiters.append(wake)
            try:
                await asyncio.wait(waiters, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await waiter
            if wake is not None and wake.done() and not wake.cancelled():
                woken = wake.exception() is not None or bool(wake.result())
            if not self._done:
                return woken or loop.time() >= deadline
        linger_until = loop.time() + self.config.linger_s
        while (
            len(self._done) < self.config.page_size
            and self._posts
            and (left := linger_until - loop.time()) > 0
        ):
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), left)
        return woken

    # ------------------------------------------------------------------ giving back

    async def close(self, *, grace_s: float) -> DrainReport:
        """Stop: let posts finish within ``grace_s``, store them, give the rest back.

        Returns:
            What was stored while closing.
        """
        return await self._abandon(grace_s=grace_s)

    async def _abandon(self, *, grace_s: float) -> DrainReport:
        give_back = [item for ready in self._ready.values() for item in ready]
        self._ready.clear()
        if self._posts and grace_s > 0:
            await asyncio.wait(set(self._posts), timeout=grace_s)
        give_back += [item for ready in self._ready.values() for item in ready]
        self._ready.clear()
        for task in list(self._posts):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        give_back += [item for post in self._cancelled for item in post.items]
        self._cancelled.clear()
        self._posts.clear()
        self._flying.clear()
        self._flying_rows.clear()
        report = DrainReport()
        with contextlib.suppress(Exception):
            report = await self.collect()
        await self._release(give_back, wake=True)
        return report

    async def _release(self, items: Sequence[tuple[_Claim, OutboxRow]], *, wake: bool) -> None:
        """The one release path: rows go back untouched, due as before, their lease ended.

        Args:
            items: the rows and the claims that hold them.
            wake: arm a wake for the earliest of them (another drainer may be asleep).
        """
        if not items:
            return
        self._held -= len(items)
        with contextlib.suppress(Exception):
            await self.outbox.release_rows([(claim.page.claim, row.key) for claim, row in items])
        if wake:
            with contextlib.suppress(Exception):
                await self.wake.schedule_wake(at=min(row.due_at for _, row in items))


def _unstorable(row: OutboxRow | UndecodableRow, refused: StoreRefused) -> UndecodableRow:
    """A row whose outcome the database refused, as a row to bury with the reason."""
    error = bounded_diagnostic(f"its outcome could not be stored, the row is damaged: {refused}")
    if isinstance(row, UndecodableRow):
        return replace(row, error=error)
    return UndecodableRow(
        key=row.key,
        agent_id=row.agent_id,
        attempts=row.attempts,
        deferrals=row.deferrals,
        due_at=row.due_at,
        error=error,
    )


def _task_results(task: asyncio.Task[list[DeliveryResult]], count: int) -> list[DeliveryResult]:
    if task.cancelled():
        return [Failed("post cancelled")] * count
    error = task.exception()
    if error is not None:
        return [Failed(bounded_diagnostic(f"{type(error).__name__}: {error}"))] * count
    return task.result()


def _signal(results: list[DeliveryResult]) -> Signal:
    # A batch the recipient took any of says it is there and answering.
    if any(isinstance(result, Accepted) for result in results):
        return Signal.OK
    if all(isinstance(result, Rejected) for result in results):
        return Signal.NEUTRAL
    return Signal.CONGESTED


def _earliest(*times: datetime | None) -> datetime | None:
    present = [when for when in times if when is not None]
    return min(present, default=None)


__all__ = ["PAGE_SIZE", "DeliveryEngine", "DrainReport", "EngineConfig"]
