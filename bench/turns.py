"""Turns: 100 mails to one slow-starting command agent, batched turns against one per mail.

An agent's turn (a process, a context) is the expensive unit, not a mail. 100 mails
(quick: 40) are queued in one transaction for one session, ``bob:s-bob``, whose agent is a
``birddog worker --command`` running ``bench/turn_agent.py``, a program that takes 0.3 s to
start and counts its own spawns in a file. Two cases, same run, same database, rounds
alternating (quick: 1 each, full: 2):

- ``--batch 20``: the worker takes up to 20 queued mails of the session as one turn; the
  agent gets them as JSON lines;
- ``--batch 1`` (the baseline: a turn per mail, as before batched turns): one spawn each.

The worker is started first and waits (LISTEN) with nothing queued; the clock runs from the
enqueue's commit to the last job settled (polled every 20 ms). Medians.
Targets: time, batch 1 / batch 20 >= 5; spawns per mail with ``--batch 20`` <= 1/20.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

import asyncpg

from bench.harness import ROOT, Context, DaemonProcess, Figure, fresh_database, ratio, wait_until
from birddog.core.jobs import AgentWork, agent_job
from birddog.core.mail import AgentAddress, Mail
from birddog.postgres.enqueue import enqueue_accepted_job
from birddog.postgres.pool import create_pool

TO = AgentAddress(agent_id="bob", session_id="s-bob")
FROM = AgentAddress(agent_id="alice", session_id="s-alice")
BATCH = 20
SPEEDUP_TARGET = 5.0
SPAWNS_TARGET = 1 / BATCH


async def one_round(
    ctx: Context, dsn: str, conn: asyncpg.Connection, *, batch: int, count: int, label: str
) -> dict[str, Any]:
    """Queue ``count`` mails for a waiting worker of ``--batch batch``; time and spawns."""
    spawns = ctx.tmp / f"turns-{label}.spawns"
    await asyncio.to_thread(spawns.write_text, "")
    agent = f"{sys.executable} {ROOT / 'bench' / 'turn_agent.py'} {spawns}"
    worker = DaemonProcess(
        dsn,
        ctx.tmp / f"turns-{label}.log",
        env={"BIRDDOG_WORKER_METRICS_PORT": "0"},
        args=[
            "worker",
            "--agent",
            TO.agent_id,
            "--batch",
            str(batch),
            "--command",
            agent + (" --lines" if batch > 1 else ""),
        ],
    )
    worker.start()
    try:
        await worker.wait_listening(conn)
        jobs = []
        for n in range(count):
            key = f"{label}-{n:04d}"
            mail = Mail(key=key, to=TO, from_=FROM, reply_to=[], content=f"mail {n}", created_at=n)
            work = AgentWork(job_id=key, session_id=TO.session_id, command_fact_id=key)
            jobs.append(agent_job(work, mail))
        async with conn.transaction():
            for job in jobs:
                await enqueue_accepted_job(conn, job)
        started = time.monotonic()

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
        took_s = time.monotonic() - started
        outcomes = dict(
            await conn.fetch(
                "SELECT outcome, count(*) FROM birddog.jobs WHERE job_id LIKE $1 GROUP BY 1",
                f"{label}-%",
            )
        )
    finally:
        worker.stop()
    spawned = len((await asyncio.to_thread(spawns.read_text)).split())
    return {"batch": batch, "took_s": round(took_s, 3), "spawns": spawned, "outcomes": outcomes}


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate --batch 20 and --batch 1 rounds; report the medians and their ratios."""
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
            baseline="--batch 1 (a turn per mail)",
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
            baseline="--batch 1 (a turn per mail)",
            baseline_value=per_mail_single,
            ratio=ratio(per_mail, per_mail_single),
            target=f"<= {SPAWNS_TARGET:g}",
            met=per_mail <= SPAWNS_TARGET,
        ),
    ]
    details = {
        "mails": count,
        "rounds": rounds,
        "agent_start_s": 0.3,
        "batched": batched,
        "single": single,
    }
    return figures, details
