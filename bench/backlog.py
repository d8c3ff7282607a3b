"""Scale with backlog: claim latency, drain rate and daemon memory with 1,000,000 rows waiting.

Two databases, the same 10,000 due rows in each (quick: 2,000); the second also holds
1,000,000 rows (quick: 100,000) pending in the future (retries due in 1 to 23 hours),
their keys interleaved with the due ones (md5-shaped mail keys). Both are seeded with
``generate_series`` and then ``VACUUM ANALYZE``d, as a steady-state table would be.

In each:

1. Claim latency, page 64, 60 pages: the daemon's claim, ``PostgresOutbox.claim_due``
   (earliest due first), and ``claim_page`` (key order after a cursor, the spec's drain,
   ``MailRoom.drain_outbox``); median and p99.
2. The plans: ``EXPLAIN (ANALYZE, BUFFERS)`` of both claims (rolled back), saved to
   ``claim_plan.txt`` next to the results; the buffers it touched are a measure of its
   work that the machine's load does not move.
3. The daemon: a fresh ``birddog run`` drains the due rows; rate, and its peak RSS
   (psutil, sampled every 50 ms) from start to the last receipt.

Ratios: backlog / empty for claim latency (target <= 2) and drain rate; peak RSS is
compared with the 150 MB target and between the two sizes (flat).
"""

from __future__ import annotations

import re
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench.harness import (
    Context,
    DaemonProcess,
    Figure,
    add_routes,
    agent_names,
    fresh_database,
    percentile,
    ratio,
    seed_outbox,
    wait_until,
)
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import create_pool
from birddog.postgres.sql import queries

AGENTS = 50
PAGE = 64
TARGET_RATIO = 2.0
TARGET_RSS_MB = 150.0
CHUNK = 250_000


async def seed(conn: asyncpg.Connection, *, due: int, backlog: int) -> float:
    """Seed ``backlog`` future rows and ``due`` due rows; the seconds it took."""
    started = time.perf_counter()
    now = datetime.now(UTC)
    for first in range(0, backlog, CHUNK):
        await seed_outbox(
            conn,
            count=min(CHUNK, backlog - first),
            agents=AGENTS,
            prefix="mail",
            start=first,
            due_in_s=3600,
            due_spread_s=22 * 3600,
            at=now,
        )
    # Same prefix, later sequence numbers: md5 keys interleave the due rows with the rest.
    await seed_outbox(conn, count=due, agents=AGENTS, prefix="mail", start=backlog, at=now)
    await conn.execute("VACUUM ANALYZE birddog.outbox")
    return time.perf_counter() - started


async def claim_latencies(dsn: str, pages: int, *, order: str) -> list[float]:
    """Claim ``pages`` pages (ms each), then release every lease.

    ``order`` is ``due`` for the daemon's claim (``claim_due``: earliest due first) or
    ``key`` for ``claim_page`` (key order after a cursor, as ``MailRoom.drain_outbox``).
    """
    pool = await create_pool(dsn, min_size=1, max_size=2)
    outbox = PostgresOutbox(pool)
    latencies = []
    cursor: str | None = None
    try:
        for _ in range(pages):
            started = time.perf_counter()
            if order == "due":
                await outbox.claim_due(limit=PAGE, now=datetime.now(UTC), lease_s=60)
            else:
                page = await outbox.claim_page(
                    after_key=cursor, limit=PAGE, now=datetime.now(UTC), lease_s=60
                )
                cursor = page.last_key if page.more else None
            latencies.append((time.perf_counter() - started) * 1000)
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE birddog.outbox SET claim_token = NULL, lease_expires_at = NULL "
                "WHERE claim_token IS NOT NULL"
            )
    finally:
        await pool.close()
    return latencies


