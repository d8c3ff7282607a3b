"""Jobs in agents' terms on real PostgreSQL: agents, priority, not-before, expiry, heads.

The queue heads are what a claim reads: kept by the job functions, repaired after jobs
are written by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from birddog.clock import SystemClock
from birddog.core.jobs import Job
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import Outcome
from birddog.engine import EngineConfig
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, RecordingTransport
from tests.support import ALICE, T0, claim, enqueue, eventually, job_row, make_job
from tests.support.stacks import pg_room


def timed(job: Job, **fields: object) -> Job:
    """``job`` with the timing fields given (validated, as agent_job would)."""
    return Job.model_validate({**job.model_dump(by_alias=False), **fields})


async def heads(pool: Pool) -> dict[str, tuple[str | None, int]]:
    """Each queue head row: the head's job id and the queue's running count."""
    rows = await pool.fetch("SELECT queue, job_id, running FROM birddog.queue_heads")
    return {row["queue"]: (row["job_id"], row["running"]) for row in rows}


async def finish(jobs: PostgresJobs, claimed_job_id: str, token: str) -> None:
    """Settle a claimed job completed."""
    await jobs.finish(
        job_id=claimed_job_id, claim_token=token, event=SettleRequested(Outcome.COMPLETED, "ok")
    )


async def test_a_claim_by_agent_takes_only_that_agents_sessions(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Agents' workers claim every session of their agent, and never another agent's job."""
    await enqueue(
        pg_pool,
        make_job("school-1", agent="school", session="s-1"),
        make_job("ceo-1", agent="ceo", session="s-2", priority=9),
        make_job("school-2", agent="school", session="s-3"),
        make_job("no-mail", session="s-4", with_mail=False),
    )
    taken = [c.job.job_id for c in await jobs.claim_many(agents=["school"], limit=5)]
    assert sorted(taken) == ["school-1", "school-2"]
    assert (await claim(jobs, agents=["ceo", "nobody"])).job.job_id == "ceo-1"
    assert await jobs.claim(agents=["school", "ceo"]) is None
    assert (await claim(jobs)).job.job_id == "no-mail"  # only a worker of every queue


