"""The drain loop: claim, fill the window, wait, store, sleep; for a page or continuously.

:class:`DeliveryEngine` wires the three parts (:class:`~birddog.engine.window.Window`,
:class:`~birddog.engine.poster.Poster`, :class:`~birddog.engine.outcomes.OutcomeStore`)
and keeps what only the loop knows: when a claim is worth making, how long to wait, and
when to sleep on the wake board.

- A claimed page enters the window (:meth:`Window.admit`); what needs no post goes
  straight to the outcome store; the rest starts as the window allows.
- A post ending (the poster's done callback, :meth:`DeliveryEngine._post_ended`) lets its
  recipient start its next ready rows at once, hands its fates to the outcome store and
  sets the event the loop waits on.
- :meth:`DeliveryEngine.collect` stores what is known, gives back what the window set
  aside, and arms the next wake.
- While a backlog fills the window, a watcher (:class:`~birddog.engine.fresh.FreshRows`)
  reads the listener instead of the loop: it keeps a wake armed and, on each
  notification, claims the few latest-due rows at once beside the window's claims, so
  fresh mail overtakes the backlog instead of waiting for room. It stops when a claim
  comes back short; the loop then goes to sleep on the listener as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from birddog.core.delivery import DeliveryResult
from birddog.core.flow import FlowControl
from birddog.core.schedule import Random
from birddog.engine.claims import Decided, Held, Post, earliest
from birddog.engine.config import EngineConfig
from birddog.engine.fresh import FreshRows
from birddog.engine.outcomes import DrainReport, OutcomeStore
from birddog.engine.poster import Poster
from birddog.engine.window import Window
from birddog.ports import (
    Clock,
    Listener,
    Outbox,
    Page,
    Transport,
    WakeBoard,
    WakeScheduler,
)
from birddog.runtime import stop_task, wait_event

NEWEST_SHARE = 4
"""A continuous claim takes 1/4 of its rows latest-due first, the rest earliest-due first.

