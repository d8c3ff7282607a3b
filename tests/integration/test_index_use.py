"""The job functions find their rows by index, whatever collation their arguments carry.

A job's ids sort ``COLLATE "C"`` and its queue key in the database's collation; a PL/pgSQL
function called with an id from a job's row takes that collation for its variables, and a
comparison in another collation than an index's cannot use it. That made every settlement
read the whole of ``queue_heads`` and of the queued and running jobs (seen as 1 ms per
settlement at 2,000 jobs, growing with the table). Here each call of the write path, on a
database of a few hundred queues, reads a handful of rows, counted by PostgreSQL's own
statistics on one connection. The same held for the routes a settlement's replies look
up (every route read, for each settlement).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from birddog.clock import SystemClock
from birddog.core.mail import Outcome
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool, create_pool
from tests.support import enqueue, make_job

QUEUES = 400
"""Queues (one session each) with a job queued and one running: what a scan would read."""
CALLS = 12
"""Calls of each function: more than five, so PL/pgSQL's generic plans are in use."""
ROWS_PER_CALL = 40
"""A call reads its job, its queue's head and jobs, its replies: far fewer than a table."""
TABLES = ("jobs", "queue_heads", "routes")

READ = """
SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
FROM pg_stat_user_tables WHERE schemaname = 'birddog' AND relname = ANY($1::text[])
"""


@pytest.fixture
async def one(database_url: str) -> AsyncIterator[Pool]:
    """A pool of one connection: the statistics counted are that backend's."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def rows_read(pool: Pool, call: Callable[[], Awaitable[object]]) -> int:
    """The rows of :data:`TABLES` read while ``call`` runs on ``pool``."""

    async def counted() -> int:
        await pool.execute("SELECT pg_stat_force_next_flush()")
        await pool.execute("SELECT 1")  # the flush happens as this backend goes idle
        async with pool.acquire() as conn:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            return int(await conn.fetchval(READ, list(TABLES)))

    before = await counted()
    await call()
    return await counted() - before


async def test_each_write_function_reads_its_own_rows_not_the_table(
    pg_pool: Pool, one: Pool
) -> None:
    """Settle, claim, heartbeat, cancel and enqueue: a few rows a call, 400 queues and routes."""
    if await pg_pool.fetchval("SELECT current_setting('server_version_num')::int") < 150000:
        pytest.skip("pg_stat_force_next_flush needs PostgreSQL 15")
    await enqueue(pg_pool, *(make_job(f"run-{n}", session=f"s-{n}") for n in range(QUEUES)))
    setup = PostgresJobs(pg_pool, clock=SystemClock())
    running = await setup.claim_many(queues=[f"s-{n}" for n in range(QUEUES)], limit=QUEUES)
    assert len(running) == QUEUES
    await enqueue(pg_pool, *(make_job(f"wait-{n}", session=f"s-{n}") for n in range(QUEUES)))
    # As many agents with a mailbox route: the settlements' replies look up their routes.
    await pg_pool.execute(
        "INSERT INTO birddog.routes (agent_id, kind) "
        "SELECT 'agent-' || n, 'mailbox' FROM generate_series(1, $1::int) AS n",
        QUEUES,
    )
    await pg_pool.execute(
        "ANALYZE birddog.jobs; ANALYZE birddog.queue_heads; ANALYZE birddog.routes"
    )
    jobs = PostgresJobs(one, clock=SystemClock())
    held = iter(running)

    async def heartbeats() -> None:
        for claimed in running[:CALLS]:
            await jobs.heartbeat(
                job_id=claimed.job.job_id, claim_token=claimed.claim_token, lease_s=60
            )

    async def settles() -> None:
        for _ in range(CALLS):
            claimed = next(held)
            await jobs.settle(
                job_id=claimed.job.job_id,
                claim_token=claimed.claim_token,
                outcome=Outcome.COMPLETED,
                content="done",
            )

    async def claims() -> None:
        for n in range(CALLS):
            assert await jobs.claim(queues=[f"s-{n}"], lease_s=60) is not None

    async def cancels() -> None:
        for claimed in running[CALLS : 2 * CALLS]:
            await jobs.cancel(job_id=claimed.job.job_id, content="stop")

    async def enqueues() -> None:
        await enqueue(one, *(make_job(f"new-{n}", session=f"s-{n}") for n in range(CALLS)))

    read = {
        "heartbeat": await rows_read(one, heartbeats),
        "settle": await rows_read(one, settles),
        "claim": await rows_read(one, claims),
        "cancel": await rows_read(one, cancels),
        "enqueue": await rows_read(one, enqueues),
    }
    too_many = {name: n for name, n in read.items() if n > ROWS_PER_CALL * CALLS}
    assert too_many == {}, f"rows read for {CALLS} calls each: {read}"
