"""Batched delivery: the same replies posted one per POST, then up to 100 per POST.

20,000 due replies (quick: 2,000) for one busy recipient (a coordinator that hears every
answer: the agent bus's "one batched turn per target"); one ``birddog run`` daemon drains
them twice per round: with the route at ``batch_size`` 1 (one reply per signed POST: the
single-reply rate, the same-run reference) and at ``batch_size`` 100 (``birddog route
update AGENT --batch 100``: up to 100 replies in one signed POST, acknowledged with
``{"accepted": true}``). Rounds alternate; medians are reported. Target: a batching
recipient drains at >= 5x the single-reply rate.

``BENCH_BATCH_COUNT`` and ``BENCH_BATCH_ROUNDS`` change the size and the rounds.
``BENCH_BATCH_BEFORE=<dir>`` prices a change in the same run: each round then runs both
builds in turn, a daemon with ``PYTHONPATH=<dir>`` (a tree of the code before the change,
its ``src``) and this tree's, one at a time on the same database and inbox; the figure is
this tree's, the other build's rounds and medians are in the details (``before``).
Several trees, comma-separated and labelled (``main=<dir>,claims=<dir>``), run in that
order before this one, each reported under its label.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import asyncpg

from bench import drain
from bench.harness import (
    Context,
    DaemonProcess,
    Figure,
    add_routes,
    agent_names,
    fresh_database,
    ratio,
)

BATCH = 100
AGENTS = 1
TARGET = 5.0


async def set_batch(conn: asyncpg.Connection, size: int) -> None:
    """Every route's batch size, as ``route update --batch`` writes it."""
    await conn.execute("UPDATE birddog.routes SET batch_size = $1", size)


def medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """The medians of the figures each round of one kind reports."""
    names = [name for name, value in rounds[0].items() if isinstance(value, int | float)]
    return {name: round(statistics.median(r[name] for r in rounds), 3) for name in names}


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate single and batched rounds (and builds); the medians and their ratio."""
    count = int(os.environ.get("BENCH_BATCH_COUNT") or (2_000 if ctx.quick else 20_000))
    rounds = int(os.environ.get("BENCH_BATCH_ROUNDS") or (1 if ctx.quick else 3))
    before = os.environ.get("BENCH_BATCH_BEFORE", "")
    builds: dict[str, dict[str, str]] = {}
    for item in filter(None, before.split(",")):
        label, _, tree = item.rpartition("=")
        builds[label or "before"] = {"PYTHONPATH": tree}
    builds["after"] = {}
    dsn = await fresh_database(ctx.server, "batch")
    conn = await asyncpg.connect(dsn)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        build: {"single": [], "batch": []} for build in builds
    }
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        await ctx.inbox.configure()
        for index in range(rounds):
            for build, env in builds.items():
                daemon = DaemonProcess(dsn, ctx.tmp / f"batch-{build}-daemon.log", env=env)
                try:
                    daemon.start()
                    await daemon.wait_listening(conn)
                    await set_batch(conn, 1)
                    await drain.product_round(
                        ctx, conn, daemon, count=200, prefix=f"w{build}{index}", agents=AGENTS
                    )
                    for kind, size in (("single", 1), ("batch", BATCH)):
                        await set_batch(conn, size)
                        results[build][kind].append(
                            await drain.product_round(
                                ctx,
                                conn,
                                daemon,
                                count=count,
                                prefix=f"{kind[0]}{build}{index}",
                                agents=AGENTS,
                                # --profile: py-spy on this tree's last batched round.
                                profile_name="batch_profile"
                                if (build, kind, index) == ("after", "batch", rounds - 1)
                                else None,
                            )
                        )
                finally:
                    daemon.stop()
    finally:
        await conn.close()
    singles, batches = results["after"]["single"], results["after"]["batch"]
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
    details: dict[str, Any] = {
        "replies": count,
        "agents": AGENTS,
        "batch_size": BATCH,
        "rounds": rounds,
        "single_median": medians(singles),
        "batch_median": medians(batches),
        "single_rounds": singles,
        "batch_rounds": batches,
    }
    for build in builds:
        if build == "after":
            continue
        old_singles, old_batches = results[build]["single"], results[build]["batch"]
        details[build] = {
            "ratio": ratio(
                statistics.median(r["per_s"] for r in old_batches),
                statistics.median(r["per_s"] for r in old_singles),
            ),
            "single_median": medians(old_singles),
            "batch_median": medians(old_batches),
            "single_rounds": old_singles,
            "batch_rounds": old_batches,
        }
    return [figure], details
