"""Concentrated traffic: every reply owed to one busy recipient (a coordinator).

20,000 due replies (quick: 2,000) all to ``agent-000``, drained by one ``birddog run``,
against the same number spread over 50 recipients, same daemon, same run, rounds
alternating; medians. The clock runs from the wake's commit to the last receipt's
``delivered_at`` (as ``drain``). A recipient at its cap must never make the daemon idle
while its own posts finish: target, concentrated / spread >= 0.8.
"""

from __future__ import annotations

import statistics
from typing import Any

import asyncpg

from bench import drain
from bench.harness import Context, DaemonProcess, Figure, ratio

SPREAD = 50
TARGET = 0.8


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate one-recipient and 50-recipient rounds; report the medians and their ratio."""
    count = 2_000 if ctx.quick else 20_000
    rounds = 1 if ctx.quick else 3

    def over(agents: int, prefix: str) -> drain.Round:
        async def one_round(
            conn: asyncpg.Connection, daemon: DaemonProcess, index: int
        ) -> dict[str, Any]:
            return await drain.product_round(
                ctx, conn, daemon, count=count, prefix=f"{prefix}{index}", agents=agents
            )

        return one_round

    one, spread = await drain.alternating_rounds(
        ctx,
        "concentrated",
        agents=SPREAD,
        rounds=rounds,
        first=over(1, "one"),
        second=over(SPREAD, "all"),
    )
    value = statistics.median(r["per_s"] for r in one)
    baseline = statistics.median(r["per_s"] for r in spread)
    figure = Figure(
        name=f"one busy recipient ({count:,} replies)",
        value=value,
        unit="replies/s",
        baseline=f"same replies over {SPREAD} recipients",
        baseline_value=baseline,
        ratio=ratio(value, baseline),
        ratio_note="one recipient / spread",
        target=f">= {TARGET}",
        met=ratio(value, baseline) >= TARGET,
    )
    return [figure], {"replies": count, "rounds": rounds, "one": one, "spread": spread}
