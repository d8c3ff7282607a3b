"""The resident drain daemon: sleep until the earliest wake, drain page after page.

The loop waits on the first of three things: a ``NOTIFY birddog_wake`` (a hint, so it
always re-queries), the earliest due time in the outbox, and a backstop timer. Side
tasks (heartbeat and backlog gauges, the job reaper) run in one ``TaskGroup``: if one
dies, the daemon stops loudly. The metrics server is started beside it by
:mod:`birddog.bootstrap`, reading :attr:`DrainDaemon.healthy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from birddog.mailroom import DrainReport, MailRoom
from birddog.metrics import Metrics
from birddog.ports import Clock, Listener
from birddog.runtime import Backoff, database_errors, sleep_unless_stopped
from birddog.settings import Settings
from birddog.window import DeliveryWindow

log = structlog.get_logger("birddog.daemon")

IDLE_RECHECK_S = 0.5
"""How soon to look again when rows are due but leased by another daemon."""


class DrainDaemon:
    """Runs the mail room's drain until stopped.

    Args:
        room: the mail room over the Postgres outbox and the HTTP transport.
        listener: reports wakes (``LISTEN birddog_wake`` on a dedicated connection).
        clock: the current time (due times are compared with it).
        settings: backstop, grace period, window sizes.
        metrics: where outcomes are counted.
        on_dead: called for every dead letter (log, alert); must not raise.
        side_tasks: coroutine factories run beside the loop (heartbeat, reaper, ...).
        stop: set to stop the daemon (SIGTERM/SIGINT set it).
    """

    def __init__(
        self,
        *,
        room: MailRoom,
        listener: Listener,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        on_dead: Callable[[str, str], Coroutine[Any, Any, None]] | None = None,
        side_tasks: list[Callable[[], Awaitable[None]]] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.room = room
        self.listener = listener
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.on_dead = on_dead
        self.side_tasks = side_tasks or []
        self.stop = stop or asyncio.Event()
        self.healthy = True
        self.drains = 0
        self.daemon_id = f"{socket.gethostname()}:{os.getpid()}"
        self._alerts: set[asyncio.Task[None]] = set()
        self._errors = database_errors()

    async def run(self, *, once: bool = False) -> None:
        """Drain until stopped (or, with ``once``, until nothing is due).

        Args:
            once: drain until no reply is due, then return (cron and tests).
        """
        log.info("daemon_started", daemon=self.daemon_id, once=once)
        try:
            if once:
                await self._loop(once=True)
            else:
                async with asyncio.TaskGroup() as group:
                    loop = group.create_task(self._loop(once=False))
                    sides = [group.create_task(self._side(task)) for task in self.side_tasks]
                    await loop
                    for side in sides:
                        side.cancel()
        finally:
            await self._finish_alerts()
            log.info("daemon_stopped", daemon=self.daemon_id, drains=self.drains)

    async def _side(self, factory: Callable[[], Awaitable[None]]) -> None:
        await factory()

    async def _loop(self, *, once: bool) -> None:
        window = DeliveryWindow(
            self.room,
            size=self.settings.window_size,
            per_recipient=self.settings.per_recipient_in_flight,
        )
        try:
            await self._work(window, once=once)
        finally:
            if window.in_flight:
                log.info("draining_before_stop", in_flight=window.in_flight)
            try:
                self._after(await window.close(grace_s=self.settings.shutdown_grace_s))
            except self._errors as exc:
                log.warning("stop_with_database_away", error=type(exc).__name__)

    async def _work(self, window: DeliveryWindow, *, once: bool) -> None:
        backoff = Backoff()
        woken = True
        while not self.stop.is_set():
            try:
                if woken:
                    await self._observe_wake_latency()
                    woken = False
                more = await window.fill()
                self._after(await window.collect())
                due = None if more else await self.room.next_wake_at()
            except self._errors as exc:
                self.healthy = False
                self.metrics.up.set(0)
                wait = backoff.next()
                log.warning("database_unavailable", error=type(exc).__name__, retry_in_s=wait)
                await sleep_unless_stopped(self.stop, wait)
                continue
            self.healthy = True
            self.metrics.up.set(1)
            backoff.reset()
            if more:
                if window.full:
                    await self._wait(window, self.settings.backstop_s, listen=False)
                continue
            now = self.clock.now()
            if due is not None and due > now:
                wait_s = min(self.settings.backstop_s, (due - now).total_seconds())
            elif window.in_flight:
                # What is due is in flight (or its recipient is busy): wait for a post.
                wait_s = self.settings.backstop_s
            elif due is not None:
                # Due but not claimable: leased by another daemon. Look again shortly.
                wait_s = IDLE_RECHECK_S
            elif once:
                return
            else:
                wait_s = self.settings.backstop_s
            if once and not window.in_flight and (due is None or due > now):
                return
            woken = await self._wait(window, wait_s, listen=not once)

    async def _observe_wake_latency(self) -> None:
        due = await self.room.next_wake_at()
        now = self.clock.now()
        if due is not None and due <= now:
            self.metrics.wake_latency.observe((now - due).total_seconds())

    async def _wait(self, window: DeliveryWindow, wait_s: float, *, listen: bool) -> bool:
        """Wait for a post to finish, a wake, the stop, or ``wait_s``; True after a wake."""
        others: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.stop.wait())]
        wake: asyncio.Future[bool] | None = None
        if listen:
            wake = asyncio.ensure_future(self.listener.wait(wait_s))
            others.append(wake)
        try:
            await window.wait(*others, timeout_s=wait_s)
        finally:
            for task in others:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, *self._errors):
                        await task
        if wake is not None and wake.done() and not wake.cancelled():
            error = wake.exception()
            if error is not None:
                log.warning("listener_error", error=type(error).__name__)
                return True
            return bool(wake.result()) or not window.in_flight
        return False

    def _after(self, report: DrainReport) -> None:
        self.metrics.record(report)
        if report.claimed:
            self.drains += 1
            log.debug("outcomes_stored", **report.counts())
            if report.retried or report.deferred:
                log.info(
                    "replies_retrying", retried=len(report.retried), deferred=len(report.deferred)
                )
        for key, reason in report.dead:
            log.error("reply_dead", key=key, reason=reason.value)
            if self.on_dead is not None:
                task: asyncio.Task[None] = asyncio.create_task(self.on_dead(key, reason.value))
                self._alerts.add(task)
                task.add_done_callback(self._alerts.discard)

    async def _finish_alerts(self) -> None:
        if self._alerts:
            await asyncio.wait(self._alerts, timeout=self.settings.shutdown_grace_s)
