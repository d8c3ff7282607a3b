"""Scale-out: one ``birddog run`` daemon against two on the same database.

20,000 due replies (quick: 2,000) for 50 recipients, as in ``drain``. Each round seeds the
rows, wakes the daemons (1, then 2 processes, each started idle) and times from the wake
to the last receipt. Reported: replies/s, the daemons' CPU per reply (summed), and
duplicates (posts the inboxes saw beyond one per reply: the lease and ``SKIP LOCKED``
should make it 0 in a run without crashes).

The machine has 2 cores shared by PostgreSQL, the inbox process and the daemons, so a
second daemon cannot double the rate here: it adds a process competing for the same two
cores. What it shows is that the work splits without duplicates and what the CPU per
reply becomes; on a machine with cores to spare the second daemon adds its own.
"""

from __future__ import annotations

import statistics
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
    ratio,
    wait_until,
)


async def round_with(
    ctx: Context, conn: asyncpg.Connection, daemons: list[DaemonProcess], *, count: int, prefix: str
) -> dict[str, Any]:
    """Seed, wake, wait for every receipt; rate, CPU per reply, duplicates."""
    await clear_outbox(conn)
    await ctx.inbox.reset()
    await drain.seed(conn, count=count, prefix=prefix)
    cpu = [daemon.sampler.cpu_s() for daemon in daemons if daemon.sampler is not None]
    inbox_cpu = ctx.inbox.cpu_s()
    pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
    started = await drain.wake(conn)

    async def done() -> bool:
        for daemon in daemons:
            daemon.check_alive()
        delivered = await conn.fetchval("SELECT count(*) FROM birddog.receipts")
        return bool(delivered >= count)

    await wait_until(done, timeout_s=240, interval_s=0.2, what="the daemons' drain")
    last = await conn.fetchval("SELECT max(delivered_at) FROM birddog.receipts")
    elapsed = last.timestamp() - started
    pg_cpu_s = pg_cpu.stop()
    used = [
        daemon.sampler.cpu_s() - before
        for daemon, before in zip(daemons, cpu, strict=True)
        if daemon.sampler is not None
    ]
    stats = await ctx.inbox.stats()
    return {
        "daemons": len(daemons),
        "delivered": count,
        "elapsed_s": round(elapsed, 3),
        "per_s": count / elapsed,
        "daemon_cpu_us_per_reply": sum(used) / count * 1e6,
        "daemon_cpu_share": [round(u / sum(used), 3) for u in used] if sum(used) else [],
        "postgres_cpu_us_per_reply": pg_cpu_s / count * 1e6,
        "inbox_cpu_us_per_reply": (ctx.inbox.cpu_s() - inbox_cpu) / count * 1e6,
        "inbox_posts": stats["posts"],
        "duplicates": stats["posts"] - count,
    }


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate rounds with one and with two daemons; the medians and their ratio."""
    count = 2_000 if ctx.quick else 20_000
    rounds = 1 if ctx.quick else 3
    dsn = await fresh_database(ctx.server, "scale")
    conn = await asyncpg.connect(dsn)
    pair = [DaemonProcess(dsn, ctx.tmp / f"scale-daemon-{i}.log") for i in range(2)]
    ones: list[dict[str, Any]] = []
    twos: list[dict[str, Any]] = []
    try:
        await add_routes(conn, agent_names(drain.AGENTS), ctx.inbox)
        await ctx.inbox.configure()
        for daemon in pair:
            daemon.start()
            await daemon.wait_listening(conn)
        # Warm both; the second then sits out the one-daemon rounds (stopped, restarted).
        await round_with(ctx, conn, pair, count=400, prefix="warm")
        for index in range(rounds):
            pair[1].stop()
            ones.append(await round_with(ctx, conn, pair[:1], count=count, prefix=f"o{index}"))
            pair[1] = DaemonProcess(dsn, ctx.tmp / f"scale-daemon-1-{index}.log")
            pair[1].start()
            await pair[1].wait_listening(conn)
            await round_with(ctx, conn, pair, count=200, prefix=f"w{index}")
            twos.append(await round_with(ctx, conn, pair, count=count, prefix=f"t{index}"))
    finally:
        for daemon in pair:
            daemon.stop()
        await conn.close()
    one = statistics.median(r["per_s"] for r in ones)
    two = statistics.median(r["per_s"] for r in twos)
    duplicates = sum(r["duplicates"] for r in ones + twos)
    figures = [
        Figure(
            name=f"two daemons on one database ({count:,} replies, {drain.AGENTS} recipients)",
            value=two,
            unit="replies/s",
            baseline="one daemon, same rows",
            baseline_value=one,
            ratio=ratio(two, one),
            ratio_note="2 daemons / 1 (2 cores shared by all processes)",
            target="0 duplicates",
            met=duplicates == 0,
        ),
        Figure(
            name="daemon CPU per reply, two daemons (summed)",
            value=statistics.median(r["daemon_cpu_us_per_reply"] for r in twos),
            unit="us",
            baseline="one daemon",
            baseline_value=statistics.median(r["daemon_cpu_us_per_reply"] for r in ones),
            ratio=ratio(
                statistics.median(r["daemon_cpu_us_per_reply"] for r in twos),
                statistics.median(r["daemon_cpu_us_per_reply"] for r in ones),
            ),
            ratio_note="2 daemons / 1",
        ),
    ]
    details = {
        "replies": count,
        "agents": drain.AGENTS,
        "rounds": rounds,
        "duplicates": duplicates,
        "one_daemon_rounds": ones,
        "two_daemon_rounds": twos,
    }
    return figures, details
