"""Agents that are programs: the worker runs a command per job and kills what it spawned.

The worker runs in this process over the real job store; the command is a real process.
Each stubborn command starts a grandchild that ignores SIGTERM (and ignores it itself),
writes both pids to a file, and sleeps: only killing its process group ends it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from birddog import AgentWork, Job, Mail, Outcome, Recovery, agent_job
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.spawn import command_handler
from birddog.testing import ManualListener
from birddog.worker import Worker
from tests.support import ALICE, BOB, enqueue, eventually, job_row, process_running

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def ask_job(job_id: str, content: str = "hello", *, recovery: int | None = None) -> Job:
    mail = Mail(
        key=f"mail-{job_id}", to=BOB, from_=ALICE, reply_to=[ALICE], content=content, created_at=1
    )
    work = AgentWork(
        job_id=job_id,
        session_id=BOB.session_id,
        command_fact_id=f"cmd-{job_id}",
        recovery=None if recovery is None else Recovery(max_recoveries=recovery),
    )
    return agent_job(work, mail)


def worker_for(jobs: PostgresJobs, command: str, **timing: float) -> Worker:
    return Worker(
        jobs=jobs,
        handler=command_handler(command, grace_s=timing.get("grace_s", 0.3)),
        listener=ManualListener(max_wait_s=0.05),
        lease_s=timing.get("lease_s", 3.0),
        handler_timeout_s=timing.get("handler_timeout_s", 30.0),
        shutdown_grace_s=timing.get("shutdown_grace_s", 0.2),
    )


def stubborn(pids: Path) -> str:
    return f'sh -c \'trap "" TERM; (trap "" TERM; sleep 600) & echo "$$ $!" >> {pids}; sleep 600\''


async def started(pids: Path) -> None:
    """Wait until a stubborn command has written its pids (a whole line)."""
    await eventually(
        lambda: pids.read_text() if pids.exists() else None,
        f"the command's pids in {pids.name}",
        until=lambda text: text is not None and text.endswith("\n"),
        within_s=30,
    )


def read_pids(path: Path, run: int | None = None) -> list[int]:
    """The pids a stubborn command wrote: of one run (a line each), or of every run."""
    lines = path.read_text().splitlines()
    chosen = lines if run is None else [lines[run]]
    return [int(pid) for line in chosen for pid in line.split()]


async def reply_content(pool: Pool, job_id: str) -> tuple[str, dict[str, object]]:
    reply = await pool.fetchval(
        "SELECT reply FROM birddog.outbox WHERE key = $1", f"outbox:mail-{job_id}:reply:0"
    )
    assert reply is not None, "no reply was fanned out"
    return reply["content"], reply["reply"]


async def test_stdout_is_the_reply_and_the_job_id_is_in_the_environment(
    pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """A command's stdout is the completed reply; BIRDDOG_JOB_ID names the job it runs."""
    await enqueue(pg_pool, ask_job("c1", "hello"))
    await worker_for(jobs, "sh -c 'tr a-z A-Z; echo \" $BIRDDOG_JOB_ID\"'").run(once=True)
    assert (await jobs.get("c1")).outcome is Outcome.COMPLETED
    content, _ = await reply_content(pg_pool, "c1")
    assert content == "HELLO c1\n"


async def test_a_non_zero_exit_fails_with_the_end_of_stderr(
    pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """Exit 4 settles failed; the diagnostic is the status and stderr's last words, masked."""
    await enqueue(pg_pool, ask_job("c2"))
    command = "sh -c 'echo starting >&2; echo \"denied: Bearer sk-live-123\" >&2; exit 4'"
    await worker_for(jobs, command).run(once=True)
    assert (await jobs.get("c2")).outcome is Outcome.FAILED
    _, facts = await reply_content(pg_pool, "c2")
    assert facts["diagnostic"] == (
        "CommandFailed: exit status 4: starting denied: Bearer [redacted]"
    )


async def test_the_handler_timeout_kills_the_whole_group(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """Past the handler timeout, no process of the group lives and the job is interrupted."""
    pids = tmp_path / "pids"
    await enqueue(pg_pool, ask_job("c3"))
    await worker_for(jobs, stubborn(pids), handler_timeout_s=1.0).run(once=True)
    spawned = read_pids(pids)
    assert len(spawned) == 2
    assert not any(process_running(pid) for pid in spawned)
    assert (await jobs.get("c3")).outcome is Outcome.INTERRUPTED


async def test_a_timeout_with_budget_left_requeues_after_killing(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """With recovery budget, the job is queued again, and the first run's group is dead."""
    pids = tmp_path / "pids"
    await enqueue(pg_pool, ask_job("c4", recovery=1))
    worker = worker_for(jobs, stubborn(pids), handler_timeout_s=1.0)
    running_worker = asyncio.create_task(worker.run())
    try:
        await eventually(
            lambda: job_row(pg_pool, "c4"),
            "the timed-out job requeued",
            until=lambda row: row["recovery_count"] == 1,
            within_s=30,
        )
        first_run = read_pids(pids, run=0)
        assert not any(process_running(pid) for pid in first_run)
    finally:
        worker.stop.set()
        await asyncio.wait_for(running_worker, 60)
    assert not any(process_running(pid) for pid in read_pids(pids))


async def test_a_recorded_cancellation_kills_the_group(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """Cancelling the running job ends the command's group; the cancellation is the reply."""
    pids = tmp_path / "pids"
    await enqueue(pg_pool, ask_job("c5"))
    run = asyncio.create_task(worker_for(jobs, stubborn(pids), lease_s=0.6).run(once=True))
    await started(pids)
    await jobs.cancel(job_id="c5", content="Cancelled by alice.")
    await asyncio.wait_for(run, 60)
    assert not any(process_running(pid) for pid in read_pids(pids))
    assert (await jobs.get("c5")).outcome is Outcome.CANCELLED


async def test_stopping_the_worker_kills_the_group(
    pg_pool: Pool, jobs: PostgresJobs, tmp_path: Path
) -> None:
    """A worker told to stop ends its commands' groups before it returns."""
    pids = tmp_path / "pids"
    await enqueue(pg_pool, ask_job("c6"))
    worker = worker_for(jobs, stubborn(pids))
    run = asyncio.create_task(worker.run())
    await started(pids)
    worker.stop.set()
    await asyncio.wait_for(run, 60)
    assert not any(process_running(pid) for pid in read_pids(pids))
    assert (await jobs.get("c6")).outcome is Outcome.INTERRUPTED
