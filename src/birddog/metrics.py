"""Prometheus metrics (the daemon's and the worker's) and the /metrics and /healthz server."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from birddog.core.delivery import DeliveryResult, Failed, Parcel, as_result
from birddog.core.mail import Reply
from birddog.engine.outcomes import DrainReport
from birddog.http.server import serve
from birddog.ports import ParcelTransport, Transport


class Registry:
    """What every process's metrics share: a registry of their own, database up, side tasks.

    Attributes:
        registry: the Prometheus registry to expose.
        up: 1 while the database answers.
        side_task_errors: failures of each side task (it retries).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.up = Gauge("birddog_database_up", "1 while the database answers.", registry=r)
        self.side_task_errors = Counter(
            "birddog_side_task_errors",
            "Failures of a side task (reaper, heartbeat, gauges, alerts); it retries.",
            ["task"],
            registry=r,
        )

    def side_task_failed(self, task: str) -> None:
        """Count one failure of the side task ``task``."""
        self.side_task_errors.labels(task).inc()

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry)


class Metrics(Registry):
    """The daemon's metrics, in a registry of their own."""

    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.delivered = Counter("birddog_delivered", "Replies delivered.", registry=r)
        self.failed = Counter("birddog_failed", "Failed delivery attempts.", ["reason"], registry=r)
        self.deferred = Counter("birddog_deferred", "Deferrals (no strike).", registry=r)
        self.dead = Counter(
            "birddog_dead", "Replies that became dead letters.", ["reason"], registry=r
        )
        self.pending = Gauge("birddog_pending", "Replies awaiting delivery.", registry=r)
        self.oldest_pending_age = Gauge(
            "birddog_oldest_pending_age_seconds", "Age of the oldest pending reply.", registry=r
        )
        self.post_seconds = Histogram(
            "birddog_post_seconds",
            "Time to post one reply.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.wake_latency = Histogram(
            "birddog_wake_latency_seconds",
            "From a reply falling due to its drain starting.",
            buckets=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5, 30),
            registry=r,
        )
        self.drains = Counter("birddog_drains", "Drain passes.", registry=r)
        labels = ["kind", "how"]
        self.recent_turns = Gauge(
            "birddog_turns_last_hour",
            "Turns settled in the last hour by any process (workers, live sessions), by the "
            "kind of their first mail and how they ran (live, digest, worker).",
            labels,
            registry=r,
        )
        self.recent_turn_mails = Gauge(
            "birddog_turn_mails_last_hour",
            "Mails (jobs) of the turns settled in the last hour, by kind and how.",
            labels,
            registry=r,
        )
        self.recent_spawns = Gauge(
            "birddog_spawns_last_hour",
            "Agent processes started by the turns settled in the last hour, by kind and how.",
            labels,
            registry=r,
        )

    def record(self, report: DrainReport) -> None:
        """Count a drain's outcomes."""
        self.drains.inc()
        self.delivered.inc(len(report.delivered))
        self.deferred.inc(len(report.deferred))
        for key in report.retried:
            result = report.results.get(key)
            self.failed.labels(failure_kind(result)).inc()
        for _key, reason in report.dead:
            self.dead.labels(reason.value).inc()

    def observe_backlog(self, *, pending: int, oldest: datetime | None, now: datetime) -> None:
        """Set the pending gauges."""
        self.pending.set(pending)
        self.oldest_pending_age.set(_age_s(oldest, now))

    def observe_turns(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Set the last hour's turn gauges from the settled turns' groups (``turns_since``).

        Each row has ``kind``, ``how``, ``turns``, ``mails`` and ``spawns``; a group gone
        from the window is gone from the gauges.
        """
        gauges = (
            (self.recent_turns, "turns"),
            (self.recent_turn_mails, "mails"),
            (self.recent_spawns, "spawns"),
        )
        for gauge, _ in gauges:
            gauge.clear()
        for row in rows:
            for gauge, field in gauges:
                gauge.labels(row["kind"], row["how"]).set(row[field])


class WorkerMetrics(Registry):
    """A job worker's metrics, in a registry of their own (served on its own port).

    Attributes:
        healthy: False from a failed database call until the next one that succeeds.
    """

    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.claimed = Counter("birddog_jobs_claimed", "Jobs this worker claimed.", registry=r)
        self.settled = Counter(
            "birddog_jobs_settled", "Jobs this worker settled, by outcome.", ["outcome"], registry=r
        )
        self.requeued = Counter(
            "birddog_jobs_requeued",
            "Jobs this worker gave back to their queue (recovery budget left).",
            registry=r,
        )
        self.handler_seconds = Histogram(
            "birddog_handler_seconds",
            "Time one handler (or --command process) ran for one job.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900),
            registry=r,
        )
        self.queued = Gauge(
            "birddog_jobs_queued", "Jobs queued in the queues this worker serves.", registry=r
        )
        self.oldest_queued_age = Gauge(
            "birddog_oldest_queued_job_age_seconds",
            "Age of the oldest job queued in the queues this worker serves.",
            registry=r,
        )
        self.turns = Counter(
            "birddog_turns",
            "Turns this worker ran, by the kind of their first mail and how they ran "
            "(live: a worker --live; digest: informational mail once its digest was due; "
            "worker: any other).",
            ["kind", "how"],
            registry=r,
        )
        self.mails_per_turn = Histogram(
            "birddog_mails_per_turn",
            "How many mails (jobs) one turn took.",
            ["how"],
            buckets=(1, 2, 5, 10, 20, 50, 100),
            registry=r,
        )
        self.spawns = Counter(
            "birddog_spawns",
            "Agent processes started (one per turn of a --command agent), by the kind of "
            "the turn's first mail and how the turn ran.",
            ["kind", "how"],
            registry=r,
        )
        self.healthy = True

    def turn(self, *, mails: int, kind: str, how: str = "worker") -> None:
        """Count a turn of ``mails`` jobs whose first mail is of ``kind``."""
        self.turns.labels(kind, how).inc()
        self.mails_per_turn.labels(how).observe(mails)

    def spawn(self, *, kind: str, how: str = "worker") -> None:
        """Count an agent process started for a turn whose first mail is of ``kind``."""
        self.spawns.labels(kind, how).inc()

    def database(self, *, up: bool) -> None:
        """Record whether the database answered the last call (``/healthz``, the gauge)."""
        self.healthy = up
        self.up.set(1 if up else 0)

    def observe_queue(self, *, queued: int, oldest: datetime | None, now: datetime) -> None:
        """Set the queue gauges."""
        self.queued.set(queued)
        self.oldest_queued_age.set(_age_s(oldest, now))


def _age_s(oldest: datetime | None, now: datetime) -> float:
    """Seconds since ``oldest`` (0 when there is none, or it lies ahead of ``now``)."""
    return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0


def failure_kind(result: DeliveryResult | None) -> str:
    """A small, stable label for a failed attempt (never its text)."""
    if not isinstance(result, Failed):
        return "other"
    reason = result.reason
    if reason.startswith("HTTP 5"):
        return "http_5xx"
    if reason.startswith("HTTP 4"):
        return "http_4xx"
    if reason.startswith("HTTP"):
        return "http_2xx_not_accepted"
    if "no answer within" in reason or "imeout" in reason:
        return "timeout"
    if "onnect" in reason or "reset" in reason.lower():
        return "connection"
    if "not accept" in reason:
        return "not_accepted"
    return "other"


class TimedTransport:
    """A transport that times each post of another transport into a histogram."""

    def __init__(self, inner: Transport, histogram: Histogram) -> None:
        self.inner = inner
        self.histogram = histogram
        self._parcels = inner if isinstance(inner, ParcelTransport) else None

    async def post(self, reply: Reply) -> bool | DeliveryResult:
        """Post through the inner transport, timing it."""
        start = time.perf_counter()
        try:
            return await self.inner.post(reply)
        finally:
            self.histogram.observe(time.perf_counter() - start)

    async def post_parcels(self, parcels: Sequence[Parcel]) -> list[DeliveryResult]:
        """Post stored replies through the inner transport (one post), timing it.

        An inner transport without the fast path posts each reply on its own.
        """
        start = time.perf_counter()
        try:
            if self._parcels is not None:
                return await self._parcels.post_parcels(parcels)
            return [as_result(await self.inner.post(parcel.reply)) for parcel in parcels]
        finally:
            self.histogram.observe(time.perf_counter() - start)


async def start_server(
    metrics: Registry, *, host: str, port: int, healthy: Callable[[], bool]
) -> web.AppRunner:
    """Serve ``/metrics`` and ``/healthz`` on ``host:port``.

    Args:
        metrics: what to expose.
        host: the address to bind (127.0.0.1 by default in the settings).
        port: the port.
        healthy: returns whether the process is healthy (database reachable, loop alive).

    Returns:
        The running aiohttp runner; call ``cleanup()`` to stop it.
    """

    async def metrics_view(_request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.exposition(), headers={"content-type": CONTENT_TYPE_LATEST}
        )

    async def health_view(_request: web.Request) -> web.Response:
        ok = healthy()
        return web.json_response({"ok": ok}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", health_view)
    runner, _url = await serve(app, host=host, port=port)
    return runner
