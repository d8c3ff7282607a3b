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

PgQueuer (``bench/peer_pgqueuer.py``: one job per signed reply, retried by its database
retry executor, its documented throughput settings) drains the same deliveries from its
own database on the same server, to the same inbox server. Each round: a fresh database,
its schema, the jobs enqueued, then one worker process (``mode=drain``) timed from its
spawn to its exit, start-up included. Full mode runs each concurrency of 16, 64 and 256
(``max_concurrent_tasks``) once, then the best twice more: the median of its 3 rounds
counts. Quick mode: 500 replies, concurrency 64, one round. BirdDog's figure beside it is
``birddog run --once`` on the same rows, also timed from its spawn to its exit (3 rounds,
median; quick: 1). Target: BirdDog at least 3 times PgQueuer.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import resource
import statistics
import sys
import time
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
    process_cpu_s,
    ratio,
    run_python,
    seed_outbox,
)

AGENTS = 50
TARGET = 10.0
SWEEP = (4, 8, 16)
SWEEP_JOBS = 2_000
DEFAULT_CONCURRENCY = 8
PGQUEUER_TARGET = 3.0
PGQUEUER_SWEEP = (16, 64, 256)
PGQUEUER_QUICK_CONCURRENCY = 64
PGQUEUER_QUICK_COUNT = 500
ROUNDS = 3


async def peer_database(
    ctx: Context, name: str, module: str, load: str, *, count: int
) -> tuple[str, dict[str, str]]:
    """A fresh database with a peer's schema and ``count`` jobs loaded; its DSN and env.

    ``module``'s ``schema`` command installs the schema, its ``load`` command writes the
    jobs; the inbox's counts are reset after. The database is dropped if either fails.
    """
    dsn = await fresh_database(ctx.server, name, birddog=False)
    env = {"BENCH_PEER_DSN": dsn}
    try:
        await run_python([module, "schema"], timeout_s=120, env=env)
        await run_python(
            [module, load, ctx.inbox.base_url, str(count), str(AGENTS)], timeout_s=300, env=env
        )
        await ctx.inbox.reset()
    except BaseException:
        await drop_database(ctx.server, dsn)
        raise
    return dsn, env


async def procrastinate_run(ctx: Context, *, count: int, concurrency: int) -> dict[str, Any]:
    """A fresh database, ``count`` deferred jobs, one worker run; its rate from its events."""
    dsn, env = await peer_database(ctx, "peer", "bench.peer", "defer", count=count)
    try:
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


async def pgqueuer_run(ctx: Context, *, count: int, concurrency: int) -> dict[str, Any]:
    """A fresh database, PgQueuer's schema, ``count`` jobs, one worker from spawn to exit."""
    dsn, env = await peer_database(
        ctx, "peer_pgqueuer", "bench.peer_pgqueuer", "enqueue", count=count
    )
    try:
        inbox_cpu = ctx.inbox.cpu_s()
        pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
        began = time.monotonic()
        result, cpu_s, peak_rss = await run_python(
            ["bench.peer_pgqueuer", "worker", str(concurrency)], timeout_s=600, env=env
        )
        elapsed = time.monotonic() - began
        pg_cpu_s = pg_cpu.stop()
        stats = await ctx.inbox.stats()
    finally:
        await drop_database(ctx.server, dsn)
    if result["left_in_queue"] or stats["posts"] < count:
        raise RuntimeError(
            f"PgQueuer left {result['left_in_queue']} jobs; the inbox got {stats['posts']} "
            f"of {count} posts"
        )
    return {
        "jobs": count,
        "concurrency": concurrency,
        "batch_size": result["batch_size"],
        "elapsed_s": round(elapsed, 3),
        "per_s": count / elapsed,
        "worker_cpu_us_per_job": cpu_s / count * 1e6,
        "postgres_cpu_us_per_job": pg_cpu_s / count * 1e6,
        "inbox_cpu_us_per_job": (ctx.inbox.cpu_s() - inbox_cpu) / count * 1e6,
        "worker_peak_rss_mb": round(peak_rss / 2**20, 1),
        "inbox_posts": stats["posts"],
        "version": result["version"],
    }


