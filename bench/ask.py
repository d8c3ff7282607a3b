"""Ask: from an ask to its answer, through the real worker, daemon and mailbox; DBOS beside it.

1,000 asks (quick: 50; ``BENCH_ASK_COUNT`` sets another number) from 1, from 50 and
from 500 concurrent askers (quick: 1 and 10)
to an agent whose handler answers at once: a ``birddog worker`` with a Python handler
(``bench/ask_agent.py``), then one with ``--command cat`` (one process per job; full mode
only). Each asker is an agent of its own (``asker-<i>``, a mailbox route) asking its own
session of the agent (one turn per session), its questions in turn, each with
:meth:`birddog.Asking.ask` through one :func:`birddog.open_asking` in the bench process
(pool of 10; every wait shares its one LISTEN). The worker and a ``birddog run`` daemon
are child processes on the bench's database. The clock runs from the call of ``ask`` to
its return (the answer read, checked and acknowledged); asks/s from the first ask's
start to the last one's end. Before each case every asker asks once, untimed.

Where an ask's time goes (``stages``): the job's ``created_at`` (its insert), the claim's
``started_at`` (the worker), ``settled_at`` (the worker's settle), the mailbox row's
``delivered_at`` (the daemon's store), each from the writing process's clock, and the
asker's own start and end.

The peer, in the same run on the same server: DBOS (``bench/peer_dbos.py``), one
responder workflow per asker that ``recv``s and ``send``s back, in one process, and one
asker workflow per asker in another, ``send`` then ``recv`` with a timeout. Its
version goes into the results.

The floors, measured in the same run on the same server: a bare ``INSERT`` committed
(one row per transaction, fsync on; an ask commits six times in turn: the job, its
claim, its settlement, the daemon's claim, the mailbox row, the ack) and a bare
``NOTIFY`` round trip between two connections (an ask waits on three: the worker's, the
daemon's and the asker's wake).

Targets: p99 <= 20 ms for one asker with the Python handler; at 50 askers at least
DBOS's rate.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import asyncpg

from bench import wake
from bench.harness import (
    Context,
    DaemonProcess,
    Figure,
    TreeCpu,
    drop_database,
    fresh_database,
    percentile,
    process_cpu_s,
    ratio,
    run_python,
    spawn_python,
    stop_pid,
)
from birddog import open_asking
from birddog.clock import SystemClock
from birddog.postgres.pool import create_pool
from birddog.postgres.routes import PostgresRoutes

AGENT = "bench-answer"
"""The agent asked (a mailbox route, so BirdDog knows it)."""

ASKERS = (1, 50, 500)
QUICK_ASKERS = (1, 10)
HANDLERS: dict[str, list[str]] = {
    "python": ["--handler", "bench.ask_agent:answer"],
    "cat": ["--command", "cat"],
}
WORKER_CONCURRENCY = 64
POOL_SIZE = 10
ASK_TIMEOUT_S = 60.0
TARGET_P99_MS = 20.0
TARGET_VS_DBOS = 1.0

STAGES_SQL = """
SELECT
    j.payload->'mail'->>'key' AS key,
    extract(epoch FROM j.created_at)::float8 AS created,
    extract(epoch FROM j.started_at)::float8 AS started,
    extract(epoch FROM j.settled_at)::float8 AS settled,
    extract(epoch FROM m.delivered_at)::float8 AS delivered
