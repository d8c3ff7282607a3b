"""The Postgres job store against a real PostgreSQL: claim, heartbeat, cancel, recovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
import structlog

from birddog import (
    InvalidInput,
    JobNotFound,
    JobState,
    Outcome,
    StaleClaim,
    StoreUnavailable,
    UnreadableRow,
)
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.postgres.jobs import (
    LEASE_EXPIRED_DIAGNOSTIC,
    PostgresJobs,
)
from birddog.postgres.pool import Pool, create_pool
from birddog.testing import FrozenClock
from tests.support import ALICE, CAROL, T0, claim, enqueue, job_row, make_job, outbox_rows, wake_at

# ---- claim ---------------------------------------------------------------------------


async def test_claim_runs_the_job_under_a_fresh_token_and_lease(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A claim moves the job to running with a uuid claim token and a lease from the clock."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs, lease_s=30, worker_id="w-1")
    assert claimed.job.job_id == "job-1"
    assert claimed.job.state is JobState.RUNNING
    assert claimed.lease_expires_at == T0 + timedelta(seconds=30)
    assert claimed.recovery_count == 0
    stored = await job_row(pg_pool, "job-1")
    assert str(stored["claim_token"]) == claimed.claim_token
    assert stored["worker_id"] == "w-1"
    assert await jobs.claim() is None


async def claim_in_turn(jobs: PostgresJobs, count: int, **kwargs: Any) -> list[str]:
    """Claim and settle ``count`` jobs one after another; return their ids in claim order."""
    order: list[str] = []
    for _ in range(count):
        claimed = await claim(jobs, **kwargs)
        order.append(claimed.job.job_id)
        await jobs.settle(
            job_id=claimed.job.job_id,
            claim_token=claimed.claim_token,
            outcome=Outcome.COMPLETED,
            content="ok",
        )
    return order


async def test_claim_order_is_priority_then_age(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """Higher priority comes first; among equals, the oldest job."""
    await enqueue(pg_pool, make_job("a-new-low", priority=0), created_at=T0)
    await enqueue(pg_pool, make_job("b-old-low", priority=0), created_at=T0 - timedelta(1))
    await enqueue(pg_pool, make_job("c-new-high", priority=5), created_at=T0)
    await enqueue(pg_pool, make_job("d-old-high", priority=5), created_at=T0 - timedelta(1))
    await enqueue(pg_pool, make_job("e-negative", priority=-3), created_at=T0 - timedelta(9))
    order = await claim_in_turn(jobs, 5)
    assert order == ["d-old-high", "c-new-high", "b-old-low", "a-new-low", "e-negative"]


async def test_claim_order_across_queues_is_priority_then_age(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Heads of different queues are claimed highest priority first, then oldest."""
    await enqueue(pg_pool, make_job("a", session="s-1"), created_at=T0)
    await enqueue(pg_pool, make_job("b", session="s-2"), created_at=T0 - timedelta(1))
    await enqueue(pg_pool, make_job("c", session="s-3", priority=5), created_at=T0)
    order = [(await claim(jobs)).job.job_id for _ in range(3)]
    assert order == ["c", "b", "a"]


