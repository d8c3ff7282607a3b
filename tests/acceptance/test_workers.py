"""Jobs as the processes run them: one turn per session, unstorable results, the bounce."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

from birddog.bootstrap import open_adapters
from birddog.cli.worker import EVERY_QUEUE_NOTICE
from birddog.postgres.pool import Pool
from birddog.processes.probe import run_probe
from birddog.settings import Settings
from tests.support import enqueue, eventually, make_job
from tests.support.cli import Daemon, cli
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness


def turns_of(log: Path, session: str) -> list[tuple[str, float, float]]:
    """The turns the handler recorded for ``session``: (command id, began, ended), by start."""
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    return sorted(
        (
            (command, float(began), float(ended))
            for sid, command, began, ended in rows
            if sid == session
        ),
        key=lambda turn: turn[1],
    )


async def test_three_jobs_of_one_session_across_two_workers_never_overlap(
    database_url: str, pg_pool: Pool, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    """Two worker processes run one session's jobs one at a time, in priority then enqueue order."""
    log = tmp_path / "turns.log"
    log.touch()
    now = datetime.now(UTC)
    await enqueue(pg_pool, make_job("job-a", with_mail=False), created_at=now - timedelta(3))
    await enqueue(pg_pool, make_job("job-b", with_mail=False), created_at=now - timedelta(2))
    await enqueue(pg_pool, make_job("job-c", with_mail=False, priority=5), created_at=now)
    await enqueue(
        pg_pool, *(make_job(f"x-{i}", session=f"s-x{i}", with_mail=False) for i in range(3))
    )
    workers = [
        daemons(
            "--handler",
            "tests.acceptance.handlers:turn",
            command="worker",
            TURNS_LOG=str(log),
            BIRDDOG_WORKER_CONCURRENCY="4",
        )
        for _ in range(2)
    ]

    async def all_settled() -> bool:
        left: int = await pg_pool.fetchval(
            "SELECT count(*) FROM birddog.jobs WHERE state <> 'settled'"
        )
        return left == 0

    await eventually(all_settled, "every job settled", within_s=60)
    for worker in workers:
        code, text = worker.terminate()
        assert code == 0, text[-2000:]
        assert "Traceback" not in text

    turns = turns_of(log, "s-bob")
    assert [command for command, _, _ in turns] == ["cmd-job-c", "cmd-job-a", "cmd-job-b"]
    for (_, _, ended), (_, began, _) in pairwise(turns):
        assert ended <= began
    stored = await pg_pool.fetch(
        "SELECT started_at, settled_at FROM birddog.jobs WHERE queue = 's-bob' ORDER BY started_at"
    )
    # The stored times come from each worker's clock, read before its round trip, so a
    # claim's start may precede, by that round trip, the settlement that freed the session:
    # the turns above (timed inside the handler) are what shows that none overlap; the
    # rows show that the session's jobs started one after another, in the same order.
    assert [row["started_at"] for row in stored] == sorted(row["started_at"] for row in stored)
    assert all(row["settled_at"] is not None for row in stored)
    assert len(turns_of(log, "s-x0")) == 1
    assert sum(len(turns_of(log, f"s-x{i}")) for i in range(3)) == 3


async def test_a_worker_per_agent_answers_every_session_of_its_agent_only(
    database_url: str, pg_pool: Pool
) -> None:
    """Two `worker --agent` runs each answer their own agent's three sessions, nothing else."""
    await enqueue(
        pg_pool,
        *(
            make_job(f"{agent}-{n}", agent=agent, session=f"s-{agent}-{n}")
            for agent in ("school", "ceo")
            for n in range(3)
        ),
        make_job("stranger-0", agent="stranger", session="s-stranger"),
    )
    runs = await asyncio.gather(
        *(
            cli(
                database_url,
                "worker",
                "--agent",
                agent,
                "--handler",
                "tests.acceptance.handlers:serving",
                "--once",
                SERVING_AGENT=agent,
            )
            for agent in ("school", "ceo")
        )
    )
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "settled 3 jobs: 3 completed"
        assert EVERY_QUEUE_NOTICE not in run.stderr
    jobs = await pg_pool.fetch("SELECT job_id, agent_id, state, result_content FROM birddog.jobs")
    assert {row["job_id"]: (row["state"], row["result_content"]) for row in jobs} == {
        **{
            f"{agent}-{n}": ("settled", f"answered by {agent}")
            for agent in ("school", "ceo")
            for n in range(3)
        },
        "stranger-0": ("queued", None),
    }
    replies = await pg_pool.fetch("SELECT in_reply_to, reply FROM birddog.outbox")
    assert len(replies) == 12
    for row in replies:
        agent = row["in_reply_to"].removeprefix("mail-").split("-")[0]
        assert row["reply"]["content"] == f"answered by {agent}"
        assert row["reply"]["from"]["agentId"] == agent


