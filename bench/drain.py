"""Drain throughput: one ``birddog run`` daemon against the ~60-line baseline loop.

20,000 replies (quick: 2,000) for 50 recipients, all due, are seeded with one
``generate_series`` statement. The daemon runs idle (listening) before the rows are
committed; the clock starts when the seed's wake commits and stops at the last receipt's
``delivered_at``. The baseline (``bench/baseline.py``) then drains a re-seed of the same
rows to the same inboxes, timed from its first page select to its last swap. Rounds
alternate product and baseline; the medians are reported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import psutil

from bench.harness import (
    ROOT,
    Context,
    DaemonProcess,
    Figure,
    Profiler,
    TreeCpu,
    add_routes,
    agent_names,
    clear_outbox,
    fresh_database,
    now_ns,
    ratio,
    run_python,
    seed_outbox,
    summarize_profile,
    wait_until,
)
from birddog.postgres.sql import queries

AGENTS = 50
TARGET = 1.0
"""The single-reply path at the minimal loop's speed, every guarantee kept."""


async def seed(conn: asyncpg.Connection, *, count: int, prefix: str, agents: int = AGENTS) -> None:
    """Seed ``count`` due rows for ``agents`` recipients and refresh the planner's statistics."""
    await seed_outbox(conn, count=count, agents=agents, prefix=prefix)
    await conn.execute("ANALYZE birddog.outbox")


async def wake(conn: asyncpg.Connection) -> float:
    """Arm the wake as a fan-out does (NOTIFY at commit); the wall time once committed."""
    await conn.execute(queries["wake_schedule"], datetime.now(UTC), [])
    return time.time()


def idle_share(before: Any, after: Any) -> float:
    """The share of the machine's CPU time that was idle between two ``psutil.cpu_times()``."""
    total = sum(after) - sum(before)
    idle = (after.idle - before.idle) + (
        getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0)
    )
    return round(idle / total, 3) if total > 0 else 0.0


def inbox_counts(stats: dict[str, Any]) -> dict[str, int]:
    """Posts the inbox got, and over how many client connections."""
    return {"inbox_posts": stats["posts"], "inbox_connections": stats["connections"]}


Round = Callable[[asyncpg.Connection, DaemonProcess, int], Awaitable[dict[str, Any]]]
"""One measured round on a running daemon: its connection, the daemon, the round's index."""