async def explain(dsn: str, name: str, args: list[Any]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a claim statement, rolled back."""
    conn = await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_custom_plan"})
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + queries[name], *args)
        finally:
            await tx.rollback()
    finally:
        await conn.close()
    return "\n".join(row[0] for row in rows)


async def explain_claims(dsn: str, middle_key: str) -> dict[str, str]:
    """Plans of the daemon's claim and of the key-order claim (first and a middle page)."""
    now = datetime.now(UTC)
    plans = {
        "key_first": await explain(
            dsn, "outbox_claim_page", ["", now, PAGE, uuid.uuid4(), now, []]
        ),
        "key_middle": await explain(
            dsn, "outbox_claim_page", [middle_key, now, PAGE, uuid.uuid4(), now, []]
        ),
    }
    if "outbox_claim_due" in queries:
        # As the daemon claims a page: a quarter latest-due first, the rest earliest-due.
        newest = PAGE // 4
        plans["due"] = await explain(
            dsn, "outbox_claim_due", [now, PAGE - newest, uuid.uuid4(), now, [], newest]
        )
    return plans


def _ms(latencies: list[float]) -> dict[str, float]:
    # The first claim pays for a new connection's first plan; keep it out.
    steady = latencies[1:]
    return {
        "median": statistics.median(steady),
        "p99": percentile(steady, 99),
        "max": max(steady),
        "pages": len(steady),
    }


def plan_buffers(plan: str) -> int:
    """Shared buffers the whole statement touched (hit + read), from its first Buffers line."""
    match = re.search(r"Buffers: shared((?: \w+=\d+)+)", plan)
    if match is None:
        return 0
    counts = dict(part.split("=") for part in match.group(1).split())
    return int(counts.get("hit", 0)) + int(counts.get("read", 0))


async def scenario(ctx: Context, name: str, *, due: int, backlog: int) -> dict[str, Any]:
    """Seed, time the claims, explain, then let a fresh daemon drain the due rows."""
    dsn = await fresh_database(ctx.server, f"backlog_{name}")
    conn = await asyncpg.connect(dsn)
    result: dict[str, Any] = {"due": due, "backlog": backlog}
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        result["seed_s"] = round(await seed(conn, due=due, backlog=backlog), 1)
        result["table_mb"] = round(
            await conn.fetchval("SELECT pg_total_relation_size('birddog.outbox')") / 2**20, 1
        )
        pages = min(due // PAGE, 60)
        result["claim_ms"] = {"key": _ms(await claim_latencies(dsn, pages, order="key"))}
        if hasattr(PostgresOutbox, "claim_due"):
            result["claim_ms"]["due"] = _ms(await claim_latencies(dsn, pages, order="due"))
        middle = await conn.fetchval(
            "SELECT key FROM birddog.outbox WHERE due_at <= now() ORDER BY key OFFSET $1 LIMIT 1",
            due // 2,
        )
        result["plans"] = await explain_claims(dsn, middle or "")
        result["claim_buffers"] = {
            name: plan_buffers(plan) for name, plan in result["plans"].items()
        }
        await ctx.inbox.reset()
        daemon = DaemonProcess(dsn, ctx.tmp / f"backlog-{name}.log")
        daemon.start()
        try:
            # The due rows are there already, so the daemon drains from its first loop.
            drained = await drain_existing(ctx, conn, daemon, due=due)
            assert daemon.sampler is not None
            result["daemon"] = {
                **drained,
                "peak_rss_mb": round(daemon.sampler.peak_rss / 2**20, 1),
                "rss_at_end_mb": round(daemon.sampler.rss() / 2**20, 1),
            }
        finally:
            daemon.stop()
    finally:
        await conn.close()
    return result


async def drain_existing(
    ctx: Context, conn: asyncpg.Connection, daemon: DaemonProcess, *, due: int
) -> dict[str, Any]:
    """Wait for the daemon to drain the ``due`` rows; rate from its first to last receipt."""

    async def all_drained() -> bool:
        daemon.check_alive()
        return bool(await conn.fetchval("SELECT count(*) FROM birddog.receipts") >= due)

    await wait_until(all_drained, timeout_s=240, interval_s=0.2, what="the drain")
    first, last = await conn.fetchrow(
        "SELECT min(delivered_at), max(delivered_at) FROM birddog.receipts"
    )
    # Timed from the first receipt, so the first page's posts are not in the window:
    # count one page fewer.
    elapsed = (last - first).total_seconds()
    return {
        "delivered": due,
        "elapsed_s": round(elapsed, 3),
        "per_s": (due - PAGE) / elapsed if elapsed > 0 else float("nan"),
        "inbox_posts": (await ctx.inbox.stats())["posts"],
    }


def _claim_figures(
    empty: dict[str, Any], full: dict[str, Any], *, order: str, label: str, backlog: int
) -> list[Figure]:
    """Median claim latency (with the target for the daemon's claim) and plan buffers."""
    plan = "due" if order == "due" else "key_first"
    median_empty = empty["claim_ms"][order]["median"]
    median_full = full["claim_ms"][order]["median"]
    target = order == "due" or "due" not in empty["claim_ms"]
    return [
        Figure(
            name=f"{label} latency, median, {backlog:,}-row backlog",
            value=median_full,
            unit="ms",
            baseline=f"same claim, {empty['due']:,} due rows, no backlog",
            baseline_value=median_empty,
            ratio=ratio(median_full, median_empty),
            ratio_note="backlog / empty",
            target=f"<= {TARGET_RATIO:g}x" if target else "",
            met=ratio(median_full, median_empty) <= TARGET_RATIO if target else None,
        ),
        Figure(
            name=f"{label} buffers (EXPLAIN), {backlog:,}-row backlog",
            value=full["claim_buffers"][plan],
            unit="buffers",
            baseline="same claim, no backlog",
            baseline_value=empty["claim_buffers"][plan],
            ratio=ratio(full["claim_buffers"][plan], empty["claim_buffers"][plan]),
            ratio_note="backlog / empty (load-independent)",
        ),
    ]


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Empty table vs backlog: claim latency, plans, drain rate, daemon RSS."""
    due = 2_000 if ctx.quick else 10_000
    backlog = 100_000 if ctx.quick else 1_000_000
    empty = await scenario(ctx, "empty", due=due, backlog=0)
    full = await scenario(ctx, "full", due=due, backlog=backlog)
    plan_path = ctx.results / "claim_plan.txt"
    sections = []
    titles = {
        "due": "outbox_claim_due (the daemon's claim, earliest due first)",
        "key_first": "outbox_claim_page (key order, MailRoom.drain_outbox), first page",
        "key_middle": "outbox_claim_page, a page from the middle of the due rows",
    }
    for name, title in titles.items():
        for label, result in (("no backlog", empty), (f"{backlog:,} future rows", full)):
            if name in result["plans"]:
                sections.append(f"-- {title}; {due:,} due rows, {label}\n{result['plans'][name]}")
    plan_path.write_text("\n\n".join(sections) + "\n")
    rate_empty, rate_full = empty["daemon"]["per_s"], full["daemon"]["per_s"]
    rss_empty, rss_full = empty["daemon"]["peak_rss_mb"], full["daemon"]["peak_rss_mb"]
    figures = []
    if "due" in full["claim_ms"]:
        figures += _claim_figures(empty, full, order="due", label="claim_due", backlog=backlog)
    figures += _claim_figures(empty, full, order="key", label="claim_page", backlog=backlog)
    figures += [
        Figure(
            name=f"drain rate of {due:,} due rows, {backlog:,}-row backlog",
            value=rate_full,
            unit="replies/s",
            baseline="same drain, no backlog",
            baseline_value=rate_empty,
            ratio=ratio(rate_full, rate_empty),
            ratio_note="backlog / empty",
        ),
        Figure(
            name=f"daemon peak RSS, {due + backlog:,} rows",
            value=rss_full,
            unit="MB",
            baseline=f"daemon peak RSS, {due:,} rows",
            baseline_value=rss_empty,
            ratio=ratio(rss_full, rss_empty),
            ratio_note="large / small",
            target=f"< {TARGET_RSS_MB:g} MB, flat",
            met=rss_full < TARGET_RSS_MB and rss_full <= rss_empty * 1.1,
        ),
    ]
    for result in (empty, full):
        result.pop("plans")
    # Relative to the checkout: a result names no path of the machine it ran on.
    details = {"empty": empty, "backlog": full, "plan_file": plan_path.name}
    return figures, details