FROM birddog.jobs j
JOIN birddog.mailbox m ON m.in_reply_to = j.payload->'mail'->>'key'
WHERE j.payload->'mail'->>'key' = ANY($1::text[])
"""


def asker_name(index: int) -> str:
    """The agent session of asker ``index``."""
    return f"asker-{index:03d}:s"


def shares(count: int, askers: int) -> list[int]:
    """``count`` asks split as evenly as can be over ``askers``."""
    return [count // askers + (1 if i < count % askers else 0) for i in range(askers)]


def latency_summary(took_s: Sequence[float], first: float, last: float) -> dict[str, Any]:
    """p50/p90/p99/max in ms, and asks/s over ``first`` to ``last`` (wall seconds)."""
    ms = [t * 1000 for t in took_s]
    elapsed = last - first
    return {
        "asks": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "elapsed_s": round(elapsed, 3),
        "per_s": round(len(ms) / elapsed, 1) if elapsed > 0 else float("nan"),
    }


FLOOR_COUNT = 200


async def commit_floor(dsn: str, count: int) -> list[float]:
    """Bare ``INSERT`` commits (ms), one row per transaction, in turn, on one connection."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_floor (id int, body text)")
        took = []
        for index in range(count):
            began = time.perf_counter()
            await conn.execute("INSERT INTO bench_commit_floor VALUES ($1, 'x')", index)
            took.append((time.perf_counter() - began) * 1000)
        await conn.execute("DROP TABLE bench_commit_floor")
    finally:
        await conn.close()
    return took


async def floors(dsn: str, count: int) -> dict[str, Any]:
    """p50/p99 (ms) of a bare commit and of a bare NOTIFY round trip, now, on this server."""
    commits = await commit_floor(dsn, count)
    notifies = await wake.notify_floor(dsn, count)
    return {
        name: {"p50_ms": round(percentile(v, 50), 3), "p99_ms": round(percentile(v, 99), 3)}
        for name, v in (("commit", commits), ("notify_round_trip", notifies))
    }


