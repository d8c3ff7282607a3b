"""The job claim: one turn per session, priced against the backlog it must look past.

A claim takes only the head of each queue (session) with a free slot. Since migration
0011 it reads the queue heads (``birddog.queue_heads``: one row per session with work,
kept by the job functions) and probes only the candidate sessions' jobs; before, it found
the heads with a skip scan over every session that had queued jobs (one index probe per
waiting session). Both are measured in the same run, each on its own fresh database:

- small: 100 jobs in 100 sessions (the baseline of each);
- crowded: 100,000 queued jobs (quick: 10,000), half of them in one session, the rest
  over 1,000 sessions (quick: 100);
- many sessions: 100,000 queued jobs over 10,000 sessions (quick: 10,000 over 1,000).

"before" is revision 0007's claim function, installed beside the current one as
``birddog.claim_skip_scan`` and called with the same arguments; "after" is
``PostgresJobs.claim``. The backlog is written by SQL, so the heads are built once with
``birddog.queue_heads_repair()`` (as after any hand-written jobs). Each round claims one
job in a transaction of its own (the commit is not timed) and settles it (not timed
either), 200 rounds (quick: 50); medians.
Targets: after, many sessions <= 2x small, and small <= 1 ms.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from bench.harness import Context, Figure, fresh_database, ratio
from birddog.clock import SystemClock
from birddog.core.jobs import RESERVED_QUEUE_PREFIX
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

SKIP_SCAN_CLAIM = """CREATE FUNCTION birddog.claim_skip_scan(
    p_queues text[], p_limit integer, p_lease_until timestamptz, p_worker_id text,
    p_slots integer, p_started_at timestamptz, p_reserved_prefix text
)
RETURNS TABLE (
    job_id text, queue text, lane text, priority smallint, state text, payload text,
    recovery text, outcome text, claim_token uuid, lease_expires_at timestamptz,
    recovery_count integer, cancel_requested_at timestamptz, cancel_content text,
    created_at timestamptz, traceparent text
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
BEGIN
    -- The head of each queue (priority, age, id) with a free slot. An agent's login names
    -- its sessions, and takes only the heads whose mail is addressed to its agent.
    IF v_agent IS NOT NULL AND p_queues IS NULL THEN
        RAISE EXCEPTION 'an agent claims from the sessions it names only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN QUERY
    WITH RECURSIVE every_head AS (
        -- A skip scan of the claim index (queue, priority DESC, created_at, job_id): each
        -- probe lands on the next queue's head, so a claim costs one probe per queue that
        -- has queued jobs, however many jobs each holds.
        (
            SELECT j.queue, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND p_queues IS NULL
            ORDER BY j.queue, j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        )
        UNION ALL
        SELECT next.queue, next.priority, next.created_at, next.job_id
        FROM every_head h
        CROSS JOIN LATERAL (
            SELECT j.queue, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue > h.queue
            ORDER BY j.queue, j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) next
    ),
    -- MATERIALIZED, heads and busy: each is made once. Planned from statistics taken while
    -- every job ran (a fleet that had claimed them all), the planner otherwise thinks one
    -- job is queued and runs the heads again for each queued job (minutes at 2,000).
    heads AS MATERIALIZED (
        SELECT h.queue, h.priority, h.created_at, h.job_id
        FROM every_head h
        WHERE NOT starts_with(h.queue, p_reserved_prefix)
        UNION ALL
        SELECT named.queue, named.priority, named.created_at, named.job_id
        FROM (SELECT DISTINCT g.queue FROM unnest(p_queues) AS g(queue)) q
        CROSS JOIN LATERAL (
            SELECT j.queue, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) named
    ),
    busy AS MATERIALIZED (
        SELECT r.queue FROM birddog.jobs r
        WHERE r.state = 'running'
        GROUP BY r.queue
        HAVING count(*) >= p_slots
    ),
    picked AS (
        -- A head another transaction holds is skipped, never the job behind it taken
        -- instead: only heads are candidates.
        SELECT j.job_id, j.queue
        FROM heads h
        JOIN birddog.jobs j ON j.job_id = h.job_id
        WHERE j.state = 'queued' AND NOT EXISTS (SELECT 1 FROM busy b WHERE b.queue = h.queue)
          AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
        ORDER BY h.priority DESC, h.created_at, h.job_id
        LIMIT p_limit
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE birddog.jobs j
    SET state = 'running',
        slot = (
            SELECT min(s.slot) FROM generate_series(0, p_slots - 1) AS s(slot)
            WHERE NOT EXISTS (
                SELECT 1 FROM birddog.jobs r
                WHERE r.queue = p.queue AND r.state = 'running' AND r.slot = s.slot
            )
        ),
        claim_token = gen_random_uuid(),
        lease_expires_at = p_lease_until,
        worker_id = p_worker_id,
        started_at = p_started_at,
        updated_at = now()
    FROM picked p
    WHERE j.job_id = p.job_id
    RETURNING
        j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
        j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
        j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent;
END
$fn$"""
"""Revision 0007's claim (a skip scan over every waiting session), under another name."""

CALL_SKIP_SCAN = """
SELECT c.job_id, c.claim_token
FROM birddog.claim_skip_scan(
    $1::text[], $2::int, $3::timestamptz, $4::text, $5::int, $6::timestamptz, $7::text
) AS c
"""

KINDS = ("before", "after")
"""The claim of revision 0007 (skip scan), and the current one (queue heads)."""


async def claim_rounds(dsn: str, *, rounds: int, kind: str) -> list[float]:
    """Claim and settle ``rounds`` jobs one after another; the claims' times in ms.

    Each claim runs in a transaction of its own, committed after the clock stops: the
    figure is the claim's statement (round trip and execution), not the commit's WAL
    flush, which costs every claim the same and, on a shared machine, dominates it.
    """
    pool = await create_pool(dsn, max_size=2)
    try:
        jobs = PostgresJobs(pool, clock=SystemClock())
        times: list[float] = []
        for _ in range(rounds):
            async with pool.acquire() as conn:
                transaction = conn.transaction()
                await transaction.start()
                started = time.perf_counter()
                taken = await _claim_one(conn, kind)
                times.append((time.perf_counter() - started) * 1000)
                await transaction.commit()
            assert taken is not None, "the backlog ran out"
            if kind == "floor":
                continue
            await jobs.finish(
                job_id=taken[0],
                claim_token=taken[1],
                event=SettleRequested(Outcome.COMPLETED, "ok"),
            )
        return times
    finally:
        await pool.close()


async def _claim_one(conn: Any, kind: str) -> tuple[str, str] | None:
    """One claim of ``kind`` on ``conn`` (in its transaction): the job id and claim token."""
    if kind == "floor":
        # A round trip that does nothing: what the machine charges any statement now.
        await conn.fetchval("SELECT 1")
        return ("", "")
    if kind == "after":
        # The job store over this one connection: the same statement PostgresJobs sends.
        claimed = await PostgresJobs(conn, clock=SystemClock()).claim(lease_s=60)
        return None if claimed is None else (claimed.job.job_id, claimed.claim_token)
    now = datetime.now(UTC)
    row = await conn.fetchrow(
        CALL_SKIP_SCAN, None, 1, now + timedelta(seconds=60), None, 1, now, RESERVED_QUEUE_PREFIX
    )
    return None if row is None else (row["job_id"], str(row["claim_token"]))


async def backlog(
    ctx: Context, name: str, *, jobs: int, sessions: int, crowded: bool, kind: str
) -> str:
    """A fresh database holding the backlog, its heads built, analysed."""
    dsn = await fresh_database(ctx.server, f"claim_{name}_{kind}")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED_JOBS, jobs, sessions, crowded, PAYLOAD)
        await conn.execute("SELECT birddog.queue_heads_repair()")
        if kind == "before":
            await conn.execute(SKIP_SCAN_CLAIM)
        await conn.execute("ANALYZE birddog.jobs")
        await conn.execute("ANALYZE birddog.queue_heads")
    finally:
        await conn.close()
    return dsn


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """The claim's median time at each backlog against a small table's, before and after."""
    size = 10_000 if ctx.quick else 100_000
    rounds = 50 if ctx.quick else 200
    cases = {
        "small": (100, 100, False, 50),
        "crowded": (size, size // 100, True, rounds),
        "many_sessions": (size, size // 10, False, rounds),
    }
    medians: dict[str, dict[str, float]] = {kind: {} for kind in KINDS}
    floor = await backlog(ctx, "floor", jobs=0, sessions=1, crowded=False, kind="after")
    floor_ms = statistics.median(await claim_rounds(floor, rounds=50, kind="floor"))
    for name, (jobs, sessions, crowded, n) in cases.items():
        for kind in KINDS:
            dsn = await backlog(ctx, name, jobs=jobs, sessions=sessions, crowded=crowded, kind=kind)
            medians[kind][name] = statistics.median(await claim_rounds(dsn, rounds=n, kind=kind))
    names = {
        "small": "claim, 100 queued in 100 sessions",
        "crowded": f"claim, {size:,} queued, half in one session + {size // 100:,} sessions",
        "many_sessions": f"claim, {size:,} queued over {size // 10:,} sessions",
    }
    figures = [
        _figure(medians, kind, name, title) for name, title in names.items() for kind in KINDS
    ]
    figures.append(
        Figure(
            name="a round trip doing nothing (SELECT 1), same conditions",
            value=floor_ms,
            unit="ms",
            baseline="the claim after, 100 in 100",
            baseline_value=medians["after"]["small"],
            ratio=ratio(floor_ms, medians["after"]["small"]),
        )
    )
    return figures, {"rounds": rounds, "medians_ms": medians, "select_1_ms": floor_ms}


def _figure(medians: dict[str, dict[str, float]], kind: str, name: str, title: str) -> Figure:
    """One case of one claim: against the same claim's small case (small: the old claim's)."""
    value = medians[kind][name]
    if name == "small":
        base, base_value = "the claim before (skip scan), 100 in 100", medians["before"]["small"]
    else:
        base, base_value = "100 queued in 100 sessions, same claim", medians[kind]["small"]
    figure = Figure(
        name=f"{title} ({kind})",
        value=value,
        unit="ms",
        baseline=base,
        baseline_value=base_value,
        ratio=ratio(value, base_value),
    )
    if kind == "after" and name == "many_sessions":
        figure.target, figure.met = "<= 2x the 100-session claim", figure.ratio <= 2
    if kind == "after" and name == "small":
        figure.target, figure.met = "<= 1 ms", value <= 1
    return figure
