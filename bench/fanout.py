"""Fan-out: settlements with fan-out per second, and agent jobs enqueued per second.

- Settle: ``PostgresJobs.settle`` on claimed agent jobs whose mail has 1 or 8 ``replyTo``
  addresses: one call of ``birddog.settle`` (one round trip), whose job update, reply rows
  and wake commit together.
- Enqueue: ``enqueue_accepted_job(conn, job)`` inside the caller's own transaction
  (``async with conn.transaction()``), jobs built by ``agent_job`` beforehand.

Baseline for both: a bare ``INSERT`` of the same job payload (JSON) into a plain table
(``id bigserial, payload jsonb``), one per transaction, in the same run. Each is run
sequentially on one connection and with 8 concurrent callers on a pool of 8. No daemon
runs meanwhile. For reference, settling with ``schedule_wake=False`` (no wake row, no
NOTIFY) is timed too, to show what arming the wake costs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench.harness import Context, Figure, fresh_database, ratio
from birddog import AgentAddress, AgentWork, Job, Mail, Outcome, agent_job
from birddog.clock import SystemClock
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import create_pool

CONCURRENT = 8
SETTLE_TARGET = 0.5
"""Settling with its fan-out and wake, at 8 callers, against a bare INSERT."""
PLAIN = "CREATE TABLE IF NOT EXISTS bench_plain (id bigserial PRIMARY KEY, payload jsonb NOT NULL)"
VACUUMED = ("birddog.jobs", "birddog.queue_heads", "birddog.outbox", "birddog.wake", "bench_plain")
"""The tables each case starts on vacuumed and analyzed."""
INSERT_PLAIN = "INSERT INTO bench_plain (payload) VALUES ($1::text::jsonb)"


def make_jobs(prefix: str, count: int, replies: int) -> list[Job]:
    """``count`` agent jobs whose mail asks for ``replies`` replies."""
    stamp = int(datetime.now(UTC).timestamp() * 1000)
    reply_to = [
        AgentAddress(agent_id=f"agent-{i:03d}", session_id=f"agent-{i:03d}-s")
        for i in range(replies)
    ]
    jobs = []
    for index in range(count):
        # One session per job: a session runs one turn at a time, and the benchmark
        # claims every job up front so that settling is all the clock sees.
        worker = AgentAddress(agent_id="fanout-worker", session_id=f"{prefix}-s{index:06d}")
        mail = Mail(
            key=f"{prefix}-mail-{index:06d}",
            to=worker,
            from_=reply_to[0],
            reply_to=reply_to,
            content="Please summarise the thread and report back.",
            created_at=stamp,
        )
        work = AgentWork(
            job_id=f"{prefix}-{index:06d}",
            session_id=worker.session_id,
            command_fact_id=f"c{index}",
        )
        jobs.append(agent_job(work, mail))
    return jobs


async def timed(calls: Sequence[Callable[[], Awaitable[Any]]], concurrency: int) -> float:
    """Run the calls, ``concurrency`` at a time; calls per second."""
    queue = list(reversed(calls))

    async def lane() -> None:
        while queue:
            await queue.pop()()

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return len(calls) / (time.perf_counter() - start)


async def bare_inserts(pool: asyncpg.Pool, payloads: list[str], concurrency: int) -> float:
    """The baseline: one ``INSERT`` of a payload per transaction; inserts per second."""

    def call(payload: str) -> Callable[[], Awaitable[Any]]:
        async def go() -> None:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(INSERT_PLAIN, payload)

        return go

    return await timed([call(p) for p in payloads], concurrency)


async def settles(
    pool: asyncpg.Pool, jobs: list[Job], concurrency: int, *, wake: bool = True
) -> float:
    """Claim the jobs, then settle each (with its fan-out); settlements per second."""
    store = PostgresJobs(pool, schedule_wake=wake, clock=SystemClock())
    claimed = await store.claim_many(
        queues=[job.queue for job in jobs], limit=len(jobs), lease_s=3600
    )
    assert len(claimed) == len(jobs), f"claimed {len(claimed)} of {len(jobs)}"

    def call(job_id: str, token: str) -> Callable[[], Awaitable[Any]]:
        async def go() -> None:
            await store.settle(
                job_id=job_id, claim_token=token, outcome=Outcome.COMPLETED, content="Done."
            )

        return go

    return await timed([call(c.job.job_id, c.claim_token) for c in claimed], concurrency)


async def enqueues(pool: asyncpg.Pool, jobs: list[Job], concurrency: int) -> float:
    """Enqueue each job inside a caller transaction; jobs per second."""

    def call(job: Job) -> Callable[[], Awaitable[Any]]:
        async def go() -> None:
            async with pool.acquire() as conn, conn.transaction():
                await enqueue_accepted_job(conn, job)

        return go

    return await timed([call(job) for job in jobs], concurrency)


async def enqueue_all(pool: asyncpg.Pool, jobs: list[Job]) -> None:
    """Enqueue jobs in one transaction, then vacuum (setup, not timed)."""
    async with pool.acquire() as conn, conn.transaction():
        for job in jobs:
            await enqueue_accepted_job(conn, job)
    await vacuum(pool)


async def vacuum(pool: asyncpg.Pool) -> None:
    """Vacuum and analyze the tables a case writes (setup, not timed).

    Every case starts on tables as autovacuum keeps them in a live database: the cases
    run one after another within seconds, faster than autovacuum follows, and the later
    ones met the dead rows of the earlier ones (measured: 8 callers settled 482/s on a
    jobs table of 13,700 rows, 7,700 of them dead, and 1,148/s once it was vacuumed).
    """
    async with pool.acquire() as conn:
        for table in VACUUMED:
            await conn.execute(f"VACUUM ANALYZE {table}")


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Settle (1 and 8 replies) and enqueue, sequential and 8 concurrent, each vs bare inserts."""
    count = 300 if ctx.quick else 2_000
    dsn = await fresh_database(ctx.server, "fanout")
    pool = await create_pool(dsn, min_size=CONCURRENT, max_size=CONCURRENT)
    figures: list[Figure] = []
    details: dict[str, Any] = {"operations": count, "concurrent": CONCURRENT, "runs": {}}
    try:
        async with pool.acquire() as conn:
            await conn.execute(PLAIN)
        # Build-only cost of agent_job(), for reference (the callers' CPU, no I/O).
        started = time.perf_counter()
        make_jobs("build", 200, 1)
        details["agent_job_build_us"] = round((time.perf_counter() - started) / 200 * 1e6, 1)
        for concurrency in (1, CONCURRENT):
            label = "sequential" if concurrency == 1 else f"{concurrency} concurrent"
            for replies in (1, 8):
                jobs = make_jobs(f"s{replies}c{concurrency}", count, replies)
                await enqueue_all(pool, jobs)
                payloads = [json.dumps(job.payload) for job in jobs]
                product = await settles(pool, jobs, concurrency)
                baseline = await bare_inserts(pool, payloads, concurrency)
                details["runs"][f"settle_{replies}_{concurrency}"] = {
                    "settlements_per_s": product,
                    "replies_per_s": product * replies,
                    "bare_inserts_per_s": baseline,
                }
                figures.append(
                    Figure(
                        name=f"settle + fan-out, {replies} repl{'y' if replies == 1 else 'ies'}"
                        f"/mail, {label}",
                        value=product,
                        unit="settlements/s",
                        baseline="bare INSERT of the payload, same concurrency",
                        baseline_value=baseline,
                        ratio=ratio(product, baseline),
                        ratio_note="settle / bare insert",
                        target=f">= {SETTLE_TARGET}" if concurrency > 1 else "",
                        met=(
                            ratio(product, baseline) >= SETTLE_TARGET if concurrency > 1 else None
                        ),
                    )
                )
            # What the wake (its row and NOTIFY, in the settling transaction) costs.
            jobs = make_jobs(f"n{concurrency}", count, 1)
            await enqueue_all(pool, jobs)
            details["runs"][f"settle_1_{concurrency}_without_wake"] = {
                "settlements_per_s": await settles(pool, jobs, concurrency, wake=False)
            }
            jobs = make_jobs(f"e{concurrency}", count, 1)
            payloads = [json.dumps(job.payload) for job in jobs]
            await vacuum(pool)
            product = await enqueues(pool, jobs, concurrency)
            baseline = await bare_inserts(pool, payloads, concurrency)
            details["runs"][f"enqueue_{concurrency}"] = {
                "jobs_per_s": product,
                "bare_inserts_per_s": baseline,
            }
            figures.append(
                Figure(
                    name=f"enqueue_accepted_job in caller tx, {label}",
                    value=product,
                    unit="jobs/s",
                    baseline="bare INSERT of the payload, same concurrency",
                    baseline_value=baseline,
                    ratio=ratio(product, baseline),
                    ratio_note="enqueue / bare insert",
                )
            )
    finally:
        await pool.close()
    return figures, details
