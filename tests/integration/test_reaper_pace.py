"""The daemon's lease reaper keeps pace with the shortest lease in use, not only its own.

A lease is the claimer's: a worker with a shorter ``BIRDDOG_JOB_LEASE_S``, an MCP server's
tasks, a probe. The daemon here has the default 60 s lease; a job claimed with a 1 s lease
and never renewed must be reaped within a few seconds, not half a minute later.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from birddog.clock import SystemClock
from birddog.core.jobs import Job
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import Pool
from birddog.processes.daemon import run_daemon
from birddog.processes.sides import REAP_EVERY_S
from birddog.settings import Settings
from tests.support import eventually


async def test_a_short_lease_is_reaped_soon_by_a_daemon_with_a_long_one(
    database_url: str, pg_pool: Pool, tmp_path: Path
) -> None:
    """Claimed for 1 s and abandoned, the job settles within seconds under a 60 s daemon."""
    async with pg_pool.acquire() as conn:
        await enqueue_accepted_job(conn, Job(job_id="short-1", queue="s-short", payload={"x": 1}))
    claimed = await PostgresJobs(pg_pool, clock=SystemClock()).claim(
        queues=["s-short"], lease_s=1.0
    )
    assert claimed is not None
    settings = Settings(
        database_url=database_url,
        spool_path=tmp_path / "spool.db",
        metrics_port=0,
        job_lease_s=60.0,
        kill_grace_s=0.0,
    )
    daemon = asyncio.ensure_future(run_daemon(settings))
    try:

        async def state() -> str:
            found: str = await pg_pool.fetchval(
                "SELECT state FROM birddog.jobs WHERE job_id = 'short-1'"
            )
            return found

        # The lease ends 1 s after the claim; the reaper runs every REAP_EVERY_S at most.
        await eventually(
            state, "the abandoned job reaped", until=lambda s: s != "running",
            within_s=1.0 + 3 * REAP_EVERY_S,
        )  # fmt: skip
    finally:
        if not daemon.done():  # inside run_daemon, SIGTERM is the daemon's stop
            os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(daemon, timeout=30)
