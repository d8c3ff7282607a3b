"""A batched turn cut short by SIGKILL of its worker: each mail to its own recovery policy.

Real ``birddog worker --command ... --batch 5`` processes on this test's database. The
first turn's agent starts ``sh -c 'sleep 300 & sleep 300'`` and writes every pid it made;
the worker is SIGKILLed mid-turn. Every process of the turn must be gone within the kill
grace; the jobs that may be recovered run again in the next worker's turn (which starts
only once the first turn's processes are dead) and each gets exactly one reply; the jobs
without a recovery budget settle as lost, their replies saying so. Pids are read from the
files the agent writes, never found by name.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from birddog import AgentWork, Mail, agent_job
from birddog.core.jobs import Job, Recovery
from birddog.postgres.pool import Pool
from tests.support import ALICE, BOB, enqueue, eventually, process_running
from tests.support.chaos import birddog_env
from tests.support.cli import BIRDDOG

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

KILL_GRACE_S = 1.0

AGENT = r"""
import json, os, subprocess, sys, time
from pathlib import Path

here = Path(sys.argv[1])
mails = [json.loads(line) for line in sys.stdin if line.strip()]
first = not (here / "blocked").exists()
earlier = [int(p) for p in (here / "pids").read_text().split()] if not first else []
alive = [p for p in earlier if Path(f"/proc/{p}").exists()
         and Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[0] not in "ZX"]
with open(here / "turns", "a") as turns:
    turns.write(json.dumps({"pid": os.getpid(), "jobs": [m["job_id"] for m in mails],
                            "earlier_alive": alive, "at": time.time()}) + "\n")
if first:
    (here / "blocked").write_text("yes")
    child = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > grand; sleep 300"], cwd=here)
    while not (here / "grand").exists() or not (here / "grand").read_text().strip():
        time.sleep(0.01)
    pids = [os.getpid(), child.pid, int((here / "grand").read_text())]
    (here / "pids.part").write_text(" ".join(map(str, pids)) + "\n")
    os.rename(here / "pids.part", here / "pids")
    child.wait()
for mail in mails:
    print(json.dumps({"job_id": mail["job_id"], "content": "answered " + mail["job_id"]}))
"""


def mail_job(n: int, *, recoveries: int | None) -> Job:
    """Job ``k<n>`` for bob's session, replying to alice; recoverable when ``recoveries``."""
    key = f"k{n}"
    mail = Mail(key=key, to=BOB, from_=ALICE, reply_to=[ALICE], content=f"mail {n}", created_at=n)
    recovery = None if recoveries is None else Recovery(max_recoveries=recoveries)
    work = AgentWork(job_id=key, session_id=BOB.session_id, command_fact_id=key, recovery=recovery)
    return agent_job(work, mail)


async def start_worker(
    database_url: str, agent: Path, where: Path, log: Path
) -> asyncio.subprocess.Process:
    """A ``birddog worker`` for bob running the agent with ``--batch 5``; its output to ``log``."""
    env = birddog_env(database_url, BIRDDOG_KILL_GRACE_S=str(KILL_GRACE_S))
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            BIRDDOG, "worker", "--agent", BOB.agent_id, "--batch", "5",
            "--command", f"{sys.executable} {agent} {where}",
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip


async def test_a_sigkilled_batched_turn_ends_its_processes_and_recovers_each_job_by_its_policy(
    pg_pool: Pool, database_url: str, tmp_path: Path
) -> None:
    """Kill -9 mid-turn: no process left, recoverable jobs answered once, the rest settle lost."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    where = tmp_path / "agent"
    where.mkdir()
    await enqueue(
        pg_pool,
        *(mail_job(n, recoveries=1) for n in (1, 2, 3)),
        *(mail_job(n, recoveries=None) for n in (4, 5)),
    )
    log = tmp_path / "worker.log"
    first = await start_worker(database_url, agent, where, log)
    second = None
    try:
        pids_file = where / "pids"
        await eventually(pids_file.exists, "the first turn's agent blocked", within_s=60)
        turn_pids = [int(p) for p in pids_file.read_text().split()]
        first_turn = json.loads((where / "turns").read_text().splitlines()[0])
        assert sorted(first_turn["jobs"]) == ["k1", "k2", "k3", "k4", "k5"]  # one turn
        first.kill()
        assert await asyncio.wait_for(first.wait(), 10) == -signal.SIGKILL
        killed_at = time.monotonic()
        await eventually(
            lambda: not any(process_running(pid) for pid in turn_pids),
            f"every process of the killed turn ended ({turn_pids})",
            within_s=KILL_GRACE_S + 10,
        )
        ended_s = time.monotonic() - killed_at
        second = await start_worker(database_url, agent, where, log)

        async def settled() -> list[tuple[str, str]]:
            rows = await pg_pool.fetch(
                "SELECT job_id, outcome FROM birddog.jobs WHERE state = 'settled' ORDER BY 1"
            )
            return [(row["job_id"], row["outcome"]) for row in rows]

        done = await eventually(lambda: _all_five(settled), "all five jobs settled", within_s=90)
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 30)
    assert done is not None
    outcomes = dict(done)
    assert {outcomes[k] for k in ("k1", "k2", "k3")} == {"completed"}, (
        outcomes,
        log.read_text()[-3000:],
    )
    assert {outcomes[k] for k in ("k4", "k5")} <= {"outcome_unknown", "interrupted"}, outcomes
    turns = [json.loads(line) for line in (where / "turns").read_text().splitlines()]
    assert len(turns) == 2, turns  # the killed turn and the one that ran its recovered jobs
    assert sorted(turns[1]["jobs"]) == ["k1", "k2", "k3"]
    assert turns[1]["earlier_alive"] == []  # no overlap: the first turn's processes were gone
    replies = await pg_pool.fetch(
        "SELECT reply -> 'inReplyTo' #>> '{}' AS key, reply #>> '{reply,outcome}' AS outcome"
        " FROM birddog.outbox UNION ALL SELECT in_reply_to, outcome FROM birddog.mailbox"
    )
    every = [(r["key"], r["outcome"]) for r in replies]
    assert sorted(key for key, _ in every) == ["k1", "k2", "k3", "k4", "k5"], every  # one each
    assert dict(every) == outcomes  # each reply tells its own job's outcome
    print(f"\nthe killed turn's {len(turn_pids)} processes ended {ended_s:.2f} s after the kill")


async def _all_five(
    settled: Callable[[], Awaitable[list[tuple[str, str]]]],
) -> list[tuple[str, str]] | None:
    rows = await settled()
    return rows if len(rows) == 5 else None
