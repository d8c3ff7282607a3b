"""enqueue_accepted_job inside the sender's transaction: asyncpg and SQLAlchemy alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.pool import NullPool

from birddog import InvalidInput, Job, JobConflict, JobState, Outcome, Recovery
from birddog.clock import SystemClock
from birddog.postgres import sqlalchemy_url
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import Pool
from tests.support import claim, eventually, job_row, make_job

NOTIFY_TIMEOUT_S = 5.0
ABSENCE_S = 0.2


async def job_count(pool: Pool) -> int:
    """How many jobs are stored."""
    count: int = await pool.fetchval("SELECT count(*) FROM birddog.jobs")
    return count


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A SQLAlchemy engine (asyncpg driver) on this test's database."""
    engine = create_async_engine(sqlalchemy_url(database_url), poolclass=NullPool)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def listener(
    pg_conn: asyncpg.Connection,
) -> AsyncIterator[asyncio.Queue[str]]:
    """Payloads of NOTIFY birddog_jobs, as a dedicated connection receives them."""
    received: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(_conn: object, _pid: int, _channel: str, payload: object) -> None:
        received.put_nowait(str(payload))

    await pg_conn.add_listener("birddog_jobs", on_notify)
    try:
        yield received
    finally:
        await pg_conn.remove_listener("birddog_jobs", on_notify)


# ---- the sender's transaction ----------------------------------------------------------


async def test_a_committed_asyncpg_transaction_enqueues_and_notifies_at_commit(
    pg_pool: Pool, listener: asyncio.Queue[str]
) -> None:
    """The job is stored queued, and the NOTIFY carrying its queue arrives only after commit."""
    async with pg_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert await enqueue_accepted_job(conn, make_job()) is True
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(listener.get(), ABSENCE_S)
        await tx.commit()
    assert await asyncio.wait_for(listener.get(), NOTIFY_TIMEOUT_S) == "s-bob"
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["queue"], stored["lane"], stored["priority"]) == (
        "queued",
        "s-bob",
        "default",
        0,
    )


async def test_a_rolled_back_asyncpg_transaction_leaves_no_job(
    pg_pool: Pool, listener: asyncio.Queue[str]
) -> None:
    """Roll the sender's asyncpg transaction back and no job exists, and no worker was woken."""
    async with pg_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("CREATE TEMP TABLE sender_work (x int)")
        assert await enqueue_accepted_job(conn, make_job()) is True
        await tx.rollback()
    assert await job_count(pg_pool) == 0
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(listener.get(), ABSENCE_S)


async def test_asyncpg_without_a_transaction_commits_job_and_notify_together(
    pg_pool: Pool, listener: asyncio.Queue[str]
) -> None:
    """Outside a transaction the enqueue commits on its own, with its notification."""
    async with pg_pool.acquire() as conn:
        assert await enqueue_accepted_job(conn, make_job()) is True
        assert not conn.is_in_transaction()
    assert await job_count(pg_pool) == 1
    assert await asyncio.wait_for(listener.get(), NOTIFY_TIMEOUT_S) == "s-bob"


async def test_a_plain_asyncpg_connection_without_codecs_works(
    pg_conn: asyncpg.Connection, pg_pool: Pool
) -> None:
    """A caller's own asyncpg connection (no JSON codec) enqueues and replays the same job."""
    job = make_job(max_recoveries=2)
    async with pg_conn.transaction():
        assert await enqueue_accepted_job(pg_conn, job) is True
        assert await enqueue_accepted_job(pg_conn, job) is False
    assert await PostgresJobs(pg_pool, clock=SystemClock()).get("job-1") == job


async def _in_session(engine: AsyncEngine, job: Job, *, commit: bool) -> bool:
    async with AsyncSession(engine) as session:
        inserted = await enqueue_accepted_job(session, job)
        await (session.commit() if commit else session.rollback())
    return inserted


async def _in_connection(engine: AsyncEngine, job: Job, *, commit: bool) -> bool:
    async with engine.connect() as conn:
        inserted = await enqueue_accepted_job(conn, job)
        await (conn.commit() if commit else conn.rollback())
    return inserted


SQLALCHEMY_VARIANTS = pytest.mark.parametrize(
    "run", [_in_session, _in_connection], ids=["AsyncSession", "AsyncConnection"]
)


