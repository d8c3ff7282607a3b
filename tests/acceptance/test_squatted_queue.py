"""A queue squatted by a claim that never ends: `check` names it, `jobs cancel` frees it.

The attack of SECURITY.md's item 3, by SQL under a worker's login: it claims the head of
bob's queue with a lease to 9999-12-31 (clamped to the server's hour) and would renew it
for ever, so bob's next job waits. `birddog check` names the held queue, with the job
that frees it; `birddog jobs cancel` cuts the lease to the cancel grace, the squatter's
heartbeats no longer extend it, a reaper settles the job cancelled, and bob's real mail
is answered by a worker.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg

from birddog.clock import SystemClock
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from tests.support import make_job
from tests.support.cli import cli
from tests.support.waiting import eventually

FOREVER = datetime(9999, 12, 31, tzinfo=UTC)
ENQUEUE = (
    "SELECT * FROM birddog.enqueue($1, $2, 'default', 0::smallint, $3, NULL, NULL, NULL, false)"
)
CLAIM = (
    "SELECT job_id, claim_token, lease_expires_at "
    "FROM birddog.claim(ARRAY['s-bob'], 1, $1, 'w-squatter', 1, now(), 'birddog:')"
)
HEARTBEAT = "SELECT birddog.heartbeat($1, $2, $3)"


async def test_a_squatted_queue_is_named_by_check_and_freed_by_jobs_cancel(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """The squatter's job settles cancelled within the grace; bob's real mail is answered."""
    for job_id in ("squat", "real"):
        job = make_job(job_id)
        await pg_pool.execute(ENQUEUE, job.job_id, job.queue, json.dumps(job.payload))
    worker = await asyncpg.connect(logins["worker"])
    try:
        [held] = await worker.fetch(CLAIM, FOREVER)
        assert held["job_id"] == "squat"
        assert held["lease_expires_at"] < datetime.now(UTC) + timedelta(hours=1, minutes=1)
        # An hour later (aged by SQL), it still holds the queue and bob's mail waits.
        await pg_pool.execute(
            "UPDATE birddog.jobs SET started_at = now() - interval '2 hours' WHERE job_id = 'squat'"
        )
        checked = await cli(database_url, "check", "--json")
        assert checked.returncode == 1, checked.stdout + checked.stderr
        [problem] = [
            p for p in json.loads(checked.stdout)["problems"] if p["check"] == "queue_held"
        ]
        assert (problem["job_id"], problem["worker_id"], problem["waiting"]) == (
            "squat",
            "w-squatter",
            1,
        )
        assert "birddog jobs cancel squat frees it" in problem["message"]

        await pg_pool.execute("UPDATE birddog.limits SET cancel_grace_s = 0.5")
        cancelled = await cli(database_url, "jobs", "cancel", "squat")
        assert cancelled.returncode == 0, cancelled.stderr
        assert "no longer holds the queue" in cancelled.stdout
        # The squatter's heartbeat hears the cancel and no longer extends the lease.
        assert await worker.fetchval(HEARTBEAT, "squat", held["claim_token"], FOREVER) is True
        lease = await pg_pool.fetchval(
            "SELECT lease_expires_at - cancel_requested_at FROM birddog.jobs WHERE job_id = 'squat'"
        )
        assert lease <= timedelta(seconds=0.5)
    finally:
        await worker.close()

    jobs = PostgresJobs(pg_pool, clock=SystemClock(), kill_grace_s=0)
    await eventually(
        jobs.recover_expired,
        "the reaper settling the squatter's job once its cut lease ends",
        until=lambda handled: ("squat", "cancelled") in handled,
        within_s=10,
    )
    answered = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert answered.returncode == 0, answered.stderr
    rows = await pg_pool.fetch("SELECT job_id, outcome FROM birddog.jobs")
    states = {row["job_id"]: row["outcome"] for row in rows}
    assert states == {"squat": "cancelled", "real": "completed"}
    after = await cli(database_url, "check", "--json")
    assert "queue_held" not in after.stdout