async def alternating_rounds(
    ctx: Context, name: str, *, agents: int, rounds: int, first: Round, second: Round
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Warm one daemon on a fresh database, then alternate ``first`` and ``second`` rounds.

    The two kinds of round share the daemon, the routes (``agents`` recipients) and the
    inboxes, so their ratio compares like with like; their results, in order.
    """
    dsn = await fresh_database(ctx.server, name)
    conn = await asyncpg.connect(dsn)
    daemon = DaemonProcess(dsn, ctx.tmp / f"{name}-daemon.log")
    firsts: list[dict[str, Any]] = []
    seconds: list[dict[str, Any]] = []
    try:
        await add_routes(conn, agent_names(agents), ctx.inbox)
        await ctx.inbox.configure()
        daemon.start()
        await daemon.wait_listening(conn)
        await product_round(ctx, conn, daemon, count=200, prefix="warm", agents=agents)
        for index in range(rounds):
            firsts.append(await first(conn, daemon, index))
            seconds.append(await second(conn, daemon, index))
    finally:
        daemon.stop()
        await conn.close()
    return firsts, seconds


async def product_round(
    ctx: Context,
    conn: asyncpg.Connection,
    daemon: DaemonProcess,
    *,
    count: int,
    prefix: str,
    profile_name: str | None = None,
    deadline_s: float = 240.0,
    agents: int = AGENTS,
) -> dict[str, Any]:
    """Seed ``count`` due rows for ``agents``, wake the idle daemon, wait for every receipt."""
    assert daemon.sampler is not None
    await clear_outbox(conn)
    await ctx.inbox.reset()
    profiler = (
        Profiler(daemon.pid, ctx.results / f"{profile_name}.txt")
        if profile_name and ctx.profile
        else None
    )
    await seed(conn, count=count, prefix=prefix, agents=agents)
    cpu = daemon.sampler.cpu_s()
    inbox_cpu = ctx.inbox.cpu_s()
    pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
    machine = psutil.cpu_times()
    started = await wake(conn)
    started_ns = now_ns()

    async def done() -> bool:
        daemon.check_alive()
        delivered = await conn.fetchval("SELECT count(*) FROM birddog.receipts")
        return bool(delivered >= count)

    try:
        await wait_until(done, timeout_s=deadline_s, interval_s=0.2, what="the daemon's drain")
    finally:
        if profiler is not None:
            profiler.stop()
    last = await conn.fetchval("SELECT max(delivered_at) FROM birddog.receipts")
    elapsed = last.timestamp() - started
    pg_cpu_s = pg_cpu.stop()
    daemon_cpu_s = daemon.sampler.cpu_s() - cpu
    inbox_cpu_s = ctx.inbox.cpu_s() - inbox_cpu
    stats = await ctx.inbox.stats()
    result: dict[str, Any] = {
        "delivered": count,
        "elapsed_s": round(elapsed, 3),
        "per_s": count / elapsed,
        # The same start to the inbox's last arrival: how bench/peer.py times every peer.
        "to_last_post_s": (
            None if stats["last_ns"] is None else round((stats["last_ns"] - started_ns) / 1e9, 3)
        ),
        "daemon_cpu_us_per_reply": daemon_cpu_s / count * 1e6,
        # How much of one core the daemon used, and how idle the whole machine was (the
        # round plus the poll that saw it end): below 1.0 and above 0, the drain waited.
        "daemon_core_share": round(daemon_cpu_s / elapsed, 3),
        "machine_idle_share": idle_share(machine, psutil.cpu_times()),
        "postgres_cpu_us_per_reply": pg_cpu_s / count * 1e6,
        "inbox_cpu_us_per_reply": inbox_cpu_s / count * 1e6,
        **inbox_counts(stats),
    }
    if profiler is not None:
        # Named from the checkout, never by this machine's path to it.
        out = profiler.out
        result["profile"] = str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out.name)
        result["profile_top"] = summarize_profile(profiler.out)
    return result


async def baseline_round(
    ctx: Context, conn: asyncpg.Connection, dsn: str, *, count: int, prefix: str
) -> dict[str, Any]:
    """Re-seed the same rows; run the baseline loop in its own process."""
    await clear_outbox(conn)
    await ctx.inbox.reset()
    await seed(conn, count=count, prefix=prefix)
    inbox_cpu = ctx.inbox.cpu_s()
    pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
    result, cpu_s, _rss = await run_python(["bench.baseline", dsn], timeout_s=240)
    pg_cpu_s = pg_cpu.stop()
    delivered = result["delivered"]
    return {
        "delivered": delivered,
        "elapsed_s": round(result["elapsed_s"], 3),
        "per_s": delivered / result["elapsed_s"],
        "loop_cpu_us_per_reply": cpu_s / delivered * 1e6,
        # Includes the few statements of the idle daemon (heartbeat) meanwhile.
        "postgres_cpu_us_per_reply": pg_cpu_s / delivered * 1e6,
        "inbox_cpu_us_per_reply": (ctx.inbox.cpu_s() - inbox_cpu) / delivered * 1e6,
        **inbox_counts(await ctx.inbox.stats()),
    }


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate product and baseline rounds; report the medians and their ratio."""
    count = 2_000 if ctx.quick else 20_000
    rounds = 1 if ctx.quick else 3
    dsn = await fresh_database(ctx.server, "drain")
    conn = await asyncpg.connect(dsn)
    daemon = DaemonProcess(dsn, ctx.tmp / "drain-daemon.log")
    products: list[dict[str, Any]] = []
    baselines: list[dict[str, Any]] = []
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        await ctx.inbox.configure()
        daemon.start()
        await daemon.wait_listening(conn)
        # One small warm-up drain: connections, prepared statements, imports.
        await product_round(ctx, conn, daemon, count=200, prefix="warm")
        for index in range(rounds):
            products.append(
                await product_round(
                    ctx,
                    conn,
                    daemon,
                    count=count,
                    prefix=f"r{index}",
                    profile_name="drain_profile" if index == rounds - 1 else None,
                )
            )
            baselines.append(await baseline_round(ctx, conn, dsn, count=count, prefix=f"r{index}"))
        peak_rss = daemon.sampler.peak_rss if daemon.sampler else 0
    finally:
        daemon.stop()
        await conn.close()
    product = statistics.median(r["per_s"] for r in products)
    baseline = statistics.median(r["per_s"] for r in baselines)
    figure = Figure(
        name=f"drain throughput ({count:,} replies, {AGENTS} recipients)",
        value=product,
        unit="replies/s",
        baseline="baseline loop (bench/baseline.py)",
        baseline_value=baseline,
        ratio=ratio(product, baseline),
        ratio_note="birddog run / baseline",
        target=f">= {TARGET}",
        met=ratio(product, baseline) >= TARGET,
    )
    details = {
        "replies": count,
        "agents": AGENTS,
        "rounds": rounds,
        "product_rounds": products,
        "baseline_rounds": baselines,
        "daemon_peak_rss_mb": round(peak_rss / 2**20, 1),
    }
    return [figure], details