async def test_a_session_id_of_another_agent_never_heads_this_agents_queue(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Mail to carol:s-bob, older and at the top priority, is carol's queue, not bob's s-bob."""
    await enqueue(
        pg_pool,
        make_job("squat", agent="carol", session="s-bob", priority=32767),
        created_at=T0 - timedelta(hours=23),
    )
    await enqueue(pg_pool, make_job("bobs", agent="bob", session="s-bob"), created_at=T0)
    bobs = await claim(jobs, agents=["bob"])
    assert bobs.job.job_id == "bobs"
    # One turn at a time per session: bob's s-bob and carol's s-bob are two sessions.
    carols = await claim(jobs, agents=["carol"])
    assert carols.job.job_id == "squat"
    keys = await pg_pool.fetch("SELECT queue, agent_id, running FROM birddog.queue_heads")
    assert sorted((r["agent_id"], r["queue"], r["running"]) for r in keys) == [
        ("bob", "s-bob", 1),
        ("carol", "s-bob", 1),
    ]
    assert await jobs.repair_queue_heads() == 0


async def test_a_priority_job_overtakes_the_queued_jobs_of_its_session(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A later job with a higher priority is claimed before the older ones of its session."""
    await enqueue(pg_pool, make_job("first"), make_job("second"), created_at=T0)
    await enqueue(pg_pool, make_job("urgent", priority=5), created_at=T0 + timedelta(seconds=1))
    order = []
    for _ in range(3):
        claimed = await claim(jobs, agents=["bob"])
        order.append(claimed.job.job_id)
        await finish(jobs, claimed.job.job_id, claimed.claim_token)
    assert order == ["urgent", "first", "second"]
    assert await heads(pg_pool) == {}


async def test_a_not_before_job_is_not_claimed_early_and_is_claimed_on_time(
    pg_pool: Pool,
) -> None:
    """A job sent for 1.5 s later is not claimed before then, and is claimed once it is due."""
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    start = datetime.now(UTC) + timedelta(seconds=1.5)
    await enqueue(pg_pool, timed(make_job("later"), not_before=start))
    assert await jobs.claim() is None
    claimed = await eventually(
        lambda: jobs.claim(agents=["bob"]),
        "the job once its not-before passed",
        until=lambda c: c is not None,
        within_s=15,
    )
    assert claimed is not None
    assert claimed.job.job_id == "later"
    assert claimed.job.not_before == start
    started = await pg_pool.fetchval("SELECT started_at FROM birddog.jobs WHERE job_id = 'later'")
    assert started >= start


async def test_a_job_not_yet_due_never_blocks_the_jobs_behind_it(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """A queue's head that is not yet due lets the due job behind it run, and runs when due."""
    await enqueue(
        pg_pool, timed(make_job("later", priority=9), not_before=T0 + timedelta(minutes=5))
    )
    await enqueue(pg_pool, make_job("now"))
    first = await claim(jobs)
    assert first.job.job_id == "now"
    await finish(jobs, first.job.job_id, first.claim_token)
    assert await jobs.claim() is None
    assert await jobs.not_yet_due() == (1, T0 + timedelta(minutes=5))
    clock.advance(300)
    assert (await claim(jobs)).job.job_id == "later"


async def test_an_expired_job_is_cancelled_and_its_reply_reaches_the_mailbox(
    pg_pool: Pool,
) -> None:
    """A job nobody took within its --expires-in settles cancelled; its reply is delivered."""
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("alice", kind="mailbox")
    await enqueue(pg_pool, timed(make_job("brief", reply_to=[ALICE]), expires_in_s=1.0))
    stored = await jobs.get("brief")
    assert stored.expires_in_s == 1.0
    assert await jobs.cancel_queued_too_long() == []  # not yet
    await eventually(
        jobs.cancel_queued_too_long,
        "the expired job's cancellation",
        until=lambda done: done == [("brief", "cancelled")],
        within_s=15,
    )
    assert await jobs.claim() is None
    row = await job_row(pg_pool, "brief")
    text = "BirdDog cancelled this job: no worker claimed it within its expiry of 1 s"
    assert (row["state"], row["outcome"], row["result_content"]) == ("settled", "cancelled", text)
    engine = pg_room(pg_pool, RecordingTransport(True), config=EngineConfig(linger_s=0.001))
    drain = engine.engine()
    try:

        async def delivered() -> asyncpg.Record | None:
            await drain.drain_page(after_key=None)
            return await pg_pool.fetchrow(
                "SELECT agent_id, outcome, reply FROM birddog.mailbox WHERE in_reply_to = $1",
                "mail-brief",
            )

        entry = await eventually(delivered, "the cancellation's reply in alice's mailbox")
    finally:
        await drain.close(grace_s=1)
    assert entry is not None
    assert (entry["agent_id"], entry["outcome"]) == ("alice", "cancelled")
    assert entry["reply"]["content"] == text


async def test_the_queue_heads_follow_every_job_write(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """Enqueue, claim, requeue, cancel and settle each leave the queue's head row exact."""
    await enqueue(pg_pool, make_job("a", max_recoveries=1), make_job("b"), created_at=T0)
    assert await heads(pg_pool) == {"s-bob": ("a", 0)}
    claimed = await claim(jobs)
    assert await heads(pg_pool) == {"s-bob": ("b", 1)}
    assert await jobs.interrupt(job_id="a", claim_token=claimed.claim_token, diagnostic="x") is None
    assert await heads(pg_pool) == {"s-bob": ("a", 0)}
    await jobs.cancel(job_id="b", content="")
    assert await heads(pg_pool) == {"s-bob": ("a", 0)}
    claimed = await claim(jobs)
    assert await heads(pg_pool) == {"s-bob": (None, 1)}
    await finish(jobs, "a", claimed.claim_token)
    assert await heads(pg_pool) == {}
    assert await jobs.repair_queue_heads() == 0


async def test_one_queue_and_many_queues_recompute_the_same_heads(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A queue's row refreshed alone (settle, enqueue) equals its row refreshed among others."""
    later = T0 + timedelta(minutes=5)
    await enqueue(
        pg_pool,
        make_job("a1", session="s-a"),
        make_job("a2", session="s-a", priority=5),
        timed(make_job("b1", session="s-b"), not_before=later),
        timed(make_job("b2", session="s-b", priority=2), not_before=later + timedelta(hours=1)),
        make_job("c1", session="s-c"),
        make_job("d1", session="s-d", agent="dora"),
        created_at=T0,
    )
    await claim(jobs, queues=["s-c"])  # running, nothing queued behind it
    await claim(jobs, queues=["s-a"])  # running, one queued behind it
    found = await pg_pool.fetch("SELECT DISTINCT queue_key FROM birddog.jobs ORDER BY 1")
    queues = [row["queue_key"] for row in found] + ["nobody\x1fs-none"]
    read = (
        "SELECT queue, agent_id, priority, created_at, job_id, due_at, running"
        " FROM birddog.queue_heads ORDER BY queue"
    )
    await pg_pool.execute("DELETE FROM birddog.queue_heads")
    for queue in queues:
        await pg_pool.execute("SELECT birddog._queue_heads_refresh(ARRAY[$1])", queue)
    one_by_one = [dict(row) for row in await pg_pool.fetch(read)]
    await pg_pool.execute("DELETE FROM birddog.queue_heads")
    await pg_pool.execute("SELECT birddog._queue_heads_refresh($1::text[])", queues)
    together = [dict(row) for row in await pg_pool.fetch(read)]
    assert one_by_one == together
    assert [(row["queue"], row["job_id"], row["running"]) for row in together] == [
        ("s-a", "a1", 1),
        ("s-b", "b2", 0),
        ("s-c", None, 1),
        ("s-d", "d1", 0),
    ]
    assert together[1]["due_at"] == later
    assert await jobs.repair_queue_heads() == 0


async def test_corrupted_queue_heads_never_start_a_second_turn_and_are_repaired(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Heads broken by SQL: the claim stays one turn per session, and the repair restores them."""
    await enqueue(pg_pool, make_job("a"), make_job("b"), make_job("c", session="s-c"))
    running = await claim(jobs)
    assert running.job.job_id in {"a", "c"}
    # A head row that says the busy queue is free, and one that lost its queue entirely.
    await pg_pool.execute("UPDATE birddog.queue_heads SET running = 0")
    await pg_pool.execute("DELETE FROM birddog.queue_heads WHERE queue <> $1", running.job.queue)
    assert await jobs.claim() is None  # the busy queue's slot is counted from the jobs
    # That claim refreshed the busy queue's row; the lost queue needs the repair.
    assert await heads(pg_pool) == {
        running.job.queue: (None if running.job.job_id == "c" else "b", 1)
    }
    assert await jobs.repair_queue_heads() == 1
    other = await claim(jobs)
    assert other.job.queue != running.job.queue
    assert await jobs.repair_queue_heads() == 0
    # A job written by hand (no head): invisible to the claim until repaired.
    await pg_pool.execute(
        "INSERT INTO birddog.jobs (job_id, queue, lane, state, payload) "
        "VALUES ('by-hand', 's-hand', 'default', 'queued', '{}')"
    )
    assert await jobs.claim(queues=["s-hand"]) is None
    assert await jobs.repair_queue_heads() == 1
    assert (await claim(jobs, queues=["s-hand"])).job.job_id == "by-hand"


async def test_a_reports_age_limit_and_expiry_count_from_its_digest(pg_pool: Pool) -> None:
    """Two days old but due for its digest minutes ago, a report is not bounced; a task is.

    Its expiry counts from its digest too: due long enough ago, it is cancelled saying so.
    """
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    await enqueue(
        pg_pool,
        make_job("old-task"),
        make_job("old-report", session="s-2", kind="report"),
        timed(make_job("brief-report", session="s-3", kind="report"), expires_in_s=600.0),
        created_at=two_days_ago,
    )
    row = await job_row(pg_pool, "brief-report")
    assert row["expires_at"] - row["digest_at"] == timedelta(minutes=10)
    await pg_pool.execute(
        "UPDATE birddog.jobs SET digest_at = now() - interval '5 minutes', "
        "expires_at = now() + interval '5 minutes' WHERE kind = 'report'"
    )  # as enqueue sets them for a digest five minutes ago (the one without expiry: none)
    await pg_pool.execute("UPDATE birddog.jobs SET expires_at = NULL WHERE job_id = 'old-report'")
    assert await jobs.cancel_queued_too_long() == [("old-task", "cancelled")]
    await pg_pool.execute(
        "UPDATE birddog.jobs SET digest_at = digest_at - interval '10 minutes', "
        "expires_at = expires_at - interval '10 minutes' WHERE job_id = 'brief-report'"
    )
    assert await jobs.cancel_queued_too_long() == [("brief-report", "cancelled")]
    text = (await job_row(pg_pool, "brief-report"))["result_content"]
    assert text == "BirdDog cancelled this job: no worker claimed it within its expiry of 10 min"
    await pg_pool.execute(
        "UPDATE birddog.jobs SET digest_at = now() - interval '25 hours' "
        "WHERE job_id = 'old-report'"
    )
    assert await jobs.cancel_queued_too_long() == [("old-report", "cancelled")]


async def test_queues_waiting_for_their_digest_never_hide_a_task_from_a_claim(
    pg_pool: Pool,
) -> None:
    """Ten older queues of reports waiting for their digest: a claim of one takes the task.

    Their head rows are due only at their digest, so no pass of the claim spends itself on
    them; once due (by SQL, heads repaired), a batched claim takes a queue's reports at once.
    """
    jobs = PostgresJobs(pg_pool, clock=SystemClock())  # digests are judged at now()
    reports = [make_job(f"report-{n}", session=f"s-{n}", kind="report") for n in range(10)]
    await enqueue(pg_pool, *reports, created_at=datetime.now(UTC) - timedelta(minutes=5))
    await enqueue(pg_pool, make_job("task", session="s-task"))
    due = await pg_pool.fetchval(
        "SELECT min(due_at) FROM birddog.queue_heads WHERE queue <> 's-task'"
    )
    assert due == await pg_pool.fetchval("SELECT min(digest_at) FROM birddog.jobs")
    assert [c.job.job_id for c in await jobs.claim_many(limit=1)] == ["task"]
    assert await jobs.claim_many(limit=10) == []
    await pg_pool.execute(
        "UPDATE birddog.jobs SET digest_at = now() - interval '1 minute' WHERE kind = 'report'"
    )
    await pg_pool.execute("SELECT birddog.queue_heads_repair()")
    taken = await jobs.claim_many(limit=10, batch=20)
    assert sorted(c.job.job_id for c in taken) == sorted(r.job_id for r in reports)
