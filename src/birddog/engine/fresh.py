"""Fresh rows overtake a backlog: the watcher that claims each notification's rows at once.

While a backlog fills the window, the loop claims only as room frees, so a notification
would wait behind the rows already due. :class:`FreshRows` reads the listener instead of
the loop while the backlog lasts: it keeps a wake armed for later than now (the
settlement side of the wake protocol then notifies for the next new row), and on each
notification arms it again, then claims at once the ``fresh_rows`` latest-due rows beside
the window's claims. Arming first leaves no gap: a row committed before the new arm is
the claim's, one committed after it announces itself (claiming first, then arming, left
every row settled during the claim to the window's own claims: the tail behind a
backlog). A storm of notifications costs at most one such claim at a time, each for rows
that are due: the window's own claims keep the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import structlog

from birddog.engine.claims import Decided
from birddog.engine.config import EngineConfig
from birddog.engine.window import Window
from birddog.ports import Clock, Listener, Outbox, WakeBoard, WakeScheduler
from birddog.runtime import stop_task

WATCH_S = 5.0
"""The watcher's longest wait on the listener (which then checks its connection)."""

FRESH_RETRY_S = 1.0
"""After a fresh claim failed (the database is away), the watcher waits this long."""

log = structlog.get_logger("birddog.engine")


class FreshRows:
    """Claims fresh rows into the window on each notification, while a backlog lasts.

    Args:
        outbox: where the fresh rows are claimed from.
        wake: the wake the watcher keeps armed (only a
            :class:`~birddog.ports.WakeBoard` is armed; else nothing announces a row).
        clock: the current time.
        config: ``fresh_rows`` (the most one claim takes), ``window_size``, ``lease_s``.
        window: where the claimed rows enter (as any page does, through ``admit``).
        on_decided: told the fates a claim decided without a post (to be stored).

    Attributes:
        claims: how many fresh claims were made.
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        wake: WakeScheduler,
        clock: Clock,
        config: EngineConfig,
        window: Window,
        on_decided: Callable[[list[Decided]], None],
    ) -> None:
        self.outbox = outbox
        self.wake = wake
        self.clock = clock
        self.config = config
        self.window = window
        self.on_decided = on_decided
        self.claims = 0
        self._watcher: asyncio.Task[None] | None = None
        self._listening: asyncio.Task[bool] | None = None  # the watcher's wait, if any

    @property
    def watching(self) -> bool:
        """The watcher runs (it reads the listener, not the loop)."""
        return self._watcher is not None

    def start(self, listener: Listener) -> None:
        """A backlog began: watch ``listener`` until :meth:`stop` (already watching: no-op)."""
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self._watch(listener))

    async def stop(self) -> None:
        """The backlog is over: the loop reads the listener again (and sleeps on it).

        Only the watcher's wait is cancelled: a claim it has under way finishes and its
        rows enter the window (cancelled, they would stay leased, unposted, until the
        lease ends).
        """
        watcher, self._watcher = self._watcher, None
        if watcher is None:
            return
        if self._listening is not None:
            self._listening.cancel()
        # Waited for, not cancelled: cancelled mid-claim, the rows the database had
        # leased would wait out their lease unposted (seen: a fresh reply 71 s late).
        # Seeing ``_watcher`` gone, it returns after its claim or arm under way.
        try:
            await asyncio.wait({watcher})
        finally:
            # Ended: only its result is taken. Still running: the engine itself is being
            # stopped (this wait was cancelled), so the watcher is too.
            await stop_task(watcher)

    async def _watch(self, listener: Listener) -> None:
        """Arm, wait for a notification, arm again and claim; until stopped."""
        armed = False
        while self._watcher is not None:
            if not armed:
                armed = await self._fresh(arm=True)
            if self._watcher is None:
                return
            self._listening = asyncio.ensure_future(listener.wait(WATCH_S))
            try:
                woken = await self._listening
            except asyncio.CancelledError:
                return  # stopped while waiting (never while claiming: see stop)
            finally:
                self._listening = None
            if woken:
                # The notification used the armed wake up: arm again, then claim.
                armed = await self._fresh(arm=True)
                await self._fresh(arm=False)
            else:
                armed = False  # arm again before the armed wake runs out

    async def _fresh(self, *, arm: bool) -> bool:
        """Arm the wake (``arm``), or claim the fresh rows.

        Returns:
            Whether the wake is armed; never raises (the window's claims carry on).
        """
        try:
            if not arm:
                await self._claim()
                return False
            if not isinstance(self.wake, WakeBoard):
                return False
            now = self.clock.now()
            # The settlement side notifies only when the armed wake is later than its
            # row: a wake ahead makes the next new row announce itself. It outlives the
            # watcher's wait, which arms it again when it ends.
            until = now + timedelta(seconds=2 * WATCH_S)
            await self.wake.going_to_sleep(until=until, now=now)
        except Exception as exc:  # the window's own claims carry on
            log.warning("fresh_claim_failed", error=type(exc).__name__)
            await asyncio.sleep(FRESH_RETRY_S)
            return False
        return arm

    async def _claim(self) -> None:
        """Claim up to ``fresh_rows`` of the latest-due rows into the window, beyond its size.

        At most ``window_size + fresh_rows`` rows are held; recipients that hold all they
        may are left out, as in every claim.
        """
        config = self.config
        limit = min(config.fresh_rows, config.window_size + config.fresh_rows - self.window.held)
        if limit < 1:
            return
        now = self.clock.now()
        page = await self.outbox.claim_due(
            limit=limit,
            now=now,
            lease_s=config.lease_s,
            skip_agents=self.window.skip(now),
            newest=limit,
        )
        self.claims += 1
        decided = self.window.admit(page, whole=False, now=self.clock.now())
        if decided:
            self.on_decided(decided)


__all__ = ["FRESH_RETRY_S", "WATCH_S", "FreshRows"]
