"""What the CLI runs: the daemon, the worker, status, check and the probe."""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from aiohttp import web

from birddog.bootstrap import Stack, Stopped, open_stack
from birddog.core.delivery import OutboxRow, Receipt
from birddog.core.errors import BirdDogError
from birddog.core.jobs import AgentWork, agent_job
from birddog.core.mail import AgentAddress, Mail, Outcome, Reply
from birddog.daemon import DrainDaemon, every
from birddog.http.alerts import AlertPoster
from birddog.http.server import serve
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.jobs import enqueue_accepted_job
from birddog.postgres.sql import queries
from birddog.postgres.wake import WakeListener
from birddog.settings import Settings
from birddog.worker import Handler, Worker

log = structlog.get_logger("birddog.app")

HEARTBEAT_S = 10.0


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def run_daemon(
    settings: Settings,
    *,
    once: bool = False,
    migrate_first: bool = False,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Run the drain daemon until SIGTERM/SIGINT (or, with ``once``, until nothing is due)."""
    stop = stop_on_signals()
    try:
        await _daemon(settings, stop, once=once, migrate_first=migrate_first, announce=announce)
    except Stopped:
        log.info("daemon_stopped_before_start")


async def _daemon(
    settings: Settings,
    stop: asyncio.Event,
    *,
    once: bool,
    migrate_first: bool,
    announce: Callable[[str], None] | None,
) -> None:
    async with open_stack(
        settings, migrate_first=migrate_first, announce=announce, wait_until=stop
    ) as stack:
        alerts = (
            AlertPoster(settings.alert_url, settings.alert_secret) if settings.alert_url else None
        )
        daemons = PostgresDaemons(stack.pool, kind="drain")

        async def on_dead(key: str, _reason: str) -> None:
            if alerts is None:
                return
            row = await stack.outbox.get(key)
            if isinstance(row, OutboxRow):
                await alerts.alert(row)

        async def heartbeat() -> None:
            await daemons.seen()
            counts = await stack.outbox.counts()
            stack.metrics.observe_backlog(
                pending=int(counts.get("pending", 0)),
                oldest=counts.get("oldest_pending_at"),
                now=datetime.now(UTC),
            )

        async def reap() -> None:
            for job_id, what in await stack.jobs.recover_expired():
                log.warning("job_lease_expired", job_id=job_id, outcome=what)

        try:
            async with WakeListener(stack.dsn) as listener:
                daemon = DrainDaemon(
                    room=stack.room,
                    listener=listener,
                    settings=settings,
                    metrics=stack.metrics,
                    on_dead=on_dead,
                    side_tasks=[
                        lambda: every(HEARTBEAT_S, heartbeat, stop=stop, name="heartbeat"),
                        lambda: every(
                            max(1.0, settings.job_lease_s / 2), reap, stop=stop, name="reaper"
                        ),
                    ],
                    stop=stop,
                )
                await daemon.run(once=once)
        finally:
            if alerts is not None:
                await alerts.close()
            if not once:
                try:
                    await daemons.gone()
                except Exception as exc:
                    log.warning("daemon_row_left", error=type(exc).__name__)


async def run_worker(
    settings: Settings,
    handler: Handler,
    *,
    queues: list[str] | None = None,
    once: bool = False,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Run agent jobs with ``handler`` until SIGTERM/SIGINT (or, with ``once``, idle)."""
    stop = stop_on_signals()
    try:
        await _worker(settings, handler, stop, queues=queues, once=once, announce=announce)
    except Stopped:
        log.info("worker_stopped_before_start")


async def _worker(
    settings: Settings,
    handler: Handler,
    stop: asyncio.Event,
    *,
    queues: list[str] | None,
    once: bool,
    announce: Callable[[str], None] | None,
) -> None:
    async with open_stack(settings, announce=announce, wait_until=stop) as stack:
        daemons = PostgresDaemons(stack.pool, kind="worker")
        async with WakeListener(stack.dsn, channel="birddog_jobs") as listener:
            worker = Worker(
                jobs=stack.jobs,
                handler=handler,
                listener=listener,
                queues=queues,
                concurrency=settings.worker_concurrency,
                handler_timeout_s=settings.handler_timeout_s,
                lease_s=settings.job_lease_s,
                shutdown_grace_s=settings.shutdown_grace_s,
                stop=stop,
            )
            beat = asyncio.create_task(every(HEARTBEAT_S, daemons.seen, stop=stop, name="seen"))
            try:
                await worker.run(once=once)
            finally:
                stop.set()
                await beat


async def status_report(stack: Stack) -> dict[str, Any]:
    """Counts by state, oldest pending age, next wake, jobs, and daemons seen."""
    counts = await stack.outbox.counts()
    now = datetime.now(UTC)
    oldest = counts.get("oldest_pending_at")
    due = await stack.room.next_wake_at()
    daemons = await PostgresDaemons(stack.pool, kind="status").recent(within_s=3 * HEARTBEAT_S)
    return {
        **{k: v for k, v in counts.items() if k not in {"oldest_pending_at", "next_due_at"}},
        "oldest_pending_age_s": round((now - oldest).total_seconds(), 1) if oldest else None,
        "next_wake_in_s": round(max(0.0, (due - now).total_seconds()), 1) if due else None,
        "jobs": await stack.jobs.counts(),
        "daemons_seen": [f"{d['kind']} {d['host']}:{d['pid']}" for d in daemons],
    }


async def check_report(
    stack: Stack, *, pending_after: timedelta, dead_within: timedelta
) -> list[str]:
    """Problems worth an alert: replies pending too long, dead letters that are new."""
    stale = await stack.pool.fetch(queries["check_stale_pending"], pending_after.total_seconds(), 5)
    dead = await stack.pool.fetch(queries["check_new_dead"], dead_within.total_seconds(), 5)
    return [
        f"pending too long: {row['key']} to {row['recipient_agent_id']} since "
        f"{row['created_at']:%Y-%m-%d %H:%M:%S}Z, {row['attempts']} attempts, "
        f"last error: {row['last_error'] or '-'}"
        for row in stale
    ] + [
        f"new dead letter: {row['key']} to {row['recipient_agent_id']} "
        f"({row['dead_reason']}) at {row['dead_at']:%Y-%m-%d %H:%M:%S}Z"
        for row in dead
    ]


@dataclass(frozen=True)
class ProbeResult:
    """How a probe went.

    Attributes:
        ok: the reply came back with the nonce and became a receipt in time.
        message: one line for people.
        elapsed_s: how long the round trip took.
    """

    ok: bool
    message: str
    elapsed_s: float


async def run_probe(stack: Stack, *, timeout_s: float, drain: bool = False) -> ProbeResult:
    """Post a canary through the whole path and wait for its receipt.

    A probe inbox listens on 127.0.0.1; a route for a one-off probe agent points at it;
    a job with mail is enqueued, claimed and settled here (the probe is its own worker),
    and the drain daemon (or, with ``drain``, this process) must deliver the reply. The
    probe succeeds when the inbox got a correctly signed reply echoing the nonce and the
    reply's key holds a receipt, all before the deadline.
    """
    from birddog.inbox import Inbox  # noqa: PLC0415 - the recipient side, only here

    started = time.monotonic()
    nonce = secrets.token_hex(8)
    agent = f"birddog-probe-{nonce}"
    address = AgentAddress(agent_id=agent, session_id=f"probe-{nonce}")
    inbox = ProbeInbox()
    inbox_url = await inbox.start()
    key = f"probe:{nonce}"
    reply_key = f"outbox:{key}:reply:0"
    try:
        route = await stack.routes.add(agent, inbox_url)
        inbox.inbox = Inbox(route.secret or "")
        mail = Mail(
            key=key,
            to=address,
            from_=address,
            reply_to=[address],
            content=f"probe {nonce}",
            created_at=int(datetime.now(UTC).timestamp() * 1000),
        )
        job = agent_job(
            AgentWork(
                job_id=f"probe-{nonce}", session_id=address.session_id, command_fact_id=nonce
            ),
            mail,
        )
        async with stack.pool.acquire() as conn, conn.transaction():
            await enqueue_accepted_job(conn, job)
        claimed = await stack.jobs.claim(queues=[address.session_id], lease_s=timeout_s)
        if claimed is None:
            return _probe_fail(started, "the probe job could not be claimed")
        await stack.jobs.settle(
            job_id=job.job_id,
            claim_token=claimed.claim_token,
            outcome=Outcome.COMPLETED,
            content=f"echo {nonce}",
        )
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if drain:
                await stack.room.drain_outbox()
            if inbox.got.done() and isinstance(await stack.outbox.get(reply_key), Receipt):
                reply = inbox.got.result()
                if reply.content != f"echo {nonce}" or reply.in_reply_to != key:
                    return _probe_fail(started, "the probe reply did not echo the nonce")
                elapsed = time.monotonic() - started
                return ProbeResult(True, f"probe ok: round trip in {elapsed:.2f} s", elapsed)
            await asyncio.sleep(0.05)  # polling with a deadline, not synchronisation
        row = await stack.outbox.get(reply_key)
        state = "receipt" if isinstance(row, Receipt) else getattr(row, "state", "missing")
        # The canary is the probe's own: once the probe has failed loudly, a leftover
        # reply would only turn into a second, misleading dead letter later.
        await stack.pool.execute(queries["probe_discard"], reply_key)
        return _probe_fail(
            started,
            f"no round trip within {timeout_s:g} s (reply {state}; is `birddog run` running?)",
        )
    finally:
        await inbox.stop()
        try:
            await stack.routes.remove(agent)
        except Exception as exc:
            log.debug("probe_route_left", error=type(exc).__name__)


class ProbeInbox:
    """The probe's own inbox on 127.0.0.1: verifies the signature, keeps the first reply."""

    def __init__(self) -> None:
        from birddog.inbox import Inbox  # noqa: PLC0415

        self.inbox: Inbox | None = None
        self.got: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen on an ephemeral port of 127.0.0.1 and return the inbox URL."""
        app = web.Application()
        app.router.add_post("/probe", self._view)
        self._runner, url = await serve(app)
        return f"{url}/probe"

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _view(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.inbox is None:
            return web.json_response({"error": "not ready"}, status=503)
        try:
            received = self.inbox.receive(dict(request.headers), body)
        except BirdDogError:
            return web.json_response({"error": "refused"}, status=401)
        if not self.got.done():
            self.got.set_result(received.reply)
        return web.json_response({"accepted": True})


def _probe_fail(started: float, why: str) -> ProbeResult:
    return ProbeResult(False, f"probe FAILED: {why}", time.monotonic() - started)


__all__ = ["ProbeResult", "check_report", "open_stack", "run_daemon", "run_probe", "run_worker"]
