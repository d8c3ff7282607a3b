"""PostgresWake and WakeListener: earliest wake kept, NOTIFY on commit, listeners that heal."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.pool import Pool
from birddog.postgres.wake import PostgresWake, WakeListener, schedule_wake_on
from tests.support import at

QUIET_S = 0.2
"""How long a listener must stay silent to show that nothing was announced."""


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[WakeListener]:
    """A wake listener on this test's database."""
    async with WakeListener(database_url) as wake_listener:
        assert wake_listener.connected
        yield wake_listener


async def _backend_pid(wake_listener: WakeListener) -> int:
    conn = wake_listener._conn
    assert conn is not None
    return conn.get_server_pid()


async def test_schedule_wake_keeps_the_earliest(pg_pool: Pool) -> None:
    """Scheduling several wakes keeps the earliest; clear disarms only a due wake."""
    wake = PostgresWake(pg_pool)
    assert await wake.wake_at() is None
    await wake.schedule_wake(at=at(20))
    await wake.schedule_wake(at=at(10))
    await wake.schedule_wake(at=at(30))
    assert await wake.wake_at() == at(10)

    await wake.clear(at(5))
    assert await wake.wake_at() == at(10)
    await wake.clear(at(10))
    assert await wake.wake_at() is None
    await wake.schedule_wake(at=at(40))
    assert await wake.wake_at() == at(40)


async def test_notify_reaches_a_listener_only_after_commit(
    pg_pool: Pool, listener: WakeListener
) -> None:
    """A wake scheduled inside a transaction is announced when, and only when, it commits."""
    async with pg_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await schedule_wake_on(conn, at(0))
        assert await listener.wait(QUIET_S) is False
        await tx.commit()
    assert await listener.wait(5) is True
    assert await listener.wait(QUIET_S) is False


async def test_a_rolled_back_wake_is_never_announced(pg_pool: Pool, listener: WakeListener) -> None:
    """A wake from a transaction that rolls back neither persists nor notifies."""
    async with pg_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await schedule_wake_on(conn, at(0))
        await tx.rollback()
    assert await listener.wait(QUIET_S) is False
    assert await PostgresWake(pg_pool).wake_at() is None


async def test_a_later_wake_behind_a_future_one_is_not_announced(
    pg_pool: Pool, listener: WakeListener
) -> None:
    """Behind an armed wake still in the future, a later wake changes nothing and stays quiet."""
    wake = PostgresWake(pg_pool)
    soon = datetime.now(UTC) + timedelta(hours=1)
    await wake.schedule_wake(at=soon)
    assert await listener.wait(5) is True
    await wake.schedule_wake(at=soon + timedelta(minutes=5))
    assert await listener.wait(QUIET_S) is False
    await wake.schedule_wake(at=soon - timedelta(minutes=5))
    assert await listener.wait(5) is True
    assert await wake.wake_at() == soon - timedelta(minutes=5)


async def test_a_stale_wake_never_silences_a_new_one(pg_pool: Pool, listener: WakeListener) -> None:
    """An armed wake already in the past (never cleared) does not swallow later announcements."""
    wake = PostgresWake(pg_pool)
    await wake.schedule_wake(at=at(0))  # long past: a drain ran for it, nobody cleared it
    assert await listener.wait(5) is True
    for _ in range(2):
        await wake.schedule_wake(at=datetime.now(UTC))
        assert await listener.wait(5) is True
    assert await wake.wake_at() == at(0)


async def test_concurrent_schedules_keep_the_minimum(pg_pool: Pool) -> None:
    """Many concurrent schedulers leave exactly the earliest time armed."""
    wake = PostgresWake(pg_pool)
    times = [at(seconds) for seconds in (50, 7, 30, 3, 90, 12, 3, 41)]
    await asyncio.gather(*(wake.schedule_wake(at=when) for when in times))
    assert await wake.wake_at() == at(3)


async def test_listener_times_out_quietly(listener: WakeListener) -> None:
    """With nothing announced, wait returns False after its timeout."""
    assert await listener.wait(QUIET_S) is False
    assert listener.connected


async def test_listener_reconnects_after_its_backend_is_killed(
    pg_pool: Pool, listener: WakeListener, database_url: str
) -> None:
    """A listener whose connection is terminated comes back, reports a wake, and hears again."""
    pid = await _backend_pid(listener)
    killer = await asyncpg.connect(database_url)
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid) is True
    finally:
        await killer.close()

    assert await listener.wait(5) is True  # the reconnect is reported as a wake
    assert listener.connected
    assert listener.reconnects == 1
    assert await _backend_pid(listener) != pid

    await PostgresWake(pg_pool).schedule_wake(at=at(0))
    assert await listener.wait(5) is True


async def test_listener_notices_a_silently_dead_connection(
    pg_pool: Pool, listener: WakeListener
) -> None:
    """A connection closed under the listener is found by the idle check and replaced."""
    conn = listener._conn
    assert conn is not None
    conn.terminate()  # as if the socket died without a word
    assert await listener.wait(QUIET_S) is True
    assert listener.connected
    await PostgresWake(pg_pool).schedule_wake(at=at(0))
    assert await listener.wait(5) is True


async def test_listener_without_a_server_never_raises() -> None:
    """A listener that cannot connect reports no wake, stays disconnected, and does not raise."""
    async with WakeListener(
        "postgresql://postgres@/postgres?host=/nonexistent-birddog", check_timeout_s=1
    ) as lost:
        assert lost.connected is False
        assert await lost.wait(QUIET_S) is False
        assert await lost.wait(QUIET_S) is False
        assert lost.connected is False


async def test_listener_survives_a_server_restart() -> None:
    """A listener on a server that crashes and restarts reconnects and reports a wake."""
    root = Path(tempfile.mkdtemp(prefix="birddog-pg-"))
    server = EmbeddedPostgres(root)
    try:
        dsn = await asyncio.to_thread(server.start)
        async with WakeListener(dsn) as wake_listener:
            assert wake_listener.connected
            await asyncio.to_thread(server.restart, "immediate")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            woke = False
            while not woke and loop.time() < deadline:
                woke = await wake_listener.wait(1)
            assert woke
            assert wake_listener.connected
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute("SELECT pg_notify('birddog_wake', '')")
            finally:
                await conn.close()
            assert await wake_listener.wait(5) is True
    finally:
        await asyncio.to_thread(server.stop, "immediate")
        shutil.rmtree(root, ignore_errors=True)
