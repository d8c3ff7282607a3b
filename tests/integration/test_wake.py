"""PostgresWake and WakeListener: earliest wake kept, NOTIFY on commit, listeners that heal."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.outbox import insert_rows
from birddog.postgres.pool import Connection, Pool
from birddog.postgres.wake import PostgresWake, WakeListener, schedule_wake_on
from tests.support import at, eventually, make_row

QUIET_S = 0.2
"""How long a listener must stay silent to show that nothing was announced."""


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[WakeListener]:
    """A wake listener on this test's database."""
    async with WakeListener(database_url) as wake_listener:
        assert wake_listener.connected
        yield wake_listener


async def _kill_backend(wake_listener: WakeListener, database_url: str) -> int:
    """Terminate the listener's backend from another connection; returns its pid."""
    pid = await _backend_pid(wake_listener)
    killer = await asyncpg.connect(database_url)
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid) is True
    finally:
        await killer.close()
    return pid


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


async def test_a_wake_at_or_after_the_armed_one_stays_quiet(
    pg_pool: Pool, listener: WakeListener
) -> None:
    """An armed wake at or before the new one means a drainer looks by then: no notify."""
    wake = PostgresWake(pg_pool)
    await wake.schedule_wake(at=at(0))  # the first wake ever: nobody has slept yet
    assert await listener.wait(5) is True
    for _ in range(2):
        await wake.schedule_wake(at=datetime.now(UTC))
        assert await listener.wait(QUIET_S) is False
    assert await wake.wake_at() == at(0)


async def test_a_drainer_going_to_sleep_is_woken_by_an_earlier_wake_only(
    pg_pool: Pool, listener: WakeListener
) -> None:
    """After a drainer records when it looks again, only a wake before that time notifies."""
    wake = PostgresWake(pg_pool)
    now = datetime.now(UTC)
    await wake.schedule_wake(at=now)
    assert await listener.wait(5) is True
    until = now + timedelta(seconds=30)
    assert await wake.going_to_sleep(until=until, now=now) == until
    await wake.schedule_wake(at=until + timedelta(seconds=1))
    assert await listener.wait(QUIET_S) is False
    await wake.schedule_wake(at=now + timedelta(seconds=2))
    assert await listener.wait(5) is True
    assert await wake.wake_at() == now + timedelta(seconds=2)
    # Going to sleep again keeps an armed wake that comes before its own time.
    assert await wake.going_to_sleep(until=until, now=now) == now + timedelta(seconds=2)


async def _settle_with_schedule_wake_on(conn: Connection, n: int) -> None:
    await conn.execute("INSERT INTO wake_race (n) VALUES ($1)", n)
    await schedule_wake_on(conn, datetime.now(UTC))


async def _settle_with_insert_rows(conn: Connection, n: int) -> None:
    # A fan-out: the insert takes the wake lock, the statement that checks it arms the wake.
    await insert_rows(conn, [make_row(f"race-{n}")], wake_at=datetime.now(UTC))
    await conn.execute("INSERT INTO wake_race (n) VALUES ($1)", n)


@pytest.mark.parametrize(
    "settle",
    [_settle_with_schedule_wake_on, _settle_with_insert_rows],
    ids=["schedule_wake_on", "insert_rows"],
)
async def test_settlements_racing_a_drainer_going_to_sleep_are_never_missed(
    pg_pool: Pool, database_url: str, settle: Callable[[Connection, int], Awaitable[None]]
) -> None:
    """Each settlement is seen by the drainer's last look before sleeping, or wakes it."""
    await pg_pool.execute("CREATE TABLE wake_race (n int PRIMARY KEY)")
    wake = PostgresWake(pg_pool)
    rounds = 150
    looked: set[int] = set()
    progress = asyncio.Event()

    async def look() -> None:
        looked.update(r["n"] for r in await pg_pool.fetch("SELECT n FROM wake_race"))
        progress.set()

    async def drainer(listener: WakeListener) -> None:
        while len(looked) < rounds:
            await look()  # the work a wake brings
            now = datetime.now(UTC)
            await wake.going_to_sleep(until=now + timedelta(hours=1), now=now)
            await look()  # the last look before sleeping
            if len(looked) < rounds:
                # Asleep for an hour: only a notification brings the drainer back in time.
                assert await listener.wait(10) is True, f"missed {max(looked, default=-1) + 1}"

    async with WakeListener(database_url) as listener:
        drain = asyncio.create_task(drainer(listener))
        for n in range(rounds):
            # One settlement at a time, each begun while the drainer, awake, heads for
            # sleep, and committed a little after arming its wake (a slow commit): the window in
            # which a drainer could go to sleep without seeing it.
            async with pg_pool.acquire() as conn, conn.transaction():
                await settle(conn, n)
                await asyncio.sleep(0.001 * (n % 3))
            while n not in looked:
                progress.clear()
                await asyncio.wait(
                    {drain, asyncio.ensure_future(progress.wait())},
                    timeout=15,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if drain.done():
                    drain.result()
        await drain
    assert looked == set(range(rounds))


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
    pid = await _kill_backend(listener, database_url)

    assert await listener.wait(5) is True  # the reconnect is reported as a wake
    assert listener.connected
    assert listener.reconnects == 1
    assert await _backend_pid(listener) != pid

    await PostgresWake(pg_pool).schedule_wake(at=at(0))
    assert await listener.wait(5) is True


async def test_a_listener_says_when_its_database_is_back(database_url: str) -> None:
    """on_reconnect is told once per reconnect (a process forwards its spool then), not at start."""
    back: list[int] = []
    async with WakeListener(database_url, on_reconnect=lambda: back.append(1)) as wake_listener:
        assert back == []
        await _kill_backend(wake_listener, database_url)
        assert await wake_listener.wait(5) is True
        assert (wake_listener.reconnects, back) == (1, [1])


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
            await eventually(lambda: wake_listener.wait(1), "a wake after the restart", within_s=30)
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
