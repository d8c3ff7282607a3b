"""The resident drain daemon: the drain engine, run continuously, and what it needs around it.

The engine (:mod:`birddog.engine`) claims in due order, keeps posts in flight and stores
outcomes; it sleeps on the wake table until the earliest claimable row, an armed wake, a
``NOTIFY birddog_wake`` (a hint, so it always re-queries) or the backstop timer. Around
it the daemon backs off while the database is away, counts outcomes, logs and alerts dead
letters. The process around it (:mod:`birddog.processes.daemon`) runs the side tasks
(heartbeat, gauges, reapers) and the metrics server beside it, reading
:attr:`DrainDaemon.healthy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections import Counter
from collections.abc import Callable

import structlog

from birddog.core.delivery import OutboxRow, UndecodableRow
from birddog.engine import DeliveryEngine, DrainReport
from birddog.metrics import Metrics
from birddog.ports import Clock, Listener
from birddog.runtime import Backoff, cause_name, database_errors, sleep_unless_stopped
from birddog.service.mailroom import MailRoom
from birddog.settings import Settings

log = structlog.get_logger("birddog.daemon")

PROGRESS_EVERY_S = 1.0
"""The daemon logs what its deliveries did (``replies_moved``) at most this often."""

PROGRESS_FIELDS = ("delivered", "retried", "deferred", "dead")
"""The counts a ``replies_moved`` line carries (never a key, never content)."""


class DrainDaemon:
    """Runs the mail room's drain until stopped.

    Args:
        room: the mail room over the Postgres outbox and the HTTP transport.
        listener: reports wakes (``LISTEN birddog_wake`` on a dedicated connection).
        clock: the current time (due times are compared with it).
        settings: backstop, grace period.
        metrics: where outcomes are counted.
        on_dead: told every dead letter (the row, or the undecodable row), to alert; it
            must return at once and never raise (an :class:`~birddog.http.AlertCoalescer`).
        stop: set to stop the daemon (SIGTERM/SIGINT set it).

    Attributes:
        moved: what its stores did since it started, by outcome (``delivered``,
            ``retried``, ``deferred``, ``dead``, ``skipped``).
    """

    def __init__(
        self,
        *,
        room: MailRoom,
        listener: Listener,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        on_dead: Callable[[OutboxRow | UndecodableRow], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.room = room
        self.listener = listener
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.on_dead = on_dead
        self.stop = stop or asyncio.Event()
        self.healthy = True
        self.drains = 0
        self.daemon_id = f"{socket.gethostname()}:{os.getpid()}"
        self._errors = database_errors()
        self._backoff = Backoff()
        self.moved: Counter[str] = Counter()
        self._progress = Progress(every_s=PROGRESS_EVERY_S)

    async def run(self, *, once: bool = False) -> None:
        """Drain until stopped (or, with ``once``, until nothing is due).

        Args:
            once: drain until no reply is due, then return (cron and tests).
        """
        log.info("daemon_started", daemon=self.daemon_id, once=once)
        try:
            await self._loop(once=once)
        finally:
            self._progress.flush()
            log.info("daemon_stopped", daemon=self.daemon_id, drains=self.drains)

    async def _loop(self, *, once: bool) -> None:
        engine = self.room.engine()
        engine.on_wake_latency = self.metrics.wake_latency.observe
        try:
            await self._work(engine, once=once)
        finally:
            if engine.in_flight:
                log.info("draining_before_stop", in_flight=engine.in_flight)
            try:
                self._after(await engine.close(grace_s=self.settings.shutdown_grace_s))
            except self._errors as exc:
                log.warning("stop_with_database_away", error=type(exc).__name__)

    async def _work(self, engine: DeliveryEngine, *, once: bool) -> None:
        while not self.stop.is_set():
            try:
                await engine.serve(
                    stop=self.stop,
                    listener=None if once else self.listener,
                    backstop_s=self.settings.backstop_s,
                    on_report=self._after,
                    once=once,
                )
            except self._errors as exc:
                self.healthy = False
                self.metrics.up.set(0)
                wait = self._backoff.next()
                # The database is away, or refused a statement (a deadlock, a timeout, a
                # revoked privilege, a trigger): the daemon stays up, unhealthy, and tries
                # again. It never exits on what the database says about its rows.
                log.warning(
                    "database_unavailable", error=cause_name(exc), reason=str(exc), retry_in_s=wait
                )
                await sleep_unless_stopped(self.stop, wait)
                continue
            if once:
                return

    def _after(self, report: DrainReport) -> None:
        # Called after every store of outcomes: the database answered.
        if not self.healthy or self._backoff.current:
            self.healthy = True
            self._backoff.reset()
        self.metrics.up.set(1)
        if not (report.claimed or report.skipped):
            return
        self.metrics.record(report)
        if report.claimed:
            self.drains += 1
            counts = report.counts()
            log.debug("outcomes_stored", **counts)
            self.moved.update(counts)
            self._progress.add(counts)
        for (key, reason), row in zip(report.dead, report.dead_rows, strict=True):
            log.error("reply_dead", key=key, reason=reason.value)
            if self.on_dead is not None:
                self.on_dead(row)


class Progress:
    """One info line, ``replies_moved``, per store of outcomes or per ``every_s`` at most.

    A terminal running the daemon shows mail moving (counts only: delivered, retried,
    deferred, dead) without a line per reply: counts that arrive within ``every_s`` of the
    last line are added up and logged together once that time has passed.

    Args:
        every_s: the shortest time between two lines.
    """

    def __init__(self, *, every_s: float) -> None:
        self.every_s = every_s
        self._unlogged: Counter[str] = Counter()
        self._next_at = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def add(self, counts: Counter[str]) -> None:
        """Count what one store did; log it now, or when ``every_s`` has passed."""
        self._unlogged.update({name: counts[name] for name in PROGRESS_FIELDS})
        if not +self._unlogged or self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait_s = self._next_at - loop.time()
        if wait_s <= 0:
            self.flush()
        else:
            self._timer = loop.call_later(wait_s, self.flush)

    def flush(self) -> None:
        """Log what is counted and not yet logged, if anything."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if +self._unlogged:
            log.info("replies_moved", **{name: self._unlogged[name] for name in PROGRESS_FIELDS})
            self._unlogged.clear()
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to pace
            self._next_at = asyncio.get_running_loop().time() + self.every_s