@SQLALCHEMY_VARIANTS
async def test_a_rolled_back_sqlalchemy_transaction_leaves_no_job(
    engine: AsyncEngine,
    pg_pool: Pool,
    listener: asyncio.Queue[str],
    run: Callable[..., Awaitable[bool]],
) -> None:
    """Roll back a SQLAlchemy session or connection whose first statement enqueued: no job."""
    assert await run(engine, make_job(), commit=False) is True
    assert await job_count(pg_pool) == 0
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(listener.get(), ABSENCE_S)


@SQLALCHEMY_VARIANTS
async def test_a_committed_sqlalchemy_transaction_enqueues(
    engine: AsyncEngine,
    pg_pool: Pool,
    listener: asyncio.Queue[str],
    run: Callable[..., Awaitable[bool]],
) -> None:
    """Commit a SQLAlchemy session or connection: the job is claimable and workers were told."""
    job = make_job(priority=3, max_recoveries=1)
    assert await run(engine, job, commit=True) is True
    assert await asyncio.wait_for(listener.get(), NOTIFY_TIMEOUT_S) == "s-bob"
    assert await run(engine, job, commit=True) is False
    claimed = await claim(PostgresJobs(pg_pool, clock=SystemClock()))
    assert claimed.job.model_copy(update={"state": JobState.QUEUED}) == job


async def test_sqlalchemy_session_work_and_job_roll_back_together(
    engine: AsyncEngine, pg_pool: Pool
) -> None:
    """The sender's own writes and the job share one SQLAlchemy transaction."""
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE sender_orders (id int PRIMARY KEY)"))
    async with AsyncSession(engine) as session:
        await session.execute(text("INSERT INTO sender_orders VALUES (1)"))
        await enqueue_accepted_job(session, make_job())
        await session.rollback()
    assert await pg_pool.fetchval("SELECT count(*) FROM sender_orders") == 0
    assert await job_count(pg_pool) == 0
    async with AsyncSession(engine) as session:
        await session.execute(text("INSERT INTO sender_orders VALUES (1)"))
        await enqueue_accepted_job(session, make_job())
        await session.commit()
    assert await pg_pool.fetchval("SELECT count(*) FROM sender_orders") == 1
    assert await job_count(pg_pool) == 1


# ---- the replay law --------------------------------------------------------------------


async def test_an_identical_replay_is_accepted_without_a_duplicate(pg_pool: Pool) -> None:
    """The same job again returns False and stores nothing new, whatever state it reached."""
    job = make_job(max_recoveries=1)
    async with pg_pool.acquire() as conn:
        assert await enqueue_accepted_job(conn, job) is True
        assert await enqueue_accepted_job(conn, job) is False
        jobs = PostgresJobs(pg_pool, clock=SystemClock())
        claimed = await claim(jobs)
        assert await enqueue_accepted_job(conn, job) is False
        await jobs.settle(
            job_id="job-1",
            claim_token=claimed.claim_token,
            outcome=Outcome.COMPLETED,
            content="done",
        )
        assert await enqueue_accepted_job(conn, job) is False
    assert await job_count(pg_pool) == 1
    assert (await job_row(pg_pool, "job-1"))["state"] == "settled"


def _changed(field: str) -> Job:
    job = make_job(max_recoveries=1)
    every_change: dict[str, dict[str, Any]] = {
        "queue": {"queue": "s-other"},
        "lane": {"lane": "urgent"},
        "priority": {"priority": 1},
        "payload": {"payload": {**job.payload, "commandFactId": "cmd-other"}},
        "recovery": {"recovery": Recovery(max_recoveries=2)},
    }
    return job.model_copy(update=every_change[field])


@pytest.mark.parametrize("field", ["queue", "lane", "priority", "payload", "recovery"])
async def test_a_replay_that_differs_is_refused_naming_the_field(pg_pool: Pool, field: str) -> None:
    """A replayed job id whose field differs raises JobConflict naming it; the job is unchanged."""
    original = make_job(max_recoveries=1)
    async with pg_pool.acquire() as conn:
        await enqueue_accepted_job(conn, original)
        with pytest.raises(JobConflict, match=rf"different {field};"):
            await enqueue_accepted_job(conn, _changed(field))
    assert await PostgresJobs(pg_pool, clock=SystemClock()).get("job-1") == original