async def test_claim_order_by_default_age_follows_enqueue_order(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Without an explicit age, jobs enqueued in one transaction are claimed in that order."""
    ids = ["z", "m", "a", "q"]
    await enqueue(pg_pool, *(make_job(job_id) for job_id in ids))
    assert await claim_in_turn(jobs, len(ids)) == ids


async def test_one_turn_at_a_time_per_queue(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """While a queue's job runs, its next job waits; other queues' jobs are claimed meanwhile."""
    await enqueue(
        pg_pool,
        make_job("bob-1"),
        make_job("bob-2"),
        make_job("carol-1", session="s-carol"),
    )
    first = await claim(jobs)
    assert first.job.job_id == "bob-1"
    assert (await claim(jobs)).job.job_id == "carol-1"
    assert await jobs.claim() is None
    stored = await job_row(pg_pool, "bob-1")
    assert (stored["slot"], stored["started_at"]) == (0, T0)
    await jobs.settle(
        job_id="bob-1", claim_token=first.claim_token, outcome=Outcome.COMPLETED, content="ok"
    )
    assert (await claim(jobs)).job.job_id == "bob-2"


async def test_queue_concurrency_allows_that_many_turns_in_distinct_slots(
    pg_pool: Pool, clock: FrozenClock
) -> None:
    """With a concurrency of 2, two jobs of one queue run at once, in slots 0 and 1."""
    wide = PostgresJobs(pg_pool, clock=clock, queue_concurrency=2)
    await enqueue(pg_pool, *(make_job(f"job-{i}") for i in range(4)))
    claimed = await wide.claim_many(limit=4)
    assert [c.job.job_id for c in claimed] == ["job-0", "job-1"]
    slots = await pg_pool.fetch(
        "SELECT slot FROM birddog.jobs WHERE state = 'running' ORDER BY slot"
    )
    assert [row["slot"] for row in slots] == [0, 1]
    await wide.settle(
        job_id="job-0", claim_token=claimed[0].claim_token, outcome="completed", content="ok"
    )
    [third] = await wide.claim_many(limit=4)
    assert third.job.job_id == "job-2"
    assert (await job_row(pg_pool, "job-2"))["slot"] == 0


async def test_the_database_refuses_a_second_turn_in_one_slot(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Whatever a claimer computes, two running jobs of one queue cannot share a slot."""
    await enqueue(pg_pool, make_job("job-1"), make_job("job-2"))
    await claim(jobs)
    with pytest.raises(asyncpg.UniqueViolationError):
        await pg_pool.execute(
            "UPDATE birddog.jobs SET state = 'running', slot = 0 WHERE job_id = 'job-2'"
        )


async def test_a_racing_claimer_that_loses_its_slot_claims_again_quietly(
    jobs: PostgresJobs, pg_pool: Pool, pg_conn: asyncpg.Connection
) -> None:
    """A claim whose slot another transaction takes first retries, and never raises."""
    await enqueue(pg_pool, make_job("job-1"), make_job("other", session="s-other"))
    async with pg_conn.transaction():
        # Another claimer has put a job of bob's s-bob in slot 0 and not yet committed.
        await pg_conn.execute(
            "INSERT INTO birddog.jobs (job_id, queue, agent_id, lane, state, payload, slot) "
            "VALUES ('racer', 's-bob', 'bob', 'default', 'running', '{}', 0)"
        )
        claiming = asyncio.ensure_future(jobs.claim_many(limit=2))
        done, _ = await asyncio.wait({claiming}, timeout=0.5)
        assert not done  # waiting on the other transaction's slot
    claimed = await asyncio.wait_for(claiming, timeout=10)
    assert [c.job.job_id for c in claimed] == ["other"]
    assert (await job_row(pg_pool, "job-1"))["state"] == "queued"


async def test_claim_takes_only_the_given_queues(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """A claim limited to some queues never takes a job from another queue."""
    await enqueue(
        pg_pool,
        make_job("for-x", session="s-x", priority=9),
        make_job("for-y", session="s-y"),
        make_job("for-z", session="s-z"),
    )
    first = await claim(jobs, queues=["s-y", "s-z"])
    second = await claim(jobs, queues=["s-y", "s-z"])
    assert {first.job.job_id, second.job.job_id} == {"for-y", "for-z"}
    assert await jobs.claim(queues=["s-y", "s-z"]) is None
    assert await jobs.claim(queues=[]) is None
    assert (await claim(jobs)).job.job_id == "for-x"


async def test_reserved_queues_are_claimed_only_when_named(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A claim of every queue never takes a birddog: queue; naming the queue takes it."""
    await enqueue(pg_pool, make_job("probe", session="birddog:probe:n1", priority=9))
    assert await jobs.claim() is None
    assert (await claim(jobs, queues=["birddog:probe:n1"])).job.job_id == "probe"


async def test_claim_many_returns_jobs_in_claim_order(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """claim_many takes up to its limit in one statement, in priority-then-age order."""
    await enqueue(
        pg_pool, *(make_job(f"job-{i}", session=f"s-{i}", priority=i % 3) for i in range(7))
    )
    claimed = await jobs.claim_many(limit=4)
    assert [c.job.priority for c in claimed] == [2, 2, 1, 1]
    assert len({c.claim_token for c in claimed}) == 4
    assert len(await jobs.claim_many(limit=10)) == 3


async def test_claim_skips_a_job_locked_by_another_transaction(
    jobs: PostgresJobs, pg_pool: Pool, pg_conn: asyncpg.Connection
) -> None:
    """A head locked by another connection is skipped at once, and the job behind it waits."""
    await enqueue(
        pg_pool,
        make_job("first", priority=1),
        make_job("behind-first"),
        make_job("second", session="s-other"),
    )
    async with pg_conn.transaction():
        await pg_conn.execute("SELECT 1 FROM birddog.jobs WHERE job_id = 'first' FOR UPDATE")
        claimed = await asyncio.wait_for(jobs.claim_many(limit=3), timeout=5)
        assert [c.job.job_id for c in claimed] == ["second"]
    assert (await claim(jobs)).job.job_id == "first"


class CountedStatements:
    """Counts the claim statements a job store sends (the database still answers them)."""

    def __init__(self, jobs: PostgresJobs) -> None:
        self.count = 0
        self._fetch = jobs.claims._fetch_claim
        jobs.claims._fetch_claim = self._counted  # type: ignore[method-assign]

    async def _counted(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return await self._fetch(*args, **kwargs)


async def test_a_claim_past_a_held_head_fills_its_limit_from_other_queues_in_one_statement(
    jobs: PostgresJobs, pg_pool: Pool, pg_conn: asyncpg.Connection
) -> None:
    """A head held by another transaction is passed over within the call: the limit is filled."""
    await enqueue(
        pg_pool,
        make_job("held", session="s-1", priority=2),
        make_job("second", session="s-2", priority=1),
        make_job("third", session="s-3"),
    )
    statements = CountedStatements(jobs)
    async with pg_conn.transaction():
        await pg_conn.execute("SELECT 1 FROM birddog.jobs WHERE job_id = 'held' FOR UPDATE")
        claimed = await asyncio.wait_for(jobs.claim_many(limit=2), timeout=5)
    assert [c.job.job_id for c in claimed] == ["second", "third"]
    assert statements.count == 1


async def test_a_claim_short_of_its_limit_sends_one_statement(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Fewer jobs than asked for: one statement, since nothing more could be taken now."""
    await enqueue(pg_pool, make_job("only"), make_job("behind-only"))
    statements = CountedStatements(jobs)
    claimed = await jobs.claim_many(limit=4)
    assert ([c.job.job_id for c in claimed], statements.count) == (["only"], 1)


async def test_a_queue_running_two_at_once_gives_two_jobs_to_one_claim(pg_pool: Pool) -> None:
    """With queue_concurrency 2, a second statement takes the next job of a queue taken from."""
    jobs = PostgresJobs(pg_pool, clock=FrozenClock(T0), queue_concurrency=2)
    await enqueue(pg_pool, make_job("first"), make_job("next"), make_job("last"))
    statements = CountedStatements(jobs)
    claimed = await jobs.claim_many(limit=4)
    assert [c.job.job_id for c in claimed] == ["first", "next"]
    assert statements.count == 3  # one job of a queue per statement; the third found it full


async def test_claim_arguments_are_checked_before_anything_is_claimed(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A lease that is not positive, a limit below 1 or a bare string of queues is refused."""
    await enqueue(pg_pool, make_job())
    bad: list[dict[str, Any]] = [{"lease_s": 0}, {"lease_s": float("nan")}, {"queues": "s-bob"}]
    for kwargs in bad:
        with pytest.raises(InvalidInput) as caught:
            await jobs.claim(**kwargs)
        assert caught.value.field == next(iter(kwargs))
    with pytest.raises(InvalidInput):
        await jobs.claim_many(limit=0)
    assert await jobs.counts() == {"queued": 1, "running": 0, "settled": 0}


@pytest.fixture
async def second_pool(database_url: str) -> AsyncIterator[Pool]:
    """Another pool on the same database: a second worker process."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def test_two_concurrent_claimers_never_get_the_same_job(
    pg_pool: Pool, second_pool: Pool, clock: FrozenClock
) -> None:
    """Two claimers racing on two connections claim disjoint sets that together hold every job."""
    await enqueue(pg_pool, *(make_job(f"job-{i:02}", session=f"s-{i % 7}") for i in range(20)))
    one = PostgresJobs(pg_pool, clock=clock)
    two = PostgresJobs(second_pool, clock=clock)
    start = asyncio.Event()

    async def drain(store: PostgresJobs) -> list[str]:
        await start.wait()
        got: list[str] = []
        while claimed := await store.claim_many(limit=2):
            got.extend(c.job.job_id for c in claimed)
            for one_claim in claimed:
                await store.settle(
                    job_id=one_claim.job.job_id,
                    claim_token=one_claim.claim_token,
                    outcome=Outcome.COMPLETED,
                    content="ok",
                )
        return got

    racing = asyncio.gather(drain(one), drain(two))
    start.set()
    got_one, got_two = await racing
    assert not set(got_one) & set(got_two)
    assert len(got_one) + len(got_two) == 20
    assert set(got_one) | set(got_two) == {f"job-{i:02}" for i in range(20)}
    assert await one.counts() == {"queued": 0, "running": 0, "settled": 20}


# ---- heartbeat -------------------------------------------------------------------------


async def test_heartbeat_extends_the_lease(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """A heartbeat moves the lease to now + lease_s and reports no cancellation."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs, lease_s=10)
    clock.advance(8)
    assert (
        await jobs.heartbeat(job_id="job-1", claim_token=claimed.claim_token, lease_s=10) is False
    )
    stored = await job_row(pg_pool, "job-1")
    assert stored["lease_expires_at"] == T0 + timedelta(seconds=18)
    clock.advance(9)
    assert await jobs.recover_expired() == []


async def test_heartbeat_reports_a_requested_cancellation(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """After a cancellation is recorded, the worker's heartbeat says so."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs)
    assert await jobs.cancel(job_id="job-1", content="stop please") is None
    assert await jobs.heartbeat(job_id="job-1", claim_token=claimed.claim_token, lease_s=10)


async def test_heartbeat_with_a_stale_token_raises(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """A token that does not hold the job (wrong, malformed, or of a settled job) is refused."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs)
    for token in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        with pytest.raises(StaleClaim):
            await jobs.heartbeat(job_id="job-1", claim_token=token, lease_s=10)
    with pytest.raises(StaleClaim):
        await jobs.heartbeat(job_id="nope", claim_token=claimed.claim_token, lease_s=10)
    await jobs.settle(
        job_id="job-1", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED, content="ok"
    )
    with pytest.raises(StaleClaim):
        await jobs.heartbeat(job_id="job-1", claim_token=claimed.claim_token, lease_s=10)


# ---- cancel ----------------------------------------------------------------------------


async def test_cancelling_a_queued_job_settles_it_with_fan_out_and_it_is_never_claimed(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A queued job cancels at once: settled cancelled, replies carry the cancellation content."""
    await enqueue(pg_pool, make_job())
    assert await jobs.cancel(job_id="job-1", content="cancelled by alice") is Outcome.CANCELLED
    assert await jobs.claim() is None
    job = await jobs.get("job-1")
    assert (job.state, job.outcome) == (JobState.SETTLED, Outcome.CANCELLED)
    rows = await outbox_rows(pg_pool)
    assert [row["key"] for row in rows] == [
        "outbox:mail-job-1:reply:0",
        "outbox:mail-job-1:reply:1",
    ]
    for row in rows:
        assert row["reply"]["content"] == "cancelled by alice"
        assert row["reply"]["reply"] == {"commandId": "cmd-job-1", "outcome": "cancelled"}
    assert await wake_at(pg_pool) == T0
    stored = await job_row(pg_pool, "job-1")
    assert (stored["cancel_requested_at"], stored["cancel_content"]) == (
        T0,
        "cancelled by alice",
    )


async def test_a_recorded_cancellation_wins_over_completed(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A running job whose cancellation was recorded settles cancelled, with that content."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs)
    assert await jobs.cancel(job_id="job-1", content="called off") is None
    assert await jobs.cancel(job_id="job-1", content="second thoughts") is None
    assert (await jobs.get("job-1")).state is JobState.RUNNING
    keys = await jobs.settle(
        job_id="job-1",
        claim_token=claimed.claim_token,
        outcome=Outcome.COMPLETED,
        content="all done",
    )
    assert len(keys) == 2
    assert (await jobs.get("job-1")).outcome is Outcome.CANCELLED
    for row in await outbox_rows(pg_pool):
        assert row["reply"]["content"] == "called off"
        assert row["reply"]["reply"]["outcome"] == "cancelled"
    # The executor's replay of its own settlement is recognised, not refused.
    again = await jobs.settle(
        job_id="job-1",
        claim_token=claimed.claim_token,
        outcome=Outcome.COMPLETED,
        content="all done",
    )
    assert again == []


async def test_cancelling_a_settled_job_changes_nothing(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """A settled job keeps its outcome; cancel reports it and records nothing."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs)
    await jobs.settle(
        job_id="job-1", claim_token=claimed.claim_token, outcome=Outcome.FAILED, content=""
    )
    assert await jobs.cancel(job_id="job-1", content="too late") is Outcome.FAILED
    stored = await job_row(pg_pool, "job-1")
    assert (stored["outcome"], stored["cancel_requested_at"]) == ("failed", None)
    assert len(await outbox_rows(pg_pool)) == 2


async def test_cancelling_an_unknown_job_raises(jobs: PostgresJobs) -> None:
    """Cancel names a job that must exist."""
    with pytest.raises(JobNotFound):
        await jobs.cancel(job_id="nope", content="")


# ---- recovery --------------------------------------------------------------------------


async def test_an_expired_lease_with_budget_left_is_queued_again(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """A job past its lease and the kill grace returns to its queue, recovery_count + 1."""
    await enqueue(pg_pool, make_job(max_recoveries=1))
    first = await claim(jobs, lease_s=60)
    clock.advance(59)
    assert await jobs.recover_expired() == []
    clock.advance(1)
    # The lease has ended, but a vanished worker's supervisor may still be ending its turn.
    assert await jobs.recover_expired() == []
    clock.advance(DEFAULT_KILL_GRACE_S - 0.5)
    assert await jobs.recover_expired() == []
    clock.advance(0.5)
    assert await jobs.recover_expired() == [("job-1", "requeued")]
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["recovery_count"], stored["claim_token"]) == ("queued", 1, None)
    with pytest.raises(StaleClaim):
        await jobs.settle(
            job_id="job-1", claim_token=first.claim_token, outcome=Outcome.COMPLETED, content=""
        )
    second = await claim(jobs)
    assert second.recovery_count == 1
    assert second.claim_token != first.claim_token
    assert await outbox_rows(pg_pool) == []


async def test_an_expired_lease_without_budget_settles_outcome_unknown_with_replies(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """With the budget spent, an expired job settles outcome_unknown and its replies are owed."""
    await enqueue(pg_pool, make_job(max_recoveries=1))
    await claim(jobs, lease_s=60)
    late = T0 + timedelta(seconds=61 + DEFAULT_KILL_GRACE_S)
    assert await jobs.recover_expired(now=late) == [("job-1", "requeued")]
    await claim(jobs, lease_s=60)
    clock.advance(200)
    assert await jobs.recover_expired() == [("job-1", "outcome_unknown")]
    job = await jobs.get("job-1")
    assert (job.state, job.outcome) == (JobState.SETTLED, Outcome.OUTCOME_UNKNOWN)
    rows = await outbox_rows(pg_pool)
    assert [row["recipient_agent_id"] for row in rows] == ["alice", "carol"]
    for row in rows:
        assert row["state"] == "pending"
        assert row["due_at"] == clock.now()
        assert row["reply"]["content"] == (
            "The delegated work ended outcome_unknown without reply text."
        )
        assert row["reply"]["reply"] == {
            "commandId": "cmd-job-1",
            "outcome": "outcome_unknown",
            "diagnostic": LEASE_EXPIRED_DIAGNOSTIC,
        }
    assert await wake_at(pg_pool) == clock.now()
    assert await jobs.recover_expired(now=clock.now() + timedelta(days=1)) == []


async def test_a_job_without_recovery_policy_is_never_requeued(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """No recovery policy means no budget: the first expired lease settles outcome_unknown."""
    await enqueue(pg_pool, make_job(with_mail=False))
    await claim(jobs, lease_s=5)
    clock.advance(5 + DEFAULT_KILL_GRACE_S)
    assert await jobs.recover_expired() == [("job-1", "outcome_unknown")]
    assert await outbox_rows(pg_pool) == []
    assert await wake_at(pg_pool) is None


async def test_an_expired_job_with_a_recorded_cancellation_settles_cancelled(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """A cancelled job whose worker vanished is not run again: it settles cancelled."""
    await enqueue(pg_pool, make_job(max_recoveries=3))
    await claim(jobs, lease_s=5)
    await jobs.cancel(job_id="job-1", content="never mind")
    clock.advance(6 + DEFAULT_KILL_GRACE_S)
    assert await jobs.recover_expired() == [("job-1", "cancelled")]
    assert {row["reply"]["content"] for row in await outbox_rows(pg_pool)} == {"never mind"}


async def test_recovery_works_in_batches_and_skips_jobs_being_settled(
    jobs: PostgresJobs, pg_pool: Pool, pg_conn: asyncpg.Connection, clock: FrozenClock
) -> None:
    """Every expired job is handled across batches, except one another transaction holds."""
    await enqueue(
        pg_pool, *(make_job(f"job-{i}", session=f"s-{i}", max_recoveries=1) for i in range(5))
    )
    assert len(await jobs.claim_many(limit=5, lease_s=1)) == 5
    clock.advance(2 + DEFAULT_KILL_GRACE_S)
    async with pg_conn.transaction():
        await pg_conn.execute("SELECT 1 FROM birddog.jobs WHERE job_id = 'job-4' FOR UPDATE")
        handled = await asyncio.wait_for(jobs.recover_expired(limit=2), timeout=5)
    assert sorted(handled) == [(f"job-{i}", "requeued") for i in range(4)]
    assert await jobs.recover_expired() == [("job-4", "requeued")]
    assert await jobs.counts() == {"queued": 5, "running": 0, "settled": 0}


# ---- interrupt -------------------------------------------------------------------------


async def test_interrupt_with_budget_left_queues_the_job_again(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A worker that stops a job with recovery budget left puts it back in its queue."""
    await enqueue(pg_pool, make_job(max_recoveries=1))
    claimed = await claim(jobs)
    result = await jobs.interrupt(
        job_id="job-1", claim_token=claimed.claim_token, diagnostic="worker shut down"
    )
    assert result is None
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["recovery_count"], stored["diagnostic"]) == (
        "queued",
        1,
        "worker shut down",
    )
    assert await outbox_rows(pg_pool) == []
    with pytest.raises(StaleClaim):
        await jobs.interrupt(job_id="job-1", claim_token=claimed.claim_token, diagnostic="again")


async def test_interrupt_without_budget_settles_interrupted_with_the_diagnostic(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Without budget the job settles interrupted and its replies carry the bounded diagnostic."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs)
    why = "handler timed out after 900 s; token=abc123secret"
    result = await jobs.interrupt(job_id="job-1", claim_token=claimed.claim_token, diagnostic=why)
    assert result is Outcome.INTERRUPTED
    rows = await outbox_rows(pg_pool)
    assert len(rows) == 2
    for row in rows:
        assert row["reply"]["reply"] == {
            "commandId": "cmd-job-1",
            "outcome": "interrupted",
            "diagnostic": "handler timed out after 900 s; token=[redacted]",
        }
        assert row["reply"]["content"] == "The delegated work ended interrupted without reply text."
    again = await jobs.interrupt(job_id="job-1", claim_token=claimed.claim_token, diagnostic=why)
    assert again is Outcome.INTERRUPTED
    assert len(await outbox_rows(pg_pool)) == 2


async def test_interrupting_a_cancelled_job_settles_it_cancelled(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """The recorded cancellation wins over an interruption, even with budget left."""
    await enqueue(pg_pool, make_job(max_recoveries=5))
    claimed = await claim(jobs)
    await jobs.cancel(job_id="job-1", content="stop")
    result = await jobs.interrupt(
        job_id="job-1", claim_token=claimed.claim_token, diagnostic="stopped for the cancellation"
    )
    assert result is Outcome.CANCELLED
    assert (await jobs.get("job-1")).outcome is Outcome.CANCELLED


# ---- reading ---------------------------------------------------------------------------


async def test_get_and_counts(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """The store reads one job back (JobNotFound when missing) and counts every state."""
    assert await jobs.counts() == {"queued": 0, "running": 0, "settled": 0}
    job = make_job(max_recoveries=2)
    await enqueue(pg_pool, job, make_job("job-2"))
    assert await jobs.get("job-1") == job
    await claim(jobs)
    assert await jobs.counts() == {"queued": 1, "running": 1, "settled": 0}
    with pytest.raises(JobNotFound):
        await jobs.get("nope")


async def test_a_closed_pool_is_store_unavailable(database_url: str, clock: FrozenClock) -> None:
    """A database that cannot be reached raises StoreUnavailable, the driver error its cause."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    store = PostgresJobs(pool, clock=clock)
    await pool.close()
    with pytest.raises(StoreUnavailable) as caught:
        await store.claim()
    assert isinstance(caught.value.__cause__, asyncpg.InterfaceError)
    with pytest.raises(StoreUnavailable):
        await store.recover_expired()


# ---- bad stored data and refused rows ---------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("payload", "[1, 2]", "payload"),
        ("recovery", '{"maxRecoveries": -1}', "recovery.maxRecoveries"),
        ("recovery", '{"maxRecoveries": 1, "extra": true}', "recovery.extra"),
    ],
    ids=["payload-not-an-object", "negative-budget", "unknown-field"],
)
async def test_a_claimed_job_that_cannot_be_read_settles_failed_naming_the_field(
    jobs: PostgresJobs, pg_pool: Pool, column: str, value: str, field: str
) -> None:
    """A row SQL filled with a bad value settles failed at claim, and the claim moves on."""
    await enqueue(pg_pool, make_job("bad", priority=1), make_job("good"))
    await pg_pool.execute(
        f"UPDATE birddog.jobs SET {column} = $1::text::jsonb WHERE job_id = 'bad'",  # noqa: S608 - test-chosen column
        value,
    )
    claimed = await claim(jobs)
    assert claimed.job.job_id == "good"
    stored = await job_row(pg_pool, "bad")
    assert (stored["state"], stored["outcome"]) == ("settled", "failed")
    assert field in stored["diagnostic"]
    assert stored["diagnostic"].startswith("the stored job 'bad' cannot be read")
    with pytest.raises(UnreadableRow) as caught:
        await jobs.get("bad")
    assert caught.value.field == field


async def test_an_unreadable_recovery_policy_still_owes_its_replies(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A bad recovery policy does not keep the sender from hearing that the job failed."""
    await enqueue(pg_pool, make_job())
    await pg_pool.execute("UPDATE birddog.jobs SET recovery = '\"lots\"'::jsonb")
    assert await jobs.claim() is None
    replies = [row["reply"]["reply"] for row in await outbox_rows(pg_pool)]
    assert [reply["outcome"] for reply in replies] == ["failed", "failed"]
    assert "recovery" in replies[0]["diagnostic"]


async def test_an_oversized_recorded_cancellation_still_settles_when_the_lease_expires(
    pg_pool: Pool, clock: FrozenClock
) -> None:
    """Cancellation content recorded under a larger limit is cut, not fatal, for the reaper."""
    generous = PostgresJobs(pg_pool, clock=clock, max_content_bytes=10_000)
    strict = PostgresJobs(pg_pool, clock=clock, max_content_bytes=100)
    await enqueue(pg_pool, make_job())
    await claim(generous, lease_s=10)
    assert await generous.cancel(job_id="job-1", content="stop " * 1000) is None
    clock.advance(11 + DEFAULT_KILL_GRACE_S)
    assert await strict.recover_expired() == [("job-1", "cancelled")]
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["outcome"]) == ("settled", "cancelled")
    assert len(stored["result_content"].encode()) <= 100
    assert "[cut by BirdDog" in stored["result_content"]
    assert "so it was cut" in stored["diagnostic"]
    contents = {row["reply"]["content"] for row in await outbox_rows(pg_pool)}
    assert contents == {stored["result_content"]}


async def test_a_job_the_database_refuses_to_settle_never_blocks_the_reaper(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """The reaper skips a job whose fan-out is refused, logs it, and recovers the others."""
    await enqueue(
        pg_pool,
        make_job("a-poison", reply_to=(CAROL,)),
        *(make_job(f"job-{i}", session=f"s-{i}", reply_to=(ALICE,)) for i in range(4)),
    )
    for _ in range(5):
        await claim(jobs, lease_s=10)
    await pg_pool.execute(
        "ALTER TABLE birddog.outbox ADD CONSTRAINT test_refuses_carol "
        "CHECK (recipient_agent_id <> 'carol')"
    )
    clock.advance(11 + DEFAULT_KILL_GRACE_S)
    with structlog.testing.capture_logs() as log_events:
        handled = await jobs.recover_expired(limit=2)
    assert sorted(handled) == [(f"job-{i}", "outcome_unknown") for i in range(4)]
    assert (await job_row(pg_pool, "a-poison"))["state"] == "running"
    failed = [event for event in log_events if event["event"] == "job_reap_failed"]
    assert [(e["job_id"], e["error"]) for e in failed] == [("'a-poison'", "CheckViolationError")]
    await pg_pool.execute("ALTER TABLE birddog.outbox DROP CONSTRAINT test_refuses_carol")
    assert await jobs.recover_expired() == [("a-poison", "outcome_unknown")]


async def test_a_refused_statement_is_store_unavailable_with_the_driver_error_as_cause(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A statement the server refuses leaves as StoreUnavailable, never a driver type."""
    await enqueue(pg_pool, make_job())
    claimed = await claim(jobs)
    await pg_pool.execute(
        "ALTER TABLE birddog.outbox ADD CONSTRAINT test_refuses_all CHECK (false) NOT VALID"
    )
    with pytest.raises(StoreUnavailable) as caught:
        await jobs.settle(
            job_id="job-1", claim_token=claimed.claim_token, outcome="completed", content="x"
        )
    assert isinstance(caught.value.__cause__, asyncpg.CheckViolationError)
    assert "SQLSTATE 23514" in str(caught.value)


# ---- nothing queued forever -------------------------------------------------------------


async def test_a_job_queued_past_its_maximum_age_is_cancelled_and_its_sender_hears(
    pg_pool: Pool, clock: FrozenClock
) -> None:
    """The reaper cancels a job nobody claimed within a day; its replies say so."""
    jobs = PostgresJobs(pg_pool, clock=clock, max_queued_s=86_400)
    await enqueue(pg_pool, make_job("stale", session="s-nobody"), created_at=T0 - timedelta(1))
    await enqueue(pg_pool, make_job("young", session="s-nobody-2"), created_at=T0)
    await enqueue(pg_pool, make_job("busy"), created_at=T0 - timedelta(2))
    await claim(jobs, queues=["s-bob"])
    assert await jobs.cancel_queued_too_long() == [("stale", "cancelled")]
    text = "BirdDog cancelled this job: no worker claimed it within 24 h"
    stored = await job_row(pg_pool, "stale")
    assert (stored["state"], stored["outcome"], stored["result_content"]) == (
        "settled",
        "cancelled",
        text,
    )
    assert (stored["cancel_requested_at"], stored["cancel_content"]) == (T0, text)
    replies = [row["reply"] for row in await outbox_rows(pg_pool)]
    assert [(r["content"], r["reply"]["outcome"]) for r in replies] == [(text, "cancelled")] * 2
    assert await wake_at(pg_pool) == T0
    assert (await job_row(pg_pool, "young"))["state"] == "queued"
    assert (await job_row(pg_pool, "busy"))["state"] == "running"
    assert await jobs.cancel_queued_too_long() == []


# ---- where a turn runs -----------------------------------------------------------------


async def test_a_turn_is_recorded_under_its_claim_only_and_listed_by_host_while_running(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """record_turn needs the current claim; turns_on_host lists running jobs of that host and boot."""
    await enqueue(pg_pool, make_job("job-1", max_recoveries=1), make_job("job-2", session="s-2"))
    first = await claim(jobs, lease_s=10)
    other = await claim(jobs, lease_s=10)
    here = Turn(host="host-a", boot_id="boot-1", pid=4242, start_ticks=987654321012)
    await jobs.record_turn(job_id=first.job.job_id, claim_token=first.claim_token, turn=here)
    elsewhere = Turn(host="host-b", boot_id="boot-1", pid=4243, start_ticks=5)
    await jobs.record_turn(job_id=other.job.job_id, claim_token=other.claim_token, turn=elsewhere)
    with pytest.raises(StaleClaim):
        await jobs.record_turn(job_id=first.job.job_id, claim_token=other.claim_token, turn=here)
    assert await jobs.turns_on_host(host="host-a", boot_id="boot-1") == [(first.job.job_id, here)]
    assert await jobs.turns_on_host(host="host-a", boot_id="boot-2") == []
    clock.advance(10 + DEFAULT_KILL_GRACE_S)
    assert (first.job.job_id, "requeued") in await jobs.recover_expired()
    # Requeued, the job keeps its last record (the next claim's replaces it), but is not listed.
    assert (await job_row(pg_pool, first.job.job_id))["turn_pid"] == 4242
    assert await jobs.turns_on_host(host="host-a", boot_id="boot-1") == []
    with pytest.raises(StaleClaim):
        await jobs.record_turn(job_id=first.job.job_id, claim_token=first.claim_token, turn=here)