async def birddog_once_run(ctx: Context, *, count: int, prefix: str) -> dict[str, Any]:
    """``count`` due replies, then ``birddog run --once`` from its spawn to its exit."""
    dsn = await fresh_database(ctx.server, "peer_once")
    conn = await asyncpg.connect(dsn)
    daemon = DaemonProcess(dsn, ctx.tmp / "peer-once.log", args=["run", "--once"])
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        await seed_outbox(conn, count=count, agents=AGENTS, prefix=prefix)
        await conn.execute("ANALYZE birddog.outbox")
        await ctx.inbox.reset()
        inbox_cpu = ctx.inbox.cpu_s()
        children_cpu = process_cpu_s(resource.RUSAGE_CHILDREN)
        pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
        began = time.monotonic()
        daemon.start()
        assert daemon.proc is not None
        try:
            code = await asyncio.wait_for(asyncio.to_thread(daemon.proc.wait), 600)
        except TimeoutError:
            daemon.stop()
            raise
        elapsed = time.monotonic() - began
        pg_cpu_s = pg_cpu.stop()
        cpu_s = process_cpu_s(resource.RUSAGE_CHILDREN) - children_cpu
        daemon.stop()
        if code != 0:
            raise RuntimeError(f"birddog run --once exited with {code}\n" + daemon.log_tail())
        delivered = await conn.fetchval("SELECT count(*) FROM birddog.receipts")
        stats = await ctx.inbox.stats()
    finally:
        await conn.close()
        await drop_database(ctx.server, dsn)
    if delivered < count:
        raise RuntimeError(f"birddog run --once delivered {delivered} of {count}")
    return {
        "delivered": delivered,
        "elapsed_s": round(elapsed, 3),
        "per_s": count / elapsed,
        "daemon_cpu_us_per_reply": cpu_s / count * 1e6,
        "postgres_cpu_us_per_reply": pg_cpu_s / count * 1e6,
        "inbox_cpu_us_per_reply": (ctx.inbox.cpu_s() - inbox_cpu) / count * 1e6,
        "inbox_posts": stats["posts"],
    }


async def pgqueuer_versus(ctx: Context, *, count: int) -> tuple[Figure, dict[str, Any]]:
    """PgQueuer's best concurrency (full mode) against ``birddog run --once``, medians."""
    rounds = 1 if ctx.quick else ROUNDS
    sweep: dict[int, dict[str, Any]] = {}
    if ctx.quick:
        concurrency = PGQUEUER_QUICK_CONCURRENCY
        peer_rounds = [await pgqueuer_run(ctx, count=count, concurrency=concurrency)]
    else:
        for candidate in PGQUEUER_SWEEP:
            sweep[candidate] = await pgqueuer_run(ctx, count=count, concurrency=candidate)
        concurrency = max(sweep, key=lambda c: sweep[c]["per_s"])
        peer_rounds = [sweep[concurrency]]
    ours_rounds: list[dict[str, Any]] = []
    # Alternate, so that a burst of other work on the machine falls on both.
    for index in range(rounds):
        ours_rounds.append(await birddog_once_run(ctx, count=count, prefix=f"once{index}"))
        if len(peer_rounds) < rounds:
            peer_rounds.append(await pgqueuer_run(ctx, count=count, concurrency=concurrency))
    ours = statistics.median(r["per_s"] for r in ours_rounds)
    theirs = statistics.median(r["per_s"] for r in peer_rounds)
    figure = Figure(
        name=f"deliveries/s, {count:,} replies: birddog run --once vs PgQueuer",
        value=ours,
        unit="replies/s",
        baseline=f"PgQueuer drain worker, {concurrency} in flight, one job per reply",
        baseline_value=theirs,
        ratio=ratio(ours, theirs),
        ratio_note="birddog / pgqueuer (both from spawn to exit)",
        target=f">= {PGQUEUER_TARGET:g}x",
        met=ratio(ours, theirs) >= PGQUEUER_TARGET,
    )
    details = {
        "concurrency": concurrency,
        "rounds": peer_rounds,
        "sweep_per_s": {str(c): r["per_s"] for c, r in sweep.items()},
        "birddog_once_rounds": ours_rounds,
    }
    return figure, details


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Pick Procrastinate's concurrency (full mode), then both at the same size."""
    # BENCH_PEER_COUNT sizes a full run for a busy machine (the results say what was run).
    count = int(os.environ.get("BENCH_PEER_COUNT", "0")) or (2_000 if ctx.quick else 20_000)
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
    quick_count = min(count, PGQUEUER_QUICK_COUNT)
    pgqueuer_figure, pgqueuer = await pgqueuer_versus(
        ctx, count=quick_count if ctx.quick else count
    )
    details = {
        "replies": count,
        "versions": {
            "birddog": importlib.metadata.version("birddog"),
            "procrastinate": importlib.metadata.version("procrastinate"),
            "pgqueuer": importlib.metadata.version("pgqueuer"),
        },
        "procrastinate": peer,
        "procrastinate_concurrency_sweep_per_s": sweep,
        "birddog": ours,
        "pgqueuer": pgqueuer,
    }
    return [figure, pgqueuer_figure], details


if __name__ == "__main__":
    # The worker, deferral and schema commands run in their own processes, and
    # Procrastinate's app must not live in __main__ (it would be registered twice).
    from bench.peer_app import main

    main(sys.argv[1:])
