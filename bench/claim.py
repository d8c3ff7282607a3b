"""The job claim: one turn per session, priced against the backlog it must look past.

A claim takes only the head of each queue (session) with a free slot: a skip scan over
the queues that have queued jobs, then each queue's head. Its cost grows with the number
of queues, not of jobs. Two backlogs, each measured against a small table in the same
run (100 jobs in 100 sessions):

- crowded: 100,000 queued jobs (quick: 10,000), half of them in one session, the rest
  over 1,000 sessions (quick: 100);
- many sessions: 100,000 queued jobs over 10,000 sessions (quick: 10,000 over 1,000).

Each round claims one job and settles it (the settlement is not timed), 200 rounds
(quick: 50); medians. No target: the figures say what a claim costs at that size.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import asyncpg

from bench.harness import Context, Figure, fresh_database, ratio
from birddog.clock import SystemClock
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import Outcome
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import create_pool

PAYLOAD = '{"sessionId": "s", "commandFactId": "c"}'
"""A payload fan-out reads without complaint (no mail: no replies)."""

SEED_JOBS = """
INSERT INTO birddog.jobs (job_id, queue, lane, priority, state, payload, created_at)
SELECT
    'job-' || lpad(n::text, 7, '0'),
    CASE WHEN n % 2 = 0 AND $3 THEN 's-crowded' ELSE 's-' || (n % $2) END,
    'default', 0, 'queued', $4::text::jsonb,
    now() - make_interval(secs => ($1 - n) / 1000.0)
FROM generate_series(1, $1) AS n
"""
"""$1 jobs over $2 sessions, every other one in ``s-crowded`` when $3, payload $4."""


async def claim_rounds(dsn: str, *, rounds: int) -> list[float]:
    """Claim and settle ``rounds`` jobs one after another; the claims' times in ms."""
    pool = await create_pool(dsn, max_size=2)
    try:
        jobs = PostgresJobs(pool, clock=SystemClock())
        times: list[float] = []
        for _ in range(rounds):
            started = time.perf_counter()
            claimed = await jobs.claim(lease_s=60)
            times.append((time.perf_counter() - started) * 1000)
            assert claimed is not None, "the backlog ran out"
            await jobs.finish(
                job_id=claimed.job.job_id,
                claim_token=claimed.claim_token,
                event=SettleRequested(Outcome.COMPLETED, "ok"),
            )
        return times
    finally:
        await pool.close()


async def backlog(ctx: Context, name: str, *, jobs: int, sessions: int, crowded: bool) -> str:
    """A fresh database holding the backlog, analysed."""
    dsn = await fresh_database(ctx.server, f"claim_{name}")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED_JOBS, jobs, sessions, crowded, PAYLOAD)
        await conn.execute("ANALYZE birddog.jobs")
    finally:
        await conn.close()
    return dsn


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """The claim's median time at each backlog against a small table's, same run."""
    size = 10_000 if ctx.quick else 100_000
    rounds = 50 if ctx.quick else 200
    small = await backlog(ctx, "small", jobs=100, sessions=100, crowded=False)
    cases = {
        "crowded": (size, size // 100, True),
        "many_sessions": (size, size // 10, False),
    }
    medians: dict[str, float] = {"small": statistics.median(await claim_rounds(small, rounds=50))}
    for name, (jobs, sessions, crowded) in cases.items():
        dsn = await backlog(ctx, name, jobs=jobs, sessions=sessions, crowded=crowded)
        medians[name] = statistics.median(await claim_rounds(dsn, rounds=rounds))
    names = {
        "crowded": f"claim, {size:,} queued, half in one session + {size // 100:,} sessions",
        "many_sessions": f"claim, {size:,} queued over {size // 10:,} sessions",
    }
    figures = [
        Figure(
            name=title,
            value=medians[name],
            unit="ms",
            baseline="100 queued in 100 sessions",
            baseline_value=medians["small"],
            ratio=ratio(medians[name], medians["small"]),
        )
        for name, title in names.items()
    ]
    return figures, {"rounds": rounds, "medians_ms": medians}
