"""Peer: the same deliveries done by Procrastinate (one job per reply) against BirdDog.

Procrastinate (``bench/peer_app.py``: a task that POSTs one reply with aiohttp) gets its
own database on the same server, the same inbox server, and 20,000 jobs (quick: 2,000)
for the same 50 recipients, deferred before its worker starts. The worker runs with
``wait=False`` (it exits once the queue is empty); its rate is timed from the first
``started`` event to the last ``succeeded`` event (Procrastinate's own event table).
In full mode the worker concurrency is picked first: 4, 8 and 16 each run 2,000 jobs
and the fastest is used for the main run.

BirdDog does the same number of replies in the same run (a ``birddog run`` daemon, timed
as in ``bench/drain.py``). Target: BirdDog at least 10 times Procrastinate.
"""

from __future__ import annotations

import sys
from typing import Any

import asyncpg

from bench import drain
from bench.harness import (
    Context,
    DaemonProcess,
    Figure,
    TreeCpu,
    add_routes,
    agent_names,
    drop_database,
    fresh_database,
    ratio,
    run_python,
)

AGENTS = 50
TARGET = 10.0
SWEEP = (4, 8, 16)
SWEEP_JOBS = 2_000
DEFAULT_CONCURRENCY = 8


async def procrastinate_run(ctx: Context, *, count: int, concurrency: int) -> dict[str, Any]:
    """A fresh database, ``count`` deferred jobs, one worker run; its rate from its events."""
    dsn = await fresh_database(ctx.server, "peer", birddog=False)
    env = {"BENCH_PEER_DSN": dsn}
    try:
        await run_python(["bench.peer", "schema"], timeout_s=120, env=env)
        await run_python(
            ["bench.peer", "defer", ctx.inbox.base_url, str(count), str(AGENTS)],
            timeout_s=300,
            env=env,
        )
        await ctx.inbox.reset()
        pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
        result, cpu_s, peak_rss = await run_python(
            ["bench.peer", "worker", str(concurrency)], timeout_s=600, env=env
        )
        pg_cpu_s = pg_cpu.stop()
        conn = await asyncpg.connect(dsn)
        try:
            row = await conn.fetchrow(
                "SELECT min(at) FILTER (WHERE type = 'started') AS first, "
                "max(at) FILTER (WHERE type = 'succeeded') AS last, "
                "count(*) FILTER (WHERE type = 'succeeded') AS succeeded "
                "FROM procrastinate_events"
            )
        finally:
            await conn.close()
    finally:
        await drop_database(ctx.server, dsn)
    elapsed = (row["last"] - row["first"]).total_seconds()
    succeeded = row["succeeded"]
    return {
        "jobs": count,
        "concurrency": concurrency,
        "succeeded": succeeded,
        "elapsed_s": round(elapsed, 3),
        "per_s": succeeded / elapsed if elapsed > 0 else float("nan"),
        "worker_cpu_us_per_job": cpu_s / max(succeeded, 1) * 1e6,
        "postgres_cpu_us_per_job": pg_cpu_s / max(succeeded, 1) * 1e6,
        "worker_peak_rss_mb": round(peak_rss / 2**20, 1),
        "worker_wall_s": round(result["elapsed_s"], 3),
        "inbox_posts": (await ctx.inbox.stats())["posts"],
    }


async def birddog_run(ctx: Context, *, count: int) -> dict[str, Any]:
    """The same number of replies through a ``birddog run`` daemon."""
    dsn = await fresh_database(ctx.server, "peer_birddog")
    conn = await asyncpg.connect(dsn)
    daemon = DaemonProcess(dsn, ctx.tmp / "peer-daemon.log")
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        daemon.start()
        await daemon.wait_listening(conn)
        await drain.product_round(ctx, conn, daemon, count=200, prefix="warm")
        return await drain.product_round(ctx, conn, daemon, count=count, prefix="peer")
    finally:
        daemon.stop()
        await conn.close()
        await drop_database(ctx.server, dsn)


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Pick Procrastinate's concurrency (full mode), then both at the same size."""
    count = 2_000 if ctx.quick else 20_000
    await ctx.inbox.configure()
    sweep: dict[int, float] = {}
    concurrency = DEFAULT_CONCURRENCY
    if not ctx.quick:
        for candidate in SWEEP:
            trial = await procrastinate_run(ctx, count=SWEEP_JOBS, concurrency=candidate)
            sweep[candidate] = trial["per_s"]
        concurrency = max(sweep, key=lambda c: sweep[c])
    peer = await procrastinate_run(ctx, count=count, concurrency=concurrency)
    ours = await birddog_run(ctx, count=count)
    figure = Figure(
        name=f"deliveries/s, {count:,} replies: birddog run vs Procrastinate",
        value=ours["per_s"],
        unit="replies/s",
        baseline=f"Procrastinate worker, concurrency {concurrency}, one job per reply",
        baseline_value=peer["per_s"],
        ratio=ratio(ours["per_s"], peer["per_s"]),
        ratio_note="birddog / procrastinate",
        target=f">= {TARGET:g}x",
        met=ratio(ours["per_s"], peer["per_s"]) >= TARGET,
    )
    details = {
        "replies": count,
        "procrastinate": peer,
        "procrastinate_concurrency_sweep_per_s": sweep,
        "birddog": ours,
    }
    return [figure], details


if __name__ == "__main__":
    # The worker, deferral and schema commands run in their own processes, and
    # Procrastinate's app must not live in __main__ (it would be registered twice).
    from bench.peer_app import main

    main(sys.argv[1:])
