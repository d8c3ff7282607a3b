"""Turns: 100 mails to one slow-starting command agent, batched turns against one per mail.

An agent's turn (a process, a context) is the expensive unit, not a mail. 100 mails
(quick: 40) are queued in one transaction for one session, ``bob:s-bob``, whose agent is a
``birddog worker --command`` running ``bench/turn_agent.py``, a program that takes 0.3 s to
start and counts its own spawns in a file. Two cases, same run, same database, rounds
alternating (quick: 1 each, full: 2):

- ``--batch 20``: the worker takes up to 20 queued mails of the session as one turn; the
  agent gets them as JSON lines;
- no ``--batch`` (the baseline: a turn per mail, as before batched turns; the plain agent
  answers the one mail on its stdin with its text): one spawn each.

The worker is started first and waits (LISTEN) with nothing queued; the clock runs from the
enqueue's commit to the last job settled (polled every 20 ms). Medians.

Then a live session beside the worker: ``birddog mcp --as bob:s-bob`` (stdio, driven by
the ``mcp`` SDK's client, as an agent host drives it) is announced live before the same
number of mails is queued, and takes each through ``next_task`` and ``answer`` while the
``--batch 20`` worker waits beside it (the route's grace: the default 30 s). The worker's
agent must never start: its spawns are counted against the ``--batch 20`` rounds' for the
same mails.

Targets: time, batch 1 / batch 20 >= 5; spawns per mail with ``--batch 20`` <= 1/20; a
live MCP session beside a worker: 0 spawns.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
from mcp import ClientSession, StdioServerParameters, stdio_client

from bench.harness import (
    BIN,
    ROOT,
    Context,
    DaemonProcess,
    Figure,
    fresh_database,
    ratio,
    wait_until,
)
from birddog.core.jobs import AgentWork, agent_job
from birddog.core.mail import AgentAddress, Mail
from birddog.postgres.enqueue import enqueue_accepted_job
from birddog.postgres.pool import create_pool

TO = AgentAddress(agent_id="bob", session_id="s-bob")
FROM = AgentAddress(agent_id="alice", session_id="s-alice")
BATCH = 20
SPEEDUP_TARGET = 5.0
SPAWNS_TARGET = 1 / BATCH
LIVE_WAIT_S = 10
"""How long the live session's ``next_task`` waits for a mail (they are all queued at once)."""


def command_worker(ctx: Context, dsn: str, *, batch: int, label: str) -> tuple[DaemonProcess, Path]:
    """A ``worker --command`` for bob of ``--batch batch`` (not started); its spawn file.

    ``batch`` 1 is the worker without ``--batch``: a turn per mail, the mail's content on
    the agent's stdin and its text the answer (an explicit ``--batch 1`` would speak JSON
    lines, which the plain agent does not).
    """
    spawns = ctx.tmp / f"turns-{label}.spawns"
    spawns.write_text("")
    agent = f"{sys.executable} {ROOT / 'bench' / 'turn_agent.py'} {spawns}"
    batching = ["--batch", str(batch)] if batch > 1 else []
    worker = DaemonProcess(
        dsn,
        ctx.tmp / f"turns-{label}.log",
        env={"BIRDDOG_WORKER_METRICS_PORT": "0"},
        args=[
            "worker",
            "--agent",
            TO.agent_id,
            *batching,
            "--command",
            agent + (" --lines" if batch > 1 else ""),
        ],
    )
    return worker, spawns


async def queue_mails(conn: asyncpg.Connection, *, count: int, label: str) -> float:
    """Queue ``count`` mails for bob in one transaction; the monotonic time of its commit."""
    jobs = []
    for n in range(count):
        key = f"{label}-{n:04d}"
        mail = Mail(key=key, to=TO, from_=FROM, reply_to=[], content=f"mail {n}", created_at=n)
        work = AgentWork(job_id=key, session_id=TO.session_id, command_fact_id=key)
        jobs.append(agent_job(work, mail))
    async with conn.transaction():
        for job in jobs:
            await enqueue_accepted_job(conn, job)
    return time.monotonic()


async def wait_settled(
    conn: asyncpg.Connection, worker: DaemonProcess, *, count: int, label: str
) -> dict[str, int]:
    """Wait for the round's ``count`` jobs to settle (polled every 20 ms); their outcomes."""

    async def all_settled() -> bool:
        worker.check_alive()
        settled = await conn.fetchval(
            "SELECT count(*) FROM birddog.jobs WHERE state = 'settled' AND job_id LIKE $1",
            f"{label}-%",
        )
        return bool(settled == count)

    await wait_until(
        all_settled, timeout_s=count * 5.0, interval_s=0.02, what=f"{count} jobs settled"
    )
    return dict(
        await conn.fetch(
            "SELECT outcome, count(*) FROM birddog.jobs WHERE job_id LIKE $1 GROUP BY 1",
            f"{label}-%",
        )
    )


def spawns_in(spawns: Path) -> int:
    """How many times the agent started (one pid a line)."""
    return len(spawns.read_text().split())


