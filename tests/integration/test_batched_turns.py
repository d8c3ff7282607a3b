"""Batched turns: a worker runs every job queued for one session as one turn of its agent.

The worker runs in this process over the real job store; the command agent is a real
Python process that counts its own spawns in a file, reads the turn's mails as JSON lines
and answers with JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from birddog import AgentAddress, AgentWork, Job, Mail, Outcome, agent_job
from birddog.clock import SystemClock
from birddog.core.batched import UNANSWERED, MailTurn
from birddog.metrics import WorkerMetrics
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.spawn import command_turn_handler
from birddog.testing import ManualListener
from birddog.turns import turn_handler
from birddog.worker import Worker
from tests.support import ALICE, BOB, enqueue, eventually
from tests.support.cli import cli

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

AGENT = r"""
import json, os, sys, time
from pathlib import Path

here = Path(sys.argv[1])
with open(here / "spawns", "a") as spawns:
    spawns.write(f"{os.getpid()}\n")
mails = [json.loads(line) for line in sys.stdin]
with open(here / "turns", "a") as turns:
    turns.write(json.dumps([m["job_id"] for m in mails]) + "\n")
gate = here / "gate"
if (here / "wait").exists():
    (here / "started").write_text("yes")
    while not gate.exists():
        time.sleep(0.02)
for mail in mails:
    text = mail["content"]
    if text == "skip":
        continue
    if text == "garbage":
        print("this is not an answer")
        continue
    answer = {"job_id": mail["job_id"], "content": text.upper() + " (" + mail["kind"] + ")"}
    if text == "fail":
        answer.update(outcome="failed", diagnostic="could not")
    print(json.dumps(answer))
"""


def mail_job(
    n: int, content: str | None = None, *, kind: str = "task", to: AgentAddress = BOB
) -> Job:
    """Job ``t<n>`` for bob's session, its mail's content ``mail <n>`` unless given."""
    job_id = f"t{n:03d}"
    mail = Mail(
        key=f"mail-{job_id}",
        to=to,
        from_=ALICE,
        reply_to=[ALICE],
        content=content if content is not None else f"mail {n}",
        created_at=1_000 + n,
    )
    work = AgentWork(job_id=job_id, session_id=to.session_id, command_fact_id=f"cmd-{job_id}")
    return agent_job(work, mail, kind=kind)


def agent_worker(jobs: PostgresJobs, where: Path, *, batch: int) -> Worker:
    """A worker running the counting agent with ``--batch``-style turns."""
    script = where / "agent.py"
    script.write_text(AGENT)
    handler = command_turn_handler(f"{sys.executable} {script} {where}", grace_s=0.3)
    return Worker(
        jobs=jobs,
        handler=handler,
        listener=ManualListener(max_wait_s=0.05),
        lease_s=5.0,
        handler_timeout_s=60.0,
        shutdown_grace_s=0.5,
        batch=batch,
    )


async def replies(pool: Pool) -> dict[str, tuple[str, str, str | None]]:
    """Each mail key's reply: content, outcome, diagnostic."""
    rows = await pool.fetch("SELECT reply FROM birddog.outbox ORDER BY key")
    return {
        row["reply"]["inReplyTo"]: (
            row["reply"]["content"],
            row["reply"]["reply"]["outcome"],
            row["reply"]["reply"].get("diagnostic"),
        )
        for row in rows
    }


