"""The resident drain daemon: sleep until the earliest wake, drain page after page.

The loop waits on the first of three things: a ``NOTIFY birddog_wake`` (a hint, so it
always re-queries), the earliest due time in the outbox, and a backstop timer. Side
tasks (heartbeat and backlog gauges, the job reaper, the metrics server) run in one
``TaskGroup``: if one dies, the daemon stops loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from birddog.core.errors import StoreUnavailable
from birddog.mailroom import DrainReport, MailRoom
from birddog.metrics import Metrics, start_server
from birddog.settings import Settings

log = structlog.get_logger("birddog.daemon")

DATABASE_ERRORS: tuple[type[BaseException], ...] = (StoreUnavailable, OSError)
"""Errors that mean "the database is away": the daemon backs off and tries again."""


def database_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean the database is away for now, not that BirdDog is wrong."""
    import asyncpg  # noqa: PLC0415 - the app layer may know the driver

    return (
        *DATABASE_ERRORS,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        asyncpg.CannotConnectNowError,
        asyncpg.AdminShutdownError,
        asyncpg.ConnectionDoesNotExistError,
        ConnectionError,
    )


class Listener(Protocol):
    """Reports wakes: ``wait`` is True on a notification or after a reconnect."""

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a wake."""
        ...


class Reporter(Protocol):
    """Side effects of a drain report: alerts for dead letters."""

    async def dead_letter(self, key: str, reason: str) -> None:
        """Raise the alarm for a dead letter."""
        ...


class Backoff:
    """Exponential backoff from 0.1 s to ``cap_s``, reset on success."""

    def __init__(self, cap_s: float = 5.0) -> None:
        self.cap_s = cap_s
        self.current = 0.0

    def next(self) -> float:
        """The next wait."""
        self.current = min(self.cap_s, max(0.1, self.current * 2))
        return self.current

    def reset(self) -> None:
        """Forget past failures."""
        self.current = 0.0


class DrainDaemon:
    """Runs the mail room's drain until stopped.

    Args:
        room: the mail room over the Postgres outbox and the HTTP transport.
        listener: reports wakes (``LISTEN birddog_wake`` on a dedicated connection).
        settings: backstop, grace period, metrics port.
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
        settings: Settings,
        metrics: Metrics,
        on_dead: Callable[[str, str], Coroutine[Any, Any, None]] | None = None,
        side_tasks: list[Callable[[], Awaitable[None]]] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.room = room
        self.listener = listener
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
        runner = None
        if not once and self.settings.metrics_port:
            runner = await start_server(
                self.metrics,
                host=self.settings.metrics_host,
                port=self.settings.metrics_port,
                healthy=lambda: self.healthy,
            )
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
            if runner is not None:
                await runner.cleanup()
            log.info("daemon_stopped", daemon=self.daemon_id, drains=self.drains)

    async def _side(self, factory: Callable[[], Awaitable[None]]) -> None:
        await factory()

    async def _loop(self, *, once: bool) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                report = await self._drain()
                if report is None:
                    return
                self.healthy = True
                backoff.reset()
                if report.more:
                    continue
                due = await self.room.next_wake_at()
            except self._errors as exc:
                self.healthy = False
                self.metrics.up.set(0)
                wait = backoff.next()
                log.warning("database_unavailable", error=type(exc).__name__, retry_in_s=wait)
                await self._sleep(wait)
                continue
            self.metrics.up.set(1)
            now = datetime.now(UTC)
            if once:
                if due is None or due > now:
                    return
                continue
            timeout = self.settings.backstop_s
            if due is not None:
                timeout = min(timeout, max(0.0, (due - now).total_seconds()))
            if timeout > 0:
                await self._wait_for_wake(timeout)

    async def _drain(self) -> DrainReport | None:
        """One drain; on stop, give in-flight posts the grace period, then cancel them."""
        due = await self.room.next_wake_at()
        now = datetime.now(UTC)
        if due is not None and due <= now:
            self.metrics.wake_latency.observe((now - due).total_seconds())
        drain = asyncio.ensure_future(self.room.drain_outbox())
        stopped = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({drain, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not drain.done():
            log.info("draining_before_stop", grace_s=self.settings.shutdown_grace_s)
            try:
                await asyncio.wait_for(asyncio.shield(drain), self.settings.shutdown_grace_s)
            except TimeoutError:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drain
                log.warning("in_flight_posts_cancelled")
                return None
        report = drain.result()
        self.drains += 1
        self._after(report)
        return report

    def _after(self, report: DrainReport) -> None:
        self.metrics.record(report)
        if report.claimed:
            log.info("page_drained", **report.counts(), more=report.more)
        for key, reason in report.dead:
            log.error("reply_dead", key=key, reason=reason.value)
            if self.on_dead is not None:
                task: asyncio.Task[None] = asyncio.create_task(self.on_dead(key, reason.value))
                self._alerts.add(task)
                task.add_done_callback(self._alerts.discard)

    async def _wait_for_wake(self, wait_s: float) -> None:
        wake = asyncio.ensure_future(self.listener.wait(wait_s))
        stopped = asyncio.ensure_future(self.stop.wait())
        done, pending = await asyncio.wait({wake, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *self._errors):
                await task
        if wake in done and wake.exception() is not None:
            log.warning("listener_error", error=type(wake.exception()).__name__)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    async def _finish_alerts(self) -> None:
        if self._alerts:
            await asyncio.wait(self._alerts, timeout=self.settings.shutdown_grace_s)


async def every(
    seconds: float, action: Callable[[], Awaitable[Any]], *, stop: asyncio.Event, name: str
) -> None:
    """Run ``action`` every ``seconds`` until ``stop``; a failing action is logged, not fatal.

    Database errors are expected while the database restarts; anything else is a bug and
    propagates, stopping the daemon loudly.
    """
    errors = database_errors()
    while not stop.is_set():
        try:
            await action()
        except errors as exc:
            log.warning("side_task_database_error", task=name, error=type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
