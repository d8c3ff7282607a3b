"""Slow recipients: 10% of inboxes take 5 s to answer; how fast do the other 90% drain?

20,000 due replies (quick: 2,000) for 50 recipients, interleaved in key order; 5 of the
recipients (``agent-000`` .. ``agent-004``, 10% of the rows) answer after 5 s. The rate
that matters is the fast recipients' replies per second: from the wake to the last fast
receipt, or, if the window (60 s; quick: 20 s) closes first, the fast receipts so far
over the window. Baseline: the same run with every inbox fast, same daemon, same rows.
Target: with slow recipients, the fast 90% drain at most 10% slower (ratio >= 0.9).
"""

from __future__ import annotations

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
    clear_outbox,
    fresh_database,
    others_rate,
    ratio,
)

AGENTS = 50
SLOW = [f"agent-{i:03d}" for i in range(5)]
DELAY_S = 5.0
TARGET = 0.9


async def fast_rate(
    ctx: Context,
    conn: asyncpg.Connection,
    daemon: DaemonProcess,
    *,
    count: int,
    prefix: str,
    window_s: float,
) -> dict[str, Any]:
    """Seed, wake, and count the fast recipients' receipts until all are in or the window ends."""
    await clear_outbox(conn)
    await ctx.inbox.reset()
    await drain.seed(conn, count=count, prefix=prefix)
    pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
    started = await drain.wake(conn)
    fast = await others_rate(conn, daemon, excluded=SLOW, started=started, window_s=window_s)
    slow_done = await conn.fetchval(
        "SELECT count(*) FROM birddog.receipts WHERE recipient_agent_id = ANY($1::text[])", SLOW
    )
    return {
        "fast_rows": fast["rows"],
        "fast_delivered": fast["delivered"],
        "slow_delivered": slow_done,
        "all_fast_done": fast["all_done"],
        "elapsed_s": fast["elapsed_s"],
        "fast_per_s": fast["per_s"],
        "postgres_cpu_s": round(pg_cpu.stop(), 2),
    }


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """All fast, then 10% slow: the fast recipients' rates and their ratio."""
    count = 2_000 if ctx.quick else 20_000
    window_s = 20.0 if ctx.quick else 60.0
    dsn = await fresh_database(ctx.server, "slow")
    conn = await asyncpg.connect(dsn)
    daemon = DaemonProcess(dsn, ctx.tmp / "slow-daemon.log")
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        await ctx.inbox.configure()
        daemon.start()
        await daemon.wait_listening(conn)
        without = await fast_rate(ctx, conn, daemon, count=count, prefix="fast", window_s=window_s)
        await ctx.inbox.configure(slow=SLOW, delay_s=DELAY_S)
        with_slow = await fast_rate(
            ctx, conn, daemon, count=count, prefix="slow", window_s=window_s
        )
    finally:
        await ctx.inbox.configure()
        daemon.stop()
        await conn.close()
    value, baseline = with_slow["fast_per_s"], without["fast_per_s"]
    figure = Figure(
        name=f"fast 90% drain rate, 10% of inboxes answer in {DELAY_S:g} s",
        value=value,
        unit="replies/s",
        baseline="same drain, every inbox fast",
        baseline_value=baseline,
        ratio=ratio(value, baseline),
        ratio_note="with slow / without",
        target=f">= {TARGET}",
        met=ratio(value, baseline) >= TARGET,
    )
    details = {
        "replies": count,
        "slow_agents": SLOW,
        "delay_s": DELAY_S,
        "window_s": window_s,
        "without_slow": without,
        "with_slow": with_slow,
    }
    return [figure], details