async def stages(conn: asyncpg.Connection, times: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Medians and p99s (ms) of each stage of the asks in ``times`` (key: start, end)."""
    rows = await conn.fetch(STAGES_SQL, list(times))
    spans: dict[str, list[float]] = {
        "send (ask to the job's insert)": [],
        "to the worker's claim": [],
        "handler and settle": [],
        "settle to the mailbox (0: the settlement delivers it)": [],
        "mailbox to the answer returned": [],
    }
    names = list(spans)
    for row in rows:
        began, ended = times[row["key"]]
        points = [began, row["created"], row["started"], row["settled"], row["delivered"], ended]
        for name, (a, b) in zip(names, itertools.pairwise(points), strict=True):
            spans[name].append((b - a) * 1000)
    return {
        name: {"p50_ms": round(percentile(v, 50), 2), "p99_ms": round(percentile(v, 99), 2)}
        for name, v in spans.items()
        if v
    }


async def birddog_case(
    ctx: Context,
    asking: Any,
    conn: asyncpg.Connection,
    processes: dict[str, DaemonProcess],
    *,
    askers: int,
    count: int,
    label: str,
) -> dict[str, Any]:
    """``count`` asks from ``askers`` concurrent askers, each its questions in turn."""
    await conn.execute("TRUNCATE birddog.jobs, birddog.mailbox, birddog.receipts, birddog.outbox")

    async def one(index: int, number: int | None) -> tuple[str, float, float]:
        key = f"ask-{label}-{index:03d}-{'warm' if number is None else number}"
        content = f"question {key}"
        began_wall = time.time()
        began = time.perf_counter()
        answer = await asking.ask(
            to=f"{AGENT}:s-{index:03d}",
            from_=asker_name(index),
            content=content,
            key=key,
            timeout_s=ASK_TIMEOUT_S,
        )
        took = time.perf_counter() - began
        if answer != content:
            raise RuntimeError(f"{key}: the answer {answer[:80]!r} is not the question's text")
        return key, began_wall, took

    async def asker(index: int, share: int) -> list[tuple[str, float, float]]:
        return [await one(index, number) for number in range(share)]

    await asyncio.gather(*(one(index, None) for index in range(askers)))
    cpu = {name: proc.sampler.cpu_s() for name, proc in processes.items() if proc.sampler}
    asker_cpu = process_cpu_s()
    pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
    results = await asyncio.gather(
        *(asker(index, share) for index, share in enumerate(shares(count, askers)))
    )
    pg_cpu_s = pg_cpu.stop()
    asker_cpu_s = process_cpu_s() - asker_cpu
    done = [item for result in results for item in result]
    first = min(began for _, began, _ in done)
    last = max(began + took for _, began, took in done)
    summary = latency_summary([took for _, _, took in done], first, last)
    per_ask = 1e6 / len(done)
    summary["cpu_us_per_ask"] = {
        "askers": round(asker_cpu_s * per_ask),
        **{
            name: round((proc.sampler.cpu_s() - cpu[name]) * per_ask)
            for name, proc in processes.items()
            if proc.sampler
        },
        "postgres": round(pg_cpu_s * per_ask),
    }
    summary["stages"] = await stages(conn, {key: (b, b + t) for key, b, t in done})
    return summary


async def dbos_case(
    ctx: Context, dsn: str, *, askers: int, count: int, label: str
) -> dict[str, Any]:
    """The same exchange between DBOS workflows: responders in one process, askers in another."""
    env = {"BENCH_PEER_DSN": dsn}
    responders = spawn_python(["bench.peer_dbos", "respond", str(askers)], env=env)
    try:
        assert responders.stdout is not None
        ready = await asyncio.wait_for(asyncio.to_thread(responders.stdout.readline), 120)
        if not ready:
            raise RuntimeError("the DBOS responders exited before they were ready")
        sampler_start = _process_cpu(responders.pid)
        pg_cpu = TreeCpu(ctx.server.postmaster_pid).start()
        # One untimed ask per asker first (connections, the first workflow steps), as for
        # BirdDog; the timed asks follow in the same process.
        result, asker_cpu_s, _ = await run_python(
            ["bench.peer_dbos", "ask", str(askers), str(count), label],
            timeout_s=600,
            env=env,
        )
        pg_cpu_s = pg_cpu.stop()
        responder_cpu_s = _process_cpu(responders.pid) - sampler_start
    finally:
        stop_pid(responders)
    summary = latency_summary(result["took_s"], result["first_wall"], result["last_wall"])
    per_ask = 1e6 / summary["asks"]
    summary["cpu_us_per_ask"] = {
        "askers": round(asker_cpu_s * per_ask),
        "responders": round(responder_cpu_s * per_ask),
        "postgres": round(pg_cpu_s * per_ask),
    }
    summary["version"] = result["version"]
    return summary


def _process_cpu(pid: int) -> float:
    import psutil  # noqa: PLC0415 - the harness's dependency

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Each handler, then DBOS, at each number of askers; rounds alternate (full mode: 2)."""
    # BENCH_ASK_COUNT sizes a full run for a busy machine (the results say what was run).
    count = int(os.environ.get("BENCH_ASK_COUNT", "0")) or (50 if ctx.quick else 1_000)
    askers_list = QUICK_ASKERS if ctx.quick else ASKERS
    handlers = ["python"] if ctx.quick else list(HANDLERS)
    rounds = 1 if ctx.quick else 2
    dsn = await fresh_database(ctx.server, "ask")
    dbos_dsn = await fresh_database(ctx.server, "ask_dbos", birddog=False)
    conn = await asyncpg.connect(dsn)
    pool = await create_pool(dsn, max_size=POOL_SIZE)
    daemon = DaemonProcess(dsn, ctx.tmp / "ask-daemon.log")
    birddog: dict[str, dict[int, list[dict[str, Any]]]] = {
        h: {a: [] for a in askers_list} for h in handlers
    }
    dbos: dict[int, list[dict[str, Any]]] = {a: [] for a in askers_list}
    floor: list[dict[str, Any]] = []
    try:
        routes = PostgresRoutes(pool, clock=SystemClock())
        await routes.add(AGENT, kind="mailbox")
        for index in range(max(askers_list)):
            await routes.add(asker_name(index).split(":")[0], kind="mailbox")
        daemon.start()
        await daemon.wait_listening(conn)
        async with open_asking(pool, dsn) as asking:
            for round_index in range(rounds):
                floor.append(await floors(dsn, FLOOR_COUNT))
                for handler in handlers:
                    worker = DaemonProcess(
                        dsn,
                        ctx.tmp / f"ask-worker-{handler}.log",
                        env={
                            "BIRDDOG_WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
                            "BIRDDOG_WORKER_METRICS_PORT": "0",
                        },
                        args=["worker", *HANDLERS[handler]],
                    )
                    worker.start()
                    try:
                        for askers in askers_list:
                            label = f"r{round_index}-{handler}-{askers}"
                            birddog[handler][askers].append(
                                await birddog_case(
                                    ctx,
                                    asking,
                                    conn,
                                    {"worker": worker, "daemon": daemon},
                                    askers=askers,
                                    count=count,
                                    label=label,
                                )
                            )
                            worker.check_alive()
                            daemon.check_alive()
                    finally:
                        worker.stop()
                for askers in askers_list:
                    dbos[askers].append(
                        await dbos_case(
                            ctx,
                            dbos_dsn,
                            askers=askers,
                            count=count,
                            label=f"r{round_index}-{askers}",
                        )
                    )
    finally:
        daemon.stop()
        await pool.close()
        await conn.close()
        await drop_database(ctx.server, dsn)
        await drop_database(ctx.server, dbos_dsn)
    return figures(birddog, dbos), {
        "asks_per_case": count,
        "rounds": rounds,
        "worker_concurrency": WORKER_CONCURRENCY,
        "asking_pool_size": POOL_SIZE,
        "versions": {
            "birddog": importlib.metadata.version("birddog"),
            "dbos": importlib.metadata.version("dbos"),
        },
        "floors": floor,
        "birddog": {h: {str(a): r for a, r in by.items()} for h, by in birddog.items()},
        "dbos": {str(a): r for a, r in dbos.items()},
    }


def _median(rounds: list[dict[str, Any]], field: str) -> float:
    return float(statistics.median(r[field] for r in rounds))


def figures(
    birddog: dict[str, dict[int, list[dict[str, Any]]]], dbos: dict[int, list[dict[str, Any]]]
) -> list[Figure]:
    """p99 with one asker and asks/s at each number of askers, per handler, against DBOS."""
    out: list[Figure] = []
    for handler, by_askers in birddog.items():
        if 1 in by_askers:
            ours = _median(by_askers[1], "p99_ms")
            theirs = _median(dbos[1], "p99_ms")
            target = handler == "python"
            out.append(
                Figure(
                    name=f"ask p99, 1 asker, {handler} handler",
                    value=ours,
                    unit="ms",
                    baseline="DBOS send/recv, 1 asker",
                    baseline_value=theirs,
                    ratio=ratio(ours, theirs),
                    ratio_note="birddog / dbos (lower is faster)",
                    target=f"<= {TARGET_P99_MS:g} ms" if target else "",
                    met=ours <= TARGET_P99_MS if target else None,
                )
            )
        for askers, rounds in by_askers.items():
            ours = _median(rounds, "per_s")
            theirs = _median(dbos[askers], "per_s")
            target = handler == "python" and askers == 50
            out.append(
                Figure(
                    name=f"asks/s, {askers} asker{'s' * (askers != 1)}, {handler} handler",
                    value=ours,
                    unit="asks/s",
                    baseline=f"DBOS send/recv, {askers} asker{'s' * (askers != 1)}",
                    baseline_value=theirs,
                    ratio=ratio(ours, theirs),
                    ratio_note="birddog / dbos",
                    target=f">= {TARGET_VS_DBOS:g}x" if target else "",
                    met=ratio(ours, theirs) >= TARGET_VS_DBOS if target else None,
                )
            )
    return out