async def test_a_replay_without_recovery_differs_from_one_with_it(pg_pool: Pool) -> None:
    """Dropping the recovery policy is a difference too, and several fields are all named."""
    async with pg_pool.acquire() as conn:
        await enqueue_accepted_job(conn, make_job(max_recoveries=1))
        other = make_job().model_copy(update={"priority": 7})
        with pytest.raises(JobConflict, match=r"different priority, recovery;"):
            await enqueue_accepted_job(conn, other)


async def test_a_conflict_leaves_the_senders_transaction_usable(pg_pool: Pool) -> None:
    """JobConflict is raised without a database error, so the sender may carry on and commit."""
    async with pg_pool.acquire() as conn:
        await enqueue_accepted_job(conn, make_job())
        async with conn.transaction():
            with pytest.raises(JobConflict):
                await enqueue_accepted_job(conn, _changed("lane"))
            assert await enqueue_accepted_job(conn, make_job("job-2")) is True
    assert await job_count(pg_pool) == 2


async def test_a_sqlalchemy_replay_that_differs_is_refused(
    engine: AsyncEngine, pg_pool: Pool
) -> None:
    """The replay law holds on a SQLAlchemy session too."""
    async with AsyncSession(engine) as session:
        assert await enqueue_accepted_job(session, make_job()) is True
        assert await enqueue_accepted_job(session, make_job()) is False
        with pytest.raises(JobConflict, match="different queue"):
            await enqueue_accepted_job(session, _changed("queue"))
        await session.commit()
    assert await job_count(pg_pool) == 1


async def _wait_until_blocked(pool: Pool, pid: int) -> None:
    """Poll, with a deadline, until backend ``pid`` waits on a lock."""
    await eventually(
        lambda: pool.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        ),
        f"backend {pid} to wait on a lock",
        within_s=NOTIFY_TIMEOUT_S,
    )


@pytest.mark.parametrize(("first_commits", "second_inserts"), [(True, False), (False, True)])
async def test_concurrent_enqueues_of_one_id_store_one_job(
    pg_pool: Pool, first_commits: bool, second_inserts: bool
) -> None:
    """A second sender waits for the first: a replay if the first commits, the insert if not."""
    async with pg_pool.acquire() as first, pg_pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        assert await enqueue_accepted_job(first, make_job()) is True
        racing = asyncio.create_task(enqueue_accepted_job(second, make_job()))
        await _wait_until_blocked(pg_pool, second.get_server_pid())
        await (tx.commit() if first_commits else tx.rollback())
        assert await asyncio.wait_for(racing, NOTIFY_TIMEOUT_S) is second_inserts
    assert await job_count(pg_pool) == 1


# ---- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (make_job().model_copy(update={"state": JobState.RUNNING}), "state"),
        (make_job().model_copy(update={"outcome": Outcome.COMPLETED}), "outcome"),
        (make_job().model_copy(update={"payload": {"note": "nul \x00"}}), "payload.note"),
        (make_job().model_copy(update={"payload": {"n": [1, float("nan")]}}), "payload.n.1"),
        (make_job().model_copy(update={"payload": {"bad\ud800": 1}}), "payload"),
    ],
    ids=["running", "with-outcome", "nul-in-payload", "nan-in-payload", "surrogate-key"],
)
async def test_bad_jobs_are_refused_before_anything_is_written(
    pg_pool: Pool, job: Job, field: str
) -> None:
    """A job that is not queued, has an outcome, or cannot be stored is refused, naming the field."""
    async with pg_pool.acquire() as conn:
        with pytest.raises(InvalidInput) as caught:
            await enqueue_accepted_job(conn, job)
    assert caught.value.field == field
    assert await job_count(pg_pool) == 0


async def test_a_connection_of_another_kind_is_refused(pg_pool: Pool) -> None:
    """Anything but an asyncpg or SQLAlchemy async connection is a TypeError."""
    with pytest.raises(TypeError, match="asyncpg connection or a SQLAlchemy"):
        await enqueue_accepted_job(object(), make_job())  # type: ignore[arg-type]
    assert await job_count(pg_pool) == 0
