"""Hanging recipients: 40 of 50 inboxes never answer; do the other 10 still drain?

50,000 due replies (quick: 2,000) for 50 recipients, interleaved in key order. In the
measured round, ``agent-000`` .. ``agent-039`` hang: their inbox answers only after
``HANG_S``, longer than the post timeout, so each of their posts ends in a timeout. The
figure is the 10 healthy recipients' replies per second, from the wake to their last
receipt. The baseline is the same healthy rows drained alone (the same seed with the 40
others' rows removed): the healthy recipients' rate when nobody hangs. A fresh daemon
runs each round, so neither starts knowing the recipients; three alternating rounds
(quick: one), medians. Target: with hanging ones, the
healthy keep >= 0.8x. Without slow start, 40 silent recipients at 16 posts each would take
the whole window (256) before their first timeout.
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
    others_rate,
    ratio,
)

AGENTS = 50
HANGING = agent_names(40)
HANG_S = 60.0
POST_TIMEOUT_S = 30.0
TARGET = 0.8
ROUNDS = 3


async def healthy_rate(
    ctx: Context,
    dsn: str,
    conn: asyncpg.Connection,
    *,
    count: int,
    prefix: str,
    deadline_s: float,
    healthy_only: bool,
) -> dict[str, Any]:
    """Start a fresh daemon on an empty outbox, seed, wake it, time the healthy receipts.

    The rows go in once the daemon sleeps: a daemon started on them drains from its start,
    before the wake that starts the clock (in quick mode it had delivered every healthy
    row before, and the rate came out negative).
    """
    await clear_outbox(conn)
    await ctx.inbox.reset()
    daemon = DaemonProcess(
        dsn,
        ctx.tmp / f"hanging-{'alone' if healthy_only else 'hanging'}.log",
        env={"BIRDDOG_POST_TIMEOUT_S": str(POST_TIMEOUT_S)},
    )
    daemon.start()
    try:
        await daemon.wait_listening(conn)
        await drain.seed(conn, count=count, prefix=prefix, agents=AGENTS)
        if healthy_only:
            await conn.execute(
                "DELETE FROM birddog.outbox WHERE recipient_agent_id = ANY($1::text[])", HANGING
            )
        pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
        started = await drain.wake(conn)
        healthy = await others_rate(
            conn, daemon, excluded=HANGING, started=started, window_s=deadline_s
        )
        in_flight = await conn.fetchval(
            "SELECT count(*) FROM birddog.outbox WHERE lease_expires_at > now()"
        )
        pg_cpu_s = pg_cpu.stop()
    finally:
        daemon.stop()
    return {
        "healthy_rows": healthy["rows"],
        "healthy_delivered": healthy["delivered"],
        "all_healthy_done": healthy["all_done"],
        "elapsed_s": healthy["elapsed_s"],
        "healthy_per_s": healthy["per_s"],
        "rows_leased_at_the_end": in_flight,
        "postgres_cpu_s": round(pg_cpu_s, 2),
    }


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """All answering, then 40 of 50 hanging, alternating: the healthy 10's rates (medians)."""
    count = 2_000 if ctx.quick else 50_000
    rounds = 1 if ctx.quick else ROUNDS
    deadline_s = 20.0 if ctx.quick else 60.0
    dsn = await fresh_database(ctx.server, "hanging")
    conn = await asyncpg.connect(dsn)
    alone_rounds: list[dict[str, Any]] = []
    hanging_rounds: list[dict[str, Any]] = []
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        for _ in range(rounds):
            await ctx.inbox.configure()
            alone_rounds.append(
                await healthy_rate(
                    ctx,
                    dsn,
                    conn,
                    count=count,
                    prefix="r",
                    deadline_s=deadline_s,
                    healthy_only=True,
                )
            )
            await ctx.inbox.configure(slow=HANGING, delay_s=HANG_S)
            hanging_rounds.append(
                await healthy_rate(
                    ctx,
                    dsn,
                    conn,
                    count=count,
                    prefix="r",
                    deadline_s=deadline_s,
                    healthy_only=False,
                )
            )
    finally:
        await ctx.inbox.configure()
        await conn.close()
    value = statistics.median(r["healthy_per_s"] for r in hanging_rounds)
    baseline = statistics.median(r["healthy_per_s"] for r in alone_rounds)
    figure = Figure(
        name=f"healthy 10 of 50, 40 inboxes hang past the {POST_TIMEOUT_S:g} s timeout",
        value=value,
        unit="replies/s",
        baseline="the same healthy rows, nobody hanging",
        baseline_value=baseline,
        ratio=ratio(value, baseline),
        ratio_note="with hanging / without (medians of alternating rounds)",
        target=f">= {TARGET}",
        met=ratio(value, baseline) >= TARGET,
    )
    details = {
        "replies": count,
        "rounds": rounds,
        "hanging_agents": len(HANGING),
        "hang_s": HANG_S,
        "post_timeout_s": POST_TIMEOUT_S,
        "healthy_alone_rounds": alone_rounds,
        "hanging_rounds": hanging_rounds,
    }
    return [figure], details
