"""The composition root: the one place that names concrete adapters, for every process.

It wires and never runs: no loop, no signal, no output. Running a process lives in
:mod:`birddog.processes` (one module per process).

- :func:`open_stack` opens the adapters over one database (pool, outbox, wake, routes,
  job store, reports, HTTP transport, mail room); every command, process, the probe and
  the demo take theirs from it. :func:`open_demo_stack` does so over a database of the
  demo's own.
- ``build_*`` wire what one process runs over an open stack: :func:`build_daemon`,
  :func:`build_worker`, :func:`build_console`, and the listeners, alerts and daemon row
  around them.
- :func:`open_spool` is the local spool of the settings (no database needed);
  :func:`open_sender` wires the library's :class:`~birddog.Sender` over a pool.
- :func:`migrate_schema` upgrades the schema of the configured database.
- Where the database is (:func:`database`, :func:`running_database`,
  :func:`psql_session`) is the Postgres adapter's to say (:mod:`birddog.postgres.locate`),
  and so is the server's reason for a refused statement (:func:`refusal_reason`); they
  are named here so the commands need not know the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from birddog.asking import Asking
from birddog.clock import SystemClock
from birddog.core.errors import StoreUnavailable
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, Job
from birddog.ports import Clock, Listener, TokenBook
from birddog.postgres.admin import PostgresAdmin
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.asks import PostgresAsks
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.jobs import JOBS_CHANNEL, PostgresJobs, enqueue_accepted_job
from birddog.postgres.locate import (
    Announce,
    StoppedBeforeStart,
    data_location,
    database,
    psql_session,
    running_database,
    wait_for_database,
)
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.notices import PostgresNotices
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import (
    Pool,
    check_connection,
    check_schema,
    create_pool,
    refusal_reason,
)
from birddog.postgres.reports import PostgresReports
from birddog.postgres.retention import PostgresRetention
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.scratch import create_demo_database, drop_demo_database
from birddog.postgres.wake import PostgresWake, WakeListener
from birddog.replaying import CheckedReplay
from birddog.runtime import every, stop_task
from birddog.sending import Sender
from birddog.settings import Settings
from birddog.spool import SqliteSpool

if TYPE_CHECKING:
    from aiohttp import web

    from birddog.a2a.server import A2AServices
    from birddog.console import Sessions
    from birddog.daemon import DrainDaemon
    from birddog.http.alerts import AlertCoalescer
    from birddog.http.transport import HttpTransport
    from birddog.mailroom import MailRoom
    from birddog.mcp.tools import Desk
    from birddog.metrics import Metrics, WorkerMetrics
    from birddog.postgres.embedded import EmbeddedPostgres
    from birddog.worker import Handler, Worker

__all__ = [
    "CLOCK",
    "HEARTBEAT_S",
    "Announce",
    "Stack",
    "StoppedBeforeStart",
    "a2a_services",
    "build_alerts",
    "build_console",
    "build_daemon",
    "build_daemon_row",
    "build_jobs_listener",
    "build_wake_listener",
    "build_worker",
    "database",
    "migrate_schema",
    "open_demo_stack",
    "open_sender",
    "open_spool",
    "open_stack",
    "psql_session",
    "refusal_reason",
    "running_database",
    "token_book",
]

HEARTBEAT_S = 10.0
"""How often daemons and workers record themselves as alive (``birddog status``)."""

CLOCK: Clock = SystemClock()
"""The wall clock every adapter and command of this process reads."""


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
        replay: replays dead letters once their cause is fixed (CLI and console).
        wake: the Postgres wake scheduler.
        routes: the route book.
        mailbox: the reading side of mailbox routes (its waits share ``notices``).
        notices: the process's one LISTEN connection (mailbox and job notifications).
        asks: the ask store (checks and writes a send's or an ask's mail).
        asking: sends and asks, waiting in the mailbox.
        spool: the local spool (mail accepted while the database was unreachable).
        sender: sends and asks, spooling what the database cannot take now; forwards
            the spool.
        jobs: the job store.
        reports: the operator's reports (status, check).
        retention: deletes what the retention settings no longer keep.
        admin: the operator's pages (console, jobs, show).
        agents: the agents and their bearer tokens (``birddog agent``, HTTP endpoints).
        embedded: the embedded server, when no ``DATABASE_URL`` was given.

    The delivering side (:attr:`transport`, :attr:`room`, :attr:`metrics`) is built on
    first use: a command that only sends, asks or reads never loads the HTTP client.
    """

    settings: Settings
    dsn: str
    listen_dsn: str
    pool: Pool
    clock: Clock
    outbox: PostgresOutbox
    replay: CheckedReplay
    wake: PostgresWake
    routes: PostgresRoutes
    mailbox: PostgresMailbox
    notices: PostgresNotices
    asks: PostgresAsks
    asking: Asking
    spool: SqliteSpool
    sender: Sender
    jobs: PostgresJobs
    reports: PostgresReports
    retention: PostgresRetention
    admin: PostgresAdmin
    agents: PostgresAgents
    embedded: EmbeddedPostgres | None = None
    _metrics: Metrics | None = field(default=None, init=False, repr=False)
    _transport: HttpTransport | None = field(default=None, init=False, repr=False)
    _room: MailRoom | None = field(default=None, init=False, repr=False)

    @property
    def metrics(self) -> Metrics:
        """The daemon's metrics."""
        if self._metrics is None:
            from birddog.metrics import Metrics  # noqa: PLC0415 - delivering processes only

            self._metrics = Metrics()
        return self._metrics

    @property
    def transport(self) -> HttpTransport:
        """The HTTP transport (posts to inbox URLs, A2A push, mailboxes)."""
        if self._transport is None:
            self._transport = _http_transport(self.settings, self.routes, self.clock)
        return self._transport

    @property
    def room(self) -> MailRoom:
        """The mail room: the drain and its wakes, over the outbox and the transport."""
        if self._room is None:
            from birddog.mailroom import MailRoom  # noqa: PLC0415 - delivering processes only
            from birddog.metrics import TimedTransport  # noqa: PLC0415

            settings = self.settings
            self._room = MailRoom(
                outbox=self.outbox,
                transport=TimedTransport(self.transport, self.metrics.post_seconds),
                wake=self.wake,
                clock=self.clock,
                # HttpTransport cancels its own request at post_timeout_s; a second timer
                # per post would only cost time.
                post_timeout_s=None,
                max_content_bytes=settings.max_content_bytes,
                config=settings.engine_config(),
            )
        return self._room

    async def close_transport(self) -> None:
        """Close the HTTP transport, if it was ever opened."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()

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

    def data_location(self) -> str:
        """Which database the stack uses, for people.

        Returns:
            E.g. ``embedded PostgreSQL in ./.birddog`` or ``database "mail" on db:5432 as
            "bird"``.
        """
        return data_location(self.settings)


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
    from birddog.postgres.schema import migrate  # noqa: PLC0415 - Alembic only to migrate

    await migrate(dsn, roles=roles)


@contextlib.asynccontextmanager
async def open_stack(
    settings: Settings,
    *,
    migrate_first: bool = False,
    announce: Announce | None = None,
    pool_size: int = 10,
    wait_until: asyncio.Event | None = None,
    lazy: bool = False,
) -> AsyncIterator[Stack]:
    """Open every adapter over one database and close them all on exit.

    Args:
        settings: the settings.
        migrate_first: upgrade the schema before opening (always done for embedded).
        announce: told the embedded server's DSN.
        pool_size: the pool's maximum size.
        wait_until: for daemons: wait for an unreachable database until this event is
            set (then raise :class:`StoppedBeforeStart`) instead of failing at once.
        lazy: open no connection yet (for senders): an unreachable database is then
            found by the first call, which the sender can spool instead.

    Yields:
        The wired stack.

    Raises:
        SchemaMissing: the database was never migrated (and ``migrate_first`` is not
            set): the message says to run ``birddog migrate``.
    """
    dsn, embedded = await database(settings, announce=announce)
    if wait_until is not None:
        await wait_for_database(dsn, stop=wait_until)
    if migrate_first or embedded is not None:
        from birddog.postgres.schema import migrate  # noqa: PLC0415 - Alembic only to migrate

        await migrate(dsn)
    pool = await create_pool(
        dsn, min_size=0 if lazy else 1, max_size=pool_size, pgbouncer=settings.pgbouncer
    )
    if not migrate_first and embedded is None:
        try:
            await check_schema(pool)  # "run `birddog migrate`", before anything is said
        except StoreUnavailable:
            # A sender's database may be away: its mail is spooled, and the schema is
            # checked again when the spool is forwarded.
            if not lazy:
                await pool.close()
                raise
        except BaseException:
            await pool.close()
            raise
    clock = CLOCK
    egress = settings.egress_policy()
    routes = PostgresRoutes(
        pool, clock=clock, egress=egress, box=settings.secret_box(), lease_s=settings.lease_s
    )
    outbox = PostgresOutbox(pool)
    wake = PostgresWake(pool)
    jobs = PostgresJobs(
        pool,
        max_content_bytes=settings.max_content_bytes,
        max_queued_s=settings.job_max_queued_s,
        queue_concurrency=settings.queue_concurrency,
        clock=clock,
        kill_grace_s=settings.kill_grace_s,
    )
    notices = PostgresNotices(settings.listen_url or dsn)
    mailbox, asks, asking = _asking(
        pool, notices, clock=clock, max_content_bytes=settings.max_content_bytes
    )
    spool = open_spool(settings)
    stack: Stack | None = None
    try:
        stack = Stack(
            settings=settings,
            dsn=dsn,
            listen_dsn=settings.listen_url or dsn,
            pool=pool,
            clock=clock,
            outbox=outbox,
            replay=CheckedReplay(outbox, routes, egress),
            wake=wake,
            routes=routes,
            mailbox=mailbox,
            notices=notices,
            asks=asks,
            asking=asking,
            spool=spool,
            sender=Sender(asking=asking, spool=spool, describe=_refused_or_said),
            jobs=jobs,
            reports=PostgresReports(pool),
            retention=PostgresRetention(pool, clock=clock),
            admin=PostgresAdmin(pool, heartbeat_s=HEARTBEAT_S),
            agents=PostgresAgents(pool),
            embedded=embedded,
        )
        yield stack
    finally:
        await mailbox.close()
        await notices.close()
        if stack is not None:
            await stack.close_transport()
        await pool.close()


def _http_transport(settings: Settings, routes: PostgresRoutes, clock: Clock) -> HttpTransport:
    """The HTTP transport of the settings (aiohttp is imported here, by delivering processes)."""
    from birddog.http.transport import HttpTransport  # noqa: PLC0415

    return HttpTransport(
        routes,
        egress=routes.egress,
        proxy=settings.http_proxy,
        timeout_s=settings.post_timeout_s,
        # A route's own post timeout never outlasts the claim's lease, as the default may
        # not (route add refuses one as long; this daemon's lease may be shorter).
        max_timeout_s=settings.lease_s,
        max_body_bytes=settings.max_body_bytes,
        max_deferral_s=settings.max_deferral_s,
        clock=clock,
        push_body=_a2a_push_body,
    )


def _a2a_push_body(stored: bytes) -> bytes:
    """An A2A push's body (the a2a extra's), imported only once a push is delivered.

    Raises:
        ValueError: the a2a extra is not installed (the reply is then unsendable).
    """
    try:
        from birddog.a2a.push import push_body  # noqa: PLC0415 - the a2a extra, lazily
    except ModuleNotFoundError:
        raise ValueError("an A2A push needs the a2a extra (pip install 'birddog[a2a]')") from None
    return push_body(stored)


@contextlib.asynccontextmanager
async def open_asking(
    pool: Pool,
    listen_dsn: str | None,
    *,
    poll_s: float = 2.0,
    clock: Clock | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
) -> AsyncIterator[Asking]:
    """Sends and asks over ``pool``, their waits sharing one LISTEN on ``listen_dsn``.

    Args:
        pool: an asyncpg pool on the BirdDog database (any size: a waiting ask holds no
            connection).
        listen_dsn: the database for the one listening connection (a direct one, not
            PgBouncer's); None: waits poll only.
        poll_s: while waiting, look again at least this often, notification or not.
        clock: the time source (default: the system clock).
        max_content_bytes: the largest question allowed.

    Yields:
        The asking, for the life of the block; its listener closes with it.
    """
    notices = PostgresNotices(listen_dsn)
    mailbox, _asks, asking = _asking(
        pool, notices, clock=clock or CLOCK, max_content_bytes=max_content_bytes, poll_s=poll_s
    )
    try:
        yield asking
    finally:
        await mailbox.close()
        await notices.close()


@contextlib.asynccontextmanager
async def open_sender(
    pool: Pool,
    listen_dsn: str | None,
    *,
    spool_path: str | Path | None = None,
    spool_max_bytes: int | None = None,
    spool_max_age_s: float | None = None,
    forward_every_s: float | None = None,
    poll_s: float = 2.0,
    clock: Clock | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
) -> AsyncIterator[Sender]:
    """A :class:`~birddog.Sender` over ``pool``, spooling to the local spool when need be.

    Args:
        pool: an asyncpg pool on the BirdDog database; make it with ``min_size=0`` so it
            opens even while the database is away.
        listen_dsn: the database for the one listening connection; None: waits poll only.
        spool_path: the spool file (default: ``BIRDDOG_SPOOL_PATH``, else the default
            location, as the command line uses).
        spool_max_bytes: the spool's bound (default ``BIRDDOG_SPOOL_MAX_BYTES``).
        spool_max_age_s: spooled mail older than this is quarantined (default
            ``BIRDDOG_SPOOL_MAX_AGE_S``).
        forward_every_s: while open, forward waiting mail this often (default
            ``BIRDDOG_SPOOL_FORWARD_S``); 0: only when a send or a wait needs it.
        poll_s: while waiting, look again at least this often.
        clock: the time source (default: the system clock).
        max_content_bytes: the largest content allowed.

    Yields:
        The sender, for the life of the block.
    """
    settings = Settings()
    clock = clock or CLOCK
    spool = SqliteSpool(
        Path(spool_path) if spool_path is not None else settings.spool_location(),
        clock=clock,
        max_bytes=settings.spool_max_bytes if spool_max_bytes is None else spool_max_bytes,
        max_age_s=settings.spool_max_age_s if spool_max_age_s is None else spool_max_age_s,
    )
    every_s = settings.spool_forward_s if forward_every_s is None else forward_every_s
    async with open_asking(
        pool, listen_dsn, poll_s=poll_s, clock=clock, max_content_bytes=max_content_bytes
    ) as asking:
        sender = Sender(asking=asking, spool=spool, describe=_refused_or_said, poll_s=poll_s)
        stop = asyncio.Event()
        forwarding = (
            asyncio.create_task(
                every(every_s, sender.forward_waiting, stop=stop, name="spool_forward"),
                name="birddog-spool-forward",
            )
            if every_s > 0
            else None
        )
        try:
            yield sender
        finally:
            stop.set()
            await stop_task(forwarding)


def open_spool(settings: Settings) -> SqliteSpool:
    """The local spool the settings name (``BIRDDOG_SPOOL_*``); opening it touches no file.

    Args:
        settings: where the spool is and its bounds.

    Returns:
        The spool.
    """
    return SqliteSpool(
        settings.spool_location(),
        clock=CLOCK,
        max_bytes=settings.spool_max_bytes,
        max_age_s=settings.spool_max_age_s,
    )


def _refused_or_said(exc: BaseException) -> str:
    """Why a spooled mail was refused: the server's own words for a refused statement."""
    reason = refusal_reason(exc)
    return f"the database refused it: {reason}" if reason is not None else str(exc)


def _asking(
    pool: Pool,
    notices: PostgresNotices,
    *,
    clock: Clock,
    max_content_bytes: int,
    poll_s: float = 2.0,
) -> tuple[PostgresMailbox, PostgresAsks, Asking]:
    """The mailbox (its waits on ``notices``), the ask store, and the asking over both."""
    mailbox = PostgresMailbox(pool, poll_s=poll_s, clock=clock, notices=notices)
    asks = PostgresAsks(pool)
    asking = Asking(asks=asks, answers=mailbox, clock=clock, max_content_bytes=max_content_bytes)
    return mailbox, asks, asking


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


def build_wake_listener(
    stack: Stack, *, on_reconnect: Callable[[], None] | None = None
) -> WakeListener:
    """``LISTEN birddog_wake`` on a connection of its own (enter it to connect).

    Args:
        stack: the open adapters (``listen_dsn``).
        on_reconnect: told each time the connection is open again (the database is back).

    Returns:
        The listener, not yet connected.
    """
    return WakeListener(stack.listen_dsn, on_reconnect=on_reconnect)


def build_alerts(stack: Stack) -> AlertCoalescer | None:
    """Dead-letter alerts, gathered per recipient into signed posts, when an alert URL is set.

    Args:
        stack: the open adapters and their settings.

    Returns:
        The coalescer (``close()`` it when done), or None without ``BIRDDOG_ALERT_URL``.
    """
    settings = stack.settings
    if not settings.alert_url:
        return None
    from birddog.http.alerts import AlertCoalescer, AlertPoster  # noqa: PLC0415 - the daemon's

    return AlertCoalescer(
        AlertPoster(settings.alert_url, settings.alert_signing_secret(), clock=stack.clock),
        window_s=settings.alert_coalesce_s,
        clock=stack.clock,
        on_failure=stack.metrics.side_task_failed,
    )


def build_daemon_row(stack: Stack, *, kind: str) -> PostgresDaemons:
    """This process's row in ``birddog.daemons`` (``birddog status`` lists it).

    Args:
        stack: the open adapters.
        kind: ``drain`` or ``worker``.

    Returns:
        The row's keeper: ``seen()`` renews it, ``gone()`` removes it.
    """
    return PostgresDaemons(stack.pool, kind=kind)


def build_daemon(
    stack: Stack,
    *,
    listener: Listener,
    alerts: AlertCoalescer | None,
    stop: asyncio.Event,
) -> DrainDaemon:
    """Wire the drain daemon over ``stack``: the mail room, wakes, alerts for dead letters.

    Args:
        stack: the open adapters.
        listener: ``LISTEN birddog_wake`` on its own connection.
        alerts: gathers dead letters per recipient into signed alerts, when an alert URL
            is set.
        stop: set to stop the daemon.

    Returns:
        The daemon, ready to ``run``.
    """
    from birddog.daemon import DrainDaemon  # noqa: PLC0415 - the daemon's own

    return DrainDaemon(
        room=stack.room,
        listener=listener,
        clock=stack.clock,
        settings=stack.settings,
        metrics=stack.metrics,
        on_dead=alerts.dead_letter if alerts is not None else None,
        stop=stop,
    )


# ---- the job worker ------------------------------------------------------------------


def build_jobs_listener(
    stack: Stack, *, on_reconnect: Callable[[], None] | None = None
) -> WakeListener:
    """``LISTEN birddog_jobs`` on a connection of its own (enter it to connect).

    Args:
        stack: the open adapters (``listen_dsn``).
        on_reconnect: told each time the connection is open again (the database is back).

    Returns:
        The listener, not yet connected.
    """
    return WakeListener(stack.listen_dsn, channel=JOBS_CHANNEL, on_reconnect=on_reconnect)


def build_worker(
    stack: Stack,
    handler: Handler,
    *,
    listener: Listener,
    queues: Sequence[str] | None,
    stop: asyncio.Event,
    metrics: WorkerMetrics | None = None,
    agents: Sequence[str] | None = None,
) -> Worker:
    """Wire a job worker over ``stack``'s job store.

    Args:
        stack: the open adapters.
        handler: the user's async handler.
        listener: ``LISTEN birddog_jobs`` on its own connection.
        queues: these queues (session ids); with ``agents``, None or empty for all.
        stop: set to stop the worker.
        metrics: the worker's metrics (default: a registry of its own).
        agents: every session of these agents as well.

    Returns:
        The worker, ready to ``run``.
    """
    from birddog.worker import Worker  # noqa: PLC0415 - the worker's own

    settings = stack.settings
    return Worker(
        jobs=stack.jobs,
        handler=handler,
        listener=listener,
        queues=queues,
        agents=agents,
        concurrency=settings.worker_concurrency,
        handler_timeout_s=settings.handler_timeout_s,
        lease_s=settings.job_lease_s,
        shutdown_grace_s=settings.shutdown_grace_s,
        stop=stop,
        metrics=metrics,
    )


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
    from birddog.console import make_app  # noqa: PLC0415 - the console's own

    return make_app(
        admin=stack.admin,
        outbox=stack.replay,
        routes=stack.routes,
        jobs=stack.jobs,
        clock=stack.clock,
        sessions=sessions,
        read_only=read_only,
    )


# ---- the MCP server -----------------------------------------------------------------

MCP_POOL_SIZE = 10
"""The MCP server's pool: a waiting tool call holds none of its connections."""


def mcp_desk(stack: Stack) -> Desk:
    """The MCP tools over ``stack``'s adapters (one desk per server process).

    Args:
        stack: the open adapters.

    Returns:
        The desk; ``close()`` it when the server stops.
    """
    from birddog.mcp.tools import Desk, Services  # noqa: PLC0415 - the MCP server only

    return Desk(
        Services(
            asking=stack.asking,
            sender=stack.sender,
            mailbox=stack.mailbox,
            asks=stack.asks,
            jobs=stack.jobs,
            admin=stack.admin,
            routes=stack.routes,
            notices=stack.notices,
            lease_s=stack.settings.job_lease_s,
            max_content_bytes=stack.settings.max_content_bytes,
        )
    )


# ---- the HTTP endpoints' callers ---------------------------------------------------------


def token_book(stack: Stack) -> TokenBook:
    """Who each bearer token of the HTTP endpoints is (MCP over HTTP, A2A).

    Args:
        stack: the open adapters.

    Returns:
        The per-agent tokens of ``birddog agent add`` / ``birddog agent token``.
    """
    return stack.agents


# ---- the A2A endpoint -------------------------------------------------------------------

A2A_POOL_SIZE = 10
"""The A2A server's pool: a waiting ``SendMessage`` holds none of its connections."""


def a2a_services(stack: Stack, *, wait_s: float) -> A2AServices:
    """What ``birddog a2a`` calls, over ``stack``'s adapters.

    Args:
        stack: the open adapters.
        wait_s: how long a blocking ``SendMessage`` waits for a terminal state.

    Returns:
        The services of the A2A request handler.
    """
    from birddog.a2a.server import A2AServices  # noqa: PLC0415 - the A2A server only
    from birddog.postgres.tasks import PostgresSentJobs  # noqa: PLC0415

    return A2AServices(
        asking=stack.asking,
        sent=PostgresSentJobs(stack.pool),
        jobs=stack.jobs,
        routes=stack.routes,
        tokens=token_book(stack),
        wait_s=wait_s,
    )