async def one_round(
    ctx: Context, dsn: str, conn: asyncpg.Connection, *, batch: int, count: int, label: str
) -> dict[str, Any]:
    """Queue ``count`` mails for a waiting worker of ``--batch batch``; time and spawns."""
    worker, spawns = command_worker(ctx, dsn, batch=batch, label=label)
    worker.start()
    try:
        await worker.wait_listening(conn)
        started = await queue_mails(conn, count=count, label=label)
        outcomes = await wait_settled(conn, worker, count=count, label=label)
        took_s = time.monotonic() - started
    finally:
        worker.stop()
    spawned = await asyncio.to_thread(spawns_in, spawns)
    return {"batch": batch, "took_s": round(took_s, 3), "spawns": spawned, "outcomes": outcomes}


async def live_round(
    ctx: Context, dsn: str, conn: asyncpg.Connection, *, count: int
) -> dict[str, Any]:
    """A live MCP session takes ``count`` mails through next_task beside a --batch 20 worker."""
    label = "live"
    worker, spawns = command_worker(ctx, dsn, batch=BATCH, label=label)
    worker.start()
    env = {**os.environ, "DATABASE_URL": dsn, "BIRDDOG_LOG_FORMAT": "json"}
    address = f"{TO.agent_id}:{TO.session_id}"
    params = StdioServerParameters(
        command=str(BIN / "birddog"), args=["mcp", "--as", address], env=env, cwd=ROOT
    )
    try:
        await worker.wait_listening(conn)
        with (ctx.tmp / "turns-live-mcp.log").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()

                async def announced() -> bool:
                    live = await conn.fetchval(
                        "SELECT count(*) FROM birddog.live_sessions "
                        "WHERE agent_id = $1 AND session = $2 AND expires_at > now()",
                        TO.agent_id,
                        TO.session_id,
                    )
                    return bool(live)

                await wait_until(announced, timeout_s=60, what="the MCP session live")
                started = await queue_mails(conn, count=count, label=label)
                for _ in range(count):
                    task = await session.call_tool("next_task", {"wait_s": LIVE_WAIT_S})
                    found = task.structured_content or {}
                    if found.get("status") != "task":
                        raise RuntimeError(f"next_task found no mail: {found}")
                    await session.call_tool(
                        "answer", {"job_id": found["job_id"], "content": "seen live"}
                    )
                outcomes = await wait_settled(conn, worker, count=count, label=label)
                took_s = time.monotonic() - started
        by_live = await conn.fetchval(
            "SELECT count(*) FROM birddog.jobs WHERE job_id LIKE 'live-%' "
            "AND starts_with(worker_id, 'mcp:')"
        )
    finally:
        worker.stop()
    spawned = await asyncio.to_thread(spawns_in, spawns)
    return {
        "took_s": round(took_s, 3),
        "spawns": spawned,
        "answered_by_live_session": by_live,
        "outcomes": outcomes,
    }


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate --batch 20 rounds and rounds without; then the live round; medians, ratios."""
    count = 40 if ctx.quick else 100
    rounds = 1 if ctx.quick else 2
    dsn = await fresh_database(ctx.server, "turns")
    pool = await create_pool(dsn, min_size=1, max_size=2)
    batched: list[dict[str, Any]] = []
    single: list[dict[str, Any]] = []
    try:
        async with pool.acquire() as conn:
            for index in range(rounds):
                batched.append(
                    await one_round(ctx, dsn, conn, batch=BATCH, count=count, label=f"b{index}")
                )
                single.append(
                    await one_round(ctx, dsn, conn, batch=1, count=count, label=f"s{index}")
                )
            live = await live_round(ctx, dsn, conn, count=count)
    finally:
        await pool.close()
    took = statistics.median(r["took_s"] for r in batched)
    took_single = statistics.median(r["took_s"] for r in single)
    per_mail = statistics.median(r["spawns"] for r in batched) / count
    per_mail_single = statistics.median(r["spawns"] for r in single) / count
    speedup = ratio(took_single, took)
    figures = [
        Figure(
            name=f"time to answer {count} mails, --batch {BATCH}",
            value=took,
            unit="s",
            baseline="no --batch (a turn per mail)",
            baseline_value=took_single,
            ratio=speedup,
            ratio_note="batch 1 / batch 20 (speedup)",
            target=f">= {SPEEDUP_TARGET:g}",
            met=speedup >= SPEEDUP_TARGET,
        ),
        Figure(
            name=f"agent spawns per mail, --batch {BATCH}",
            value=per_mail,
            unit="spawns/mail",
            baseline="no --batch (a turn per mail)",
            baseline_value=per_mail_single,
            ratio=ratio(per_mail, per_mail_single),
            target=f"<= {SPAWNS_TARGET:g}",
            met=per_mail <= SPAWNS_TARGET,
        ),
        Figure(
            name=f"a live MCP session beside a worker: worker spawns for {count} mails",
            value=live["spawns"],
            unit="spawns",
            baseline=f"the worker alone, --batch {BATCH}",
            baseline_value=statistics.median(r["spawns"] for r in batched),
            ratio=ratio(live["spawns"], statistics.median(r["spawns"] for r in batched)),
            target="0",
            met=live["spawns"] == 0 and live["answered_by_live_session"] == count,
        ),
    ]
    details = {
        "mails": count,
        "rounds": rounds,
        "agent_start_s": 0.3,
        "batched": batched,
        "single": single,
        "live": live,
    }
    return figures, details