async def test_worker_once_settles_unstorable_results_failed_and_says_so(
    database_url: str, pg_pool: Pool
) -> None:
    """`worker --once` settles each unstorable result failed, prints a summary, warns of nothing."""
    names = ["nul", "surrogate", "huge", "number", "fine"]
    await enqueue(pg_pool, *(make_job(name, session=f"s-{name}") for name in names))
    worked = await cli(
        database_url,
        "worker",
        "--handler",
        "tests.acceptance.handlers:unstorable",
        "--once",
        BIRDDOG_MAX_CONTENT_BYTES="1000",
        PYTHONASYNCIODEBUG="1",
        PYTHONWARNINGS="default",
    )
    assert worked.returncode == 0, worked.stderr
    assert worked.stdout.strip() == "settled 5 jobs: 1 completed, 4 failed"
    notices = [json.loads(line) for line in worked.stderr.splitlines() if '"notice"' in line]
    assert [notice["text"] for notice in notices] == [EVERY_QUEUE_NOTICE]
    for noise in ("Traceback", "Task exception", "never retrieved", "never awaited", "destroyed"):
        assert noise not in worked.stderr
    lines = [line for line in worked.stderr.splitlines() if line.strip()]
    # Debug mode (set above) reports a callback slower than 100 ms, which a loaded machine
    # makes; every other line is the JSON log.
    plain = [line for line in lines if not line.startswith("{")]
    assert all(line.startswith("Executing ") and " took " in line for line in plain), plain
    events = [json.loads(line)["event"] for line in lines if line.startswith("{")]
    assert events.count("job_result_unstorable") == 4
    outcomes = await pg_pool.fetch("SELECT job_id, outcome FROM birddog.jobs ORDER BY job_id")
    assert {row["job_id"]: row["outcome"] for row in outcomes} == {
        "fine": "completed",
        "huge": "failed",
        "nul": "failed",
        "number": "failed",
        "surrogate": "failed",
    }
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 10


JOBS_PER_ROUND = 100
"""Jobs of one session for each ``worker --once`` round."""


async def test_worker_once_leaves_nothing_queued_behind_its_own_running_jobs(
    database_url: str, pg_pool: Pool
) -> None:
    """`worker --once --concurrency 8` exits only when all jobs of one session settled, 5 times.

    The race was at the queue's end (the last claims still running when the queue looked
    empty), so rounds count more than the jobs in each.
    """
    for round_ in range(5):
        jobs = [make_job(f"r{round_}-{i:04}", with_mail=False) for i in range(JOBS_PER_ROUND)]
        await enqueue(pg_pool, *jobs)
        worked = await cli(
            database_url,
            "worker",
            "--handler",
            "tests.acceptance.handlers:instant",
            "--once",
            "--concurrency",
            "8",
            timeout_s=300,
        )
        assert worked.returncode == 0, worked.stderr[-2000:]
        left = await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs WHERE state <> 'settled'")
        assert (round_, left) == (round_, 0), worked.stdout
        settled = f"settled {JOBS_PER_ROUND} jobs: {JOBS_PER_ROUND} completed"
        assert worked.stdout.strip() == settled


async def test_a_job_nobody_claims_is_cancelled_by_the_daemon_and_the_sender_hears(
    daemons: Callable[..., Daemon], harness: Harness, inbox: TestInbox, pg_pool: Pool
) -> None:
    """The daemon's reaper cancels a job queued past its age; the reply reaches the recipient."""
    await harness.add_agent("alice")
    await harness.add_agent("carol")
    await enqueue(
        pg_pool,
        make_job("lonely", session="s-nobody-serves"),
        created_at=datetime.now(UTC) - timedelta(minutes=2),
    )
    daemon = daemons(BIRDDOG_JOB_MAX_QUEUED_S="60", BIRDDOG_JOB_LEASE_S="2")

    async def both_replied() -> bool:
        return len(inbox.replies) == 2

    await eventually(both_replied, "both replies of the cancelled job", within_s=60)
    code, text = daemon.terminate()
    assert code == 0, text[-2000:]
    text_of_bounce = "BirdDog cancelled this job: no worker claimed it within 1 min"
    assert {(r.content, r.reply.outcome.value) for r in inbox.replies} == {
        (text_of_bounce, "cancelled")
    }
    assert '"job_queued_too_long"' in text


async def test_a_worker_taking_every_queue_never_steals_the_probe(
    database_url: str, daemons: Callable[..., Daemon], pg_pool: Pool
) -> None:
    """With a worker on every queue running, 10 of 10 probes pass and leave no dead letter."""
    worker = daemons("--handler", "tests.acceptance.handlers:echo", command="worker")
    daemon = daemons()

    async def both_running() -> bool:
        kinds = await pg_pool.fetch("SELECT DISTINCT kind FROM birddog.daemons")
        return {row["kind"] for row in kinds} == {"drain", "worker"}

    # A probe that ran before the worker started would prove nothing.
    await eventually(both_running, "the worker and the daemon", within_s=60)
    async with open_adapters(Settings(database_url=database_url), pool_size=4) as adapters:
        results = [await run_probe(adapters, timeout_s=30) for _ in range(10)]
    assert [r.ok for r in results] == [True] * 10, [r.message for r in results]
    for process in (worker, daemon):
        code, text = process.terminate()
        assert code == 0, text[-2000:]
    jobs = await pg_pool.fetch("SELECT queue, outcome, worker_id FROM birddog.jobs")
    assert len(jobs) == 10
    assert all(row["queue"].startswith("birddog:probe:") for row in jobs)
    assert {(row["outcome"], row["worker_id"]) for row in jobs} == {("completed", None)}
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox WHERE state = 'dead'") == 0