async def test_a_hundred_mails_cost_five_spawns_and_each_gets_its_own_reply(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """100 mails queued for one session, --batch 20: 5 processes, 100 replies, each its own."""
    await enqueue(pg_pool, *(mail_job(n) for n in range(100)))
    worker = agent_worker(jobs, tmp_path, batch=20)
    await worker.run(once=True)
    assert len((tmp_path / "spawns").read_text().splitlines()) == 5
    turns = [json.loads(line) for line in (tmp_path / "turns").read_text().splitlines()]
    assert [len(turn) for turn in turns] == [20] * 5
    assert sorted(job for turn in turns for job in turn) == [f"t{n:03d}" for n in range(100)]
    got = await replies(pg_pool)
    assert len(got) == 100
    for n in range(100):
        assert got[f"mail-t{n:03d}"] == (f"MAIL {n} (task)", "completed", None)
    assert worker.summary() == {"completed": 100}


async def test_a_missing_answer_fails_that_mail_alone(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """A mail the agent does not answer settles failed saying so; the others complete."""
    await enqueue(pg_pool, mail_job(1), mail_job(2, "skip"), mail_job(3, "fail"))
    await agent_worker(jobs, tmp_path, batch=20).run(once=True)
    got = await replies(pg_pool)
    assert got["mail-t001"] == ("MAIL 1 (task)", "completed", None)
    assert got["mail-t002"][1:] == ("failed", UNANSWERED)
    assert got["mail-t003"][1:] == ("failed", "could not")
    assert len((tmp_path / "spawns").read_text().splitlines()) == 1


async def test_a_malformed_line_fails_the_unanswered_mail_never_guessing(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """Output that is no answer line fails what was not answered yet, naming the line."""
    await enqueue(
        pg_pool, mail_job(1, "report", kind="escalation"), mail_job(2, "garbage"), mail_job(3)
    )
    await agent_worker(jobs, tmp_path, batch=20).run(once=True)
    got = await replies(pg_pool)
    assert got["mail-t001"] == ("REPORT (escalation)", "completed", None)
    for key in ("mail-t002", "mail-t003"):
        content, outcome, diagnostic = got[key]
        assert outcome == "failed"
        assert diagnostic == "answer line 2 is not JSON"
        assert "not an answer" not in content


async def test_a_cancellation_of_one_job_wins_for_that_job_only(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """One job cancelled while its turn runs settles cancelled; the turn's others complete."""
    await enqueue(pg_pool, mail_job(1), mail_job(2), mail_job(3))
    (tmp_path / "wait").write_text("")
    run = asyncio.create_task(agent_worker(jobs, tmp_path, batch=20).run(once=True))
    await eventually((tmp_path / "started").exists, "the turn's process started", within_s=30)
    assert await jobs.cancel(job_id="t002", content="not needed") is None
    (tmp_path / "gate").write_text("go")
    await asyncio.wait_for(run, timeout=60)
    got = await replies(pg_pool)
    assert got["mail-t001"][1] == "completed"
    assert got["mail-t002"][:2] == ("not needed", "cancelled")
    assert got["mail-t003"][1] == "completed"


async def test_a_python_turn_handler_takes_the_whole_turn(
    pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """A @turn_handler is called once with every mail; a job it leaves out fails alone."""
    seen: list[list[str]] = []

    @turn_handler
    async def handle_turn(turn: MailTurn) -> Mapping[str, str]:
        seen.append(turn.job_ids)
        return {m.job_id: f"ok {m.kind}" for m in turn.mails if m.job_id != "t003"}

    await enqueue(pg_pool, mail_job(1), mail_job(2, kind="escalation"), mail_job(3))
    worker = Worker(
        jobs=jobs,
        handler=handle_turn,
        listener=ManualListener(max_wait_s=0.05),
        batch=20,
    )
    await worker.run(once=True)
    assert seen == [["t001", "t002", "t003"]]
    got = await replies(pg_pool)
    assert got["mail-t001"] == ("ok task", "completed", None)
    assert got["mail-t002"] == ("ok escalation", "completed", None)
    assert got["mail-t003"][1:] == ("failed", UNANSWERED)
    assert (await jobs.get("t003")).outcome is Outcome.FAILED


async def test_a_turn_is_one_agents_session_never_another_agents_of_the_same_id(
    pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """Mail to carol's session named like bob's never rides in bob's turn (nor he in hers)."""
    seen: list[list[str]] = []

    @turn_handler
    async def handle_turn(turn: MailTurn) -> Mapping[str, str]:
        seen.append(turn.job_ids)
        return {m.job_id: "ok" for m in turn.mails}

    carol_as_bob = AgentAddress(agent_id="carol", session_id=BOB.session_id)
    await enqueue(
        pg_pool,
        mail_job(1),
        mail_job(2, to=carol_as_bob),
        mail_job(3),
        mail_job(4, to=carol_as_bob),
    )
    worker = Worker(
        jobs=jobs, handler=handle_turn, listener=ManualListener(max_wait_s=0.05), batch=20
    )
    await worker.run(once=True)
    await eventually(lambda: sum(map(len, seen)) == 4, "all four mails answered", within_s=30)
    assert sorted(sorted(turn) for turn in seen) == [["t001", "t003"], ["t002", "t004"]]


async def test_status_counts_the_last_hours_turns_by_kind_with_mails_per_turn(
    pg_pool: Pool, database_url: str
) -> None:
    """Status shows turns, mails and mails per turn, by first mail's kind and how they ran.

    The reports wait for their digest; made due (by SQL), a worker's turn of them ran
    ``digest``.
    """

    @turn_handler
    async def handle_turn(turn: MailTurn) -> Mapping[str, str]:
        return {m.job_id: "ok" for m in turn.mails}

    jobs = PostgresJobs(pg_pool, clock=SystemClock())  # status counts the last hour
    await enqueue(pg_pool, *(mail_job(n, kind="report") for n in (1, 2, 3)))
    await pg_pool.execute("UPDATE birddog.jobs SET digest_at = now() - interval '1 minute'")
    await pg_pool.execute("SELECT birddog.queue_heads_repair()")
    listener = ManualListener(max_wait_s=0.05)
    metrics = WorkerMetrics()
    digest = Worker(jobs=jobs, handler=handle_turn, listener=listener, batch=20, metrics=metrics)
    await digest.run(once=True)
    counted = metrics.exposition().decode()
    assert 'birddog_turns_total{how="digest",kind="report"} 1.0' in counted, counted
    assert 'how="worker"' not in counted
    await enqueue(pg_pool, mail_job(4), mail_job(5))
    await Worker(jobs=jobs, handler=handle_turn, listener=listener, batch=1).run(once=True)
    shown = await cli(database_url, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["turns"] == [
        {
            "kind": "report",
            "how": "digest",
            "turns": 1,
            "mails": 3,
            "spawns": 0,
            "mails_per_turn": 3.0,
        },
        {
            "kind": "task",
            "how": "worker",
            "turns": 2,
            "mails": 2,
            "spawns": 0,
            "mails_per_turn": 1.0,
        },
    ]
    table = (await cli(database_url, "status")).stdout
    assert "turns settled in the last 1h 00m" in table