Fresh replies then overtake a backlog as long as they arrive slower than a quarter of
the claims (taken newest first, a faster stream would leave its older members to the
backlog's turn); the backlog itself keeps three quarters.
"""


READY_RECHECK_S = 0.1
"""While rows are held ready, the longest wait before the engine looks at them again."""


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

    Attributes:
        window: the rows held and which may be posted now.
        poster: the posts in flight.
        outcomes: the fates known and not yet stored.
        fresh: the watcher that claims fresh rows beside the window during a backlog.
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
        self.outcomes = OutcomeStore(
            outbox=outbox, wake=wake, clock=clock, schedule=config.schedule, rng=rng
        )
        self.poster = Poster(
            transport=transport,
            clock=clock,
            post_timeout_s=config.post_timeout_s,
            on_end=self._post_ended,
        )
        self.window = Window(config=config, start=self.poster.start)
        self._a_post_ended = asyncio.Event()
        # The recipients the last short claim left out (they held all they may): what is
        # still due is theirs, so claiming again is pointless until one of them has room.
        # None: nothing is known (the last claim was full, or rows went back meanwhile).
        self._left_out_of_short_claim: frozenset[str] | None = None
        self._rows_given_back = 0  # how often rows went back to the outbox (see fill)
        self._sleep_until: datetime | None = None
        self._awake_since_wake = True  # the next claim with rows reports the wake's latency
        # The watcher of a backlog: it reads the listener while it runs.
        self.fresh = FreshRows(
            outbox=outbox,
            wake=wake,
            clock=clock,
            config=config,
            window=self.window,
            on_decided=self._fresh_decided,
        )

    # ------------------------------------------------------------------ state

    @property
    def held(self) -> int:
        """Rows claimed and neither stored nor given back (at most ``window_size``)."""
        return self.window.held

    @property
    def in_flight(self) -> int:
        """Posts started and not yet finished."""
        return self.poster.in_flight

    @property
    def full(self) -> bool:
        """No room to claim another row."""
        return self.window.full

    @property
    def flow(self) -> FlowControl:
        """The per-recipient limits (the window's)."""
        return self.window.flow

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
        self.outcomes.add(self.window.admit(page, whole=True, now=self.clock.now()))
        try:
            while self.poster.in_flight:
                await self.poster.wait()
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
        return await self.outbox.claim_page(
            after_key=after_key,
            limit=self.config.page_size,
            now=self.clock.now(),
            lease_s=self.config.lease_s,
        )

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
        try:
            await self._serve(stop, listener, backstop_s, on_report, once=once)
        finally:
            await self.fresh.stop()

    async def _serve(
        self,
        stop: asyncio.Event,
        listener: Listener | None,
        backstop_s: float,
        on_report: Callable[[DrainReport], None],
        *,
        once: bool,
    ) -> None:
        while not stop.is_set():
            more = await self._step(on_report, force=once)
            if not more:
                await self.fresh.stop()
            elif listener is not None and self.config.fresh_rows:
                self.fresh.start(listener)
            if self.outcomes.unstored or self.window.has_surplus or self._room_again():
                continue
            if more:
                if self.window.saturated():
                    await self._wait(stop, None, timeout_s=backstop_s)
                continue
            if once:
                if self.window.held:
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
                if self.outcomes.unstored or self.window.has_surplus:
                    continue
            timeout_s = (self._sleep_until - self.clock.now()).total_seconds()
            if await self._wait(stop, listener, timeout_s=timeout_s):
                self._awake_since_wake = True
                self._left_out_of_short_claim = None
                self._sleep_until = None

    async def _step(self, on_report: Callable[[DrainReport], None], *, force: bool) -> bool:
        """Store what is known while claiming into the room left: the two overlap.

        Storing is a commit (the slow part of a round trip); claiming meanwhile, on
        another connection, keeps posts flowing instead of waiting for it. (More of the
        round trips could overlap here: the next claim with the store, a claim of fresh
        rows on a notification beside the window's claims.)

        Returns:
            Whether more rows may be due right now (the last claim came back full).
        """
        storing = asyncio.ensure_future(self.collect())
        try:
            more = await self.fill(force=force)
            while more and not self.window.saturated():
                if storing.done() and self.outcomes.unstored >= self.config.page_size:
                    # The store ended while this claim was out and a page of outcomes
                    # (a batch's) waits: store it beside the next claim, rather than after
                    # the last one. Fewer wait for the next step: one store per few
                    # single replies would cost a commit each.
                    on_report(storing.result())
                    storing = asyncio.ensure_future(self.collect())
                more = await self.fill()
        finally:
            # Always wait for the store, even when the claim failed: it owns its rows.
            report = await storing
        on_report(report)
        return more

    async def _go_to_sleep(self, now: datetime, backstop_s: float) -> datetime:
        until = now + timedelta(seconds=backstop_s)
        skip = self.window.skip(now)
        due = await self.outbox.next_claimable_at(now=now, skip_agents=skip)
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
        self.window.give_back_surplus(now)
        if self.window.full:
            return True
        skip = self.window.skip(now)
        left_out = self._left_out_of_short_claim
        if not force and left_out is not None and left_out <= skip:
            return False
        if not force and self.window.saturated():
            return True
        limit = min(self.window.claim_size, self.window.room)
        given_back = self._rows_given_back
        page = await self.outbox.claim_due(
            limit=limit,
            now=now,
            lease_s=self.config.lease_s,
            skip_agents=skip,
            # A few of the latest-due rows first: a fresh reply overtakes a backlog.
            newest=max(1, limit // NEWEST_SHARE) if limit > 1 else 0,
        )
        if self._awake_since_wake and page.rows:
            self._awake_since_wake = False
            if self.on_wake_latency is not None:
                late = (now - min(row.due_at for row in page.rows)).total_seconds()
                self.on_wake_latency(max(0.0, late))
        self.outcomes.add(self.window.admit(page, whole=False, now=self.clock.now()))
        if page.more:
            self._left_out_of_short_claim = None
            return True
        # Whatever is left due belongs to the recipients this claim left out (they held
        # all they may), unless rows were given back while it was out: then nothing is
        # known. Not the recipients left out now: their posts may have ended meanwhile.
        self._left_out_of_short_claim = skip if self._rows_given_back == given_back else None
        return False

    # ------------------------------------------------------------------ fresh rows

    @property
    def fresh_claims(self) -> int:
        """Claims made on a notification beside the window's (the fresh-rows watcher's)."""
        return self.fresh.claims

    def _fresh_decided(self, decided: list[Decided]) -> None:
        """A fresh claim decided fates without a post: they wait to be stored."""
        self.outcomes.add(decided)
        self._a_post_ended.set()

    def _room_again(self) -> bool:
        """A recipient left out of the last (short) claim can take more now."""
        left_out = self._left_out_of_short_claim
        return left_out is not None and not left_out <= self.window.skip(self.clock.now())

    # ------------------------------------------------------------------ posts ending

    def _post_ended(self, post: Post, results: list[DeliveryResult] | None, seconds: float) -> None:
        """A post ended: its recipient's next rows start, its fates wait to be stored.

        The poster's done callback, so a recipient's next post starts at once, even while
        the engine waits on the database. A cancelled post (None) only leaves the window.
        """
        now = self.clock.now()
        self.window.post_ended(post, results, seconds=seconds, now=now)
        if results is None:
            return
        self.outcomes.add_posted(post, results, seconds=seconds)
        self._a_post_ended.set()

    # ------------------------------------------------------------------ storing

    async def collect(
        self, *, wake_at: datetime | None = None, wake_next_due: bool = False
    ) -> DrainReport:
        """Store every known outcome (one transaction per store) and arm the next wake.

        The wake policy: one wake, for the earliest of the retries and deferrals just
        written, ``wake_at``, and (with ``wake_next_due``) the outbox's earliest owed row.
        Rows the window set aside (surplus, or ready too long) are given back here too.
        Outcomes whose store fails (the database is away) are kept, and stored by the next
        call.

        Args:
            wake_at: also arm a wake for this time (a full page: now).
            wake_next_due: also arm a wake for the earliest owed row in the outbox.

        Returns:
            What was stored.
        """
        stored = await self.outcomes.store()
        self.window.let_go(stored.rows)
        wake_at = earliest(wake_at, stored.retry_at)
        if self.window.has_surplus:
            await self._release(self.window.take_surplus(), wake=False)
            # They are claimable again: a claim that missed them proves nothing.
            self._rows_given_back += 1
            self._left_out_of_short_claim = None
        await self.outcomes.arm_wake(at=wake_at, next_due=wake_next_due)
        return stored.report

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
        wait_s = min(timeout_s, READY_RECHECK_S) if self.window.has_ready else timeout_s
        woken = False
        if not self.outcomes.unstored:
            self._a_post_ended.clear()
            waiters: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self._a_post_ended.wait()),
            ]
            wake: asyncio.Future[bool] | None = None
            if listener is not None:
                wake = asyncio.ensure_future(listener.wait(wait_s))
                waiters.append(wake)
            try:
                await asyncio.wait(waiters, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    await stop_task(waiter)
            if wake is not None and wake.done() and not wake.cancelled():
                woken = wake.exception() is not None or bool(wake.result())
            if not self.outcomes.unstored:
                return woken or loop.time() >= deadline
        linger_until = loop.time() + self.config.linger_s
        while (
            self.outcomes.unstored < self.config.page_size
            and self.poster.in_flight
            and (left := linger_until - loop.time()) > 0
        ):
            self._a_post_ended.clear()
            await wait_event(self._a_post_ended, left)
        return woken

    # ------------------------------------------------------------------ giving back

    async def close(self, *, grace_s: float) -> DrainReport:
        """Stop: let posts finish within ``grace_s``, store them, give the rest back.

        Returns:
            What was stored while closing.
        """
        return await self._abandon(grace_s=grace_s)

    async def _abandon(self, *, grace_s: float) -> DrainReport:
        give_back = self.window.take_ready()
        if self.poster.in_flight and grace_s > 0:
            await self.poster.wait(timeout_s=grace_s)
        give_back += self.window.take_ready()
        give_back += await self.poster.cancel_all()
        self.window.forget_posts()
        report = DrainReport()
        with contextlib.suppress(Exception):
            report = await self.collect()
        await self._release(give_back, wake=True)
        return report

    async def _release(self, items: Sequence[Held], *, wake: bool) -> None:
        """Give rows back untouched (the outcome store's release), and out of the window."""
        if not items:
            return
        self.window.let_go(len(items))
        await self.outcomes.release(items, wake=wake)


__all__ = ["NEWEST_SHARE", "READY_RECHECK_S", "DeliveryEngine"]
