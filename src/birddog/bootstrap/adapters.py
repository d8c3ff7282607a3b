"""The adapters: every adapter over one database, opened and closed together.

:func:`open_adapters` (and :func:`open_demo_adapters`, over a database of the demo's own)
yield a :class:`Adapters`; :func:`migrate_schema` upgrades the configured database.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from birddog.core.errors import StoreUnavailable
from birddog.core.jobs import Job
from birddog.ports import Clock
from birddog.postgres.admin import PostgresAdmin
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.asks import PostgresAsks
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.live import PostgresLiveSessions
from birddog.postgres.locate import (
    Announce,
    data_location,
    database,
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
)
from birddog.postgres.reports import PostgresReports
from birddog.postgres.retention import PostgresRetention
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.scratch import create_demo_database, drop_demo_database
from birddog.postgres.wake import PostgresWake
from birddog.service.mail import MailService
from birddog.service.replaying import CheckedReplay
from birddog.settings import Settings
from birddog.sqlite import SqliteSpool

if TYPE_CHECKING:
    from birddog.http.transport import HttpTransport
    from birddog.metrics import Metrics
    from birddog.postgres.embedded import EmbeddedPostgres
    from birddog.service.mailroom import MailRoom

from birddog.bootstrap.clients import CLOCK, build_mail, open_spool

HEARTBEAT_S = 10.0
"""How often daemons and workers record themselves as alive (``birddog status``)."""


@dataclass
class Adapters:
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
        spool: the local spool (mail accepted while the database was unreachable).
        sender: the mail service: sends and asks, waiting in the mailbox, spooling what
            the database cannot take now; forwards the spool.
        jobs: the job store.
        reports: the operator's reports (status, check).
        retention: deletes what the retention settings no longer keep.
        admin: the operator's pages (console, jobs, show).
        agents: the agents and their bearer tokens (``birddog agent``, HTTP endpoints).
        live: the live sessions (MCP servers and ``worker --live`` announce theirs).
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
    spool: SqliteSpool
    sender: MailService
    jobs: PostgresJobs
    reports: PostgresReports
    retention: PostgresRetention
    admin: PostgresAdmin
    agents: PostgresAgents
    live: PostgresLiveSessions
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
            from birddog.metrics import TimedTransport  # noqa: PLC0415
            from birddog.service.mailroom import MailRoom  # noqa: PLC0415 - delivering processes only

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
        """Which database the adapters uses, for people.

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
async def open_adapters(
    settings: Settings,
    *,
    migrate_first: bool = False,
    announce: Announce | None = None,
    pool_size: int = 10,
    wait_until: asyncio.Event | None = None,
    lazy: bool = False,
) -> AsyncIterator[Adapters]:
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
        The wired adapters.

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
        pool,
        clock=clock,
        egress=egress,
        push_egress=settings.push_egress_policy(),
        box=settings.secret_box(),
        lease_s=settings.lease_s,
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
    mailbox = PostgresMailbox(pool, clock=clock, notices=notices)
    spool = open_spool(settings, dsn=dsn)
    sender = build_mail(
        pool, mailbox, clock=clock, max_content_bytes=settings.max_content_bytes, spool=spool
    )
    adapters: Adapters | None = None
    try:
        adapters = Adapters(
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
            asks=PostgresAsks(pool),
            spool=spool,
            sender=sender,
            jobs=jobs,
            reports=PostgresReports(pool),
            retention=PostgresRetention(pool, clock=clock),
            admin=PostgresAdmin(pool, heartbeat_s=HEARTBEAT_S),
            agents=PostgresAgents(pool),
            live=PostgresLiveSessions(pool),
            embedded=embedded,
        )
        yield adapters
    finally:
        await mailbox.close()
        await notices.close()
        if adapters is not None:
            await adapters.close_transport()
        await pool.close()


def _http_transport(settings: Settings, routes: PostgresRoutes, clock: Clock) -> HttpTransport:
    """The HTTP transport of the settings (aiohttp is imported here, by delivering processes)."""
    from birddog.http.transport import HttpTransport  # noqa: PLC0415

    return HttpTransport(
        routes,
        egress=routes.egress,
        push_egress=routes.push_egress,
        proxy=settings.http_proxy,
        timeout_s=settings.post_timeout_s,
        # A route's own post timeout never outlasts the claim's lease, as the default may
        # not (route add refuses one as long; this daemon's lease may be shorter).
        max_timeout_s=settings.lease_s,
        max_body_bytes=settings.max_body_bytes,
        max_deferral_s=settings.max_deferral_s,
        clock=clock,
        # A connection for every post the window may hold (fresh rows' included): below
        # that, posts queued inside aiohttp for a connection, first come first served,
        # behind the rows in flight, and their timeout ran while they waited.
        connector_limit=settings.window_size + settings.fresh_rows,
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
async def open_demo_adapters(settings: Settings) -> AsyncIterator[Adapters]:
    """Adapters over a database of the demo's own, beside the configured one, dropped after.

    Nothing the demo writes (routes, jobs, replies, a dead letter) reaches the user's
    database, and a daemon draining that database never sees the demo's replies.

    Args:
        settings: which server (``DATABASE_URL``'s, or the embedded one) and the demo's
            fast retry settings.

    Yields:
        The wired adapters over the demo's database, migrated.

    Raises:
        DatabaseRefused: the role may not create databases.
    """
    dsn, _server = await database(settings)
    demo_dsn = await create_demo_database(dsn)
    try:
        demo = settings.model_copy(update={"database_url": demo_dsn})
        async with open_adapters(demo, migrate_first=True) as adapters:
            yield adapters
    finally:
        await drop_demo_database(dsn)
