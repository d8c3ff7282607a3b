"""The composition root: the one place that names concrete adapters.

``open_stack(settings)`` gives a running set of adapters over one database: the pool, the
Postgres outbox, wake, routes and job store, the HTTP transport and the mail room.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import structlog

from birddog.daemon import Backoff, sleep_unless_stopped
from birddog.http.transport import HttpTransport
from birddog.mailroom import MailRoom
from birddog.metrics import Metrics, TimedTransport
from birddog.postgres import migrate
from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import create_pool
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.wake import PostgresWake
from birddog.settings import Settings

log = structlog.get_logger("birddog.bootstrap")


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        """The current time."""
        return datetime.now(UTC)


@dataclass
class Stack:
    """Adapters over one database, wired together.

    Attributes:
        settings: the settings they were built from.
        dsn: the database DSN.
        pool: the asyncpg pool they share.
        outbox: the Postgres outbox.
        wake: the Postgres wake scheduler.
        routes: the route book.
        jobs: the job store.
        transport: the HTTP transport.
        room: the mail room.
        metrics: the daemon's metrics.
        embedded: the embedded server, when no ``DATABASE_URL`` was given.
    """

    settings: Settings
    dsn: str
    pool: asyncpg.Pool
    outbox: PostgresOutbox
    wake: PostgresWake
    routes: PostgresRoutes
    jobs: PostgresJobs
    transport: HttpTransport
    room: MailRoom
    metrics: Metrics
    embedded: EmbeddedPostgres | None = None


async def database(
    settings: Settings, *, announce: Callable[[str], None] | None = None
) -> tuple[str, EmbeddedPostgres | None]:
    """The DSN to use: ``DATABASE_URL``, or an embedded server in the data directory.

    Args:
        settings: where the DSN or the data directory comes from.
        announce: told the embedded server's DSN, so people can ``psql`` into it.

    Returns:
        The DSN, and the embedded server when one was started.
    """
    if settings.database_url:
        return settings.database_url, None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server = EmbeddedPostgres(settings.data_dir / "postgres")
    dsn = await asyncio.to_thread(server.start)
    if announce is not None:
        announce(f"embedded PostgreSQL is running; look inside with: psql '{dsn}'")
    return dsn, server


class Stopped(Exception):
    """Stopped (SIGTERM/SIGINT) while still waiting for the database."""


async def wait_for_database(dsn: str, *, stop: asyncio.Event, cap_s: float = 5.0) -> None:
    """Wait until the database accepts a connection, retrying with backoff.

    A daemon started before its database (a host reboot, ``docker compose up``) waits
    and says so, rather than exiting.

    Raises:
        Stopped: ``stop`` was set first.
    """
    backoff = Backoff(cap_s)
    while not stop.is_set():
        try:
            conn = await asyncpg.connect(dsn, timeout=10)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            delay = backoff.next()
            log.warning("database_unavailable", error=type(exc).__name__, retry_in_s=delay)
            await sleep_unless_stopped(stop, delay)
        else:
            await conn.close()
            return
    raise Stopped


@contextlib.asynccontextmanager
async def open_stack(
    settings: Settings,
    *,
    migrate_first: bool = False,
    announce: Callable[[str], None] | None = None,
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
    pool = await create_pool(dsn, max_size=pool_size)
    clock = SystemClock()
    metrics = Metrics()
    routes = PostgresRoutes(pool)
    transport = HttpTransport(
        routes,
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
        schedule=settings.schedule(),
        page_size=settings.page_size,
        lease_s=settings.lease_s,
        # HttpTransport cancels its own request at post_timeout_s; a second timer per post
        # would only cost time.
        post_timeout_s=None,
        max_content_bytes=settings.max_content_bytes,
    )
    jobs = PostgresJobs(pool, max_content_bytes=settings.max_content_bytes, clock=clock)
    try:
        yield Stack(
            settings=settings,
            dsn=dsn,
            pool=pool,
            outbox=outbox,
            wake=wake,
            routes=routes,
            jobs=jobs,
            transport=transport,
            room=room,
            metrics=metrics,
            embedded=embedded,
        )
    finally:
        await transport.close()
        await pool.close()
