"""Batched delivery: the same replies posted one per POST, then up to 100 per POST.

20,000 due replies (quick: 2,000) for one busy recipient (a coordinator that hears every
answer: the agent bus's "one batched turn per target"); one ``birddog run`` daemon drains
them twice per round: with the route at ``batch_size`` 1 (one reply per signed POST: the
single-reply rate, the same-run reference) and at ``batch_size`` 100 (``birddog route
update AGENT --batch 100``: up to 100 replies in one signed POST, acknowledged with
``{"accepted": true}``). Rounds alternate; medians are reported. Target: a batching
recipient drains at >= 5x the single-reply rate.
"""

from __future__ import annotations

import statistics
from typing import Any

import asyncpg

from bench import drain
from bench.harness import Context, DaemonProcess, Figure, ratio

BATCH = 100
AGENTS = 1
TARGET = 5.0


async def set_batch(conn: asyncpg.Connection, size: int) -> None:
    """Every route's batch size, as ``route update --batch`` writes it."""
    await conn.execute("UPDATE birddog.routes SET batch_size = $1", size)


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate single and batched rounds on one daemon; the medians and their ratio."""
    count = 2_000 if ctx.quick else 20_000
    rounds = 1 if ctx.quick else 3

    def at_batch(size: int, prefix: str) -> drain.Round:
        async def one_round(
            conn: asyncpg.Connection, daemon: DaemonProcess, index: int
        ) -> dict[str, Any]:
            await set_batch(conn, size)
            return await drain.product_round(
                ctx, conn, daemon, count=count, prefix=f"{prefix}{index}", agents=AGENTS
            )

        return one_round

    singles, batches = await drain.alternating_rounds(
        ctx,
        "batch",
        agents=AGENTS,
        rounds=rounds,
        first=at_batch(1, "s"),
        second=at_batch(BATCH, "b"),
    )
    single = statistics.median(r["per_s"] for r in singles)
    batched = statistics.median(r["per_s"] for r in batches)
    figure = Figure(
        name=f"batched delivery, {BATCH} per POST ({count:,} replies, one recipient)",
        value=batched,
        unit="replies/s",
        baseline="the same replies one per POST, same daemon",
        baseline_value=single,
        ratio=ratio(batched, single),
        ratio_note="batched / single",
        target=f">= {TARGET:g}",
        met=ratio(batched, single) >= TARGET,
    )
    details = {
        "replies": count,
        "agents": AGENTS,
        "batch_size": BATCH,
        "rounds": rounds,
        "single_rounds": singles,
        "batch_rounds": batches,
    }
    return [figure], details
