"""Settlement and fan-out commit together in PostgreSQL, or not at all."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from birddog import (
    DIAGNOSTIC_MAX_LENGTH,
    ContentTooLarge,
    InvalidInput,
    JobNotFound,
    JobState,
    Outcome,
    StaleClaim,
    StoreUnavailable,
    has_pending_delivery,
)
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.testing import FrozenClock, ManualWake, RecordingTransport
from tests.support import (
    ALICE,
    CAROL,
    T0,
    claim,
    enqueue,
    job_row,
    make_job,
    outbox_rows,
    wake_at,
)
from tests.support.stacks import pg_room

ALICE_ELSEWHERE = ALICE.model_copy(update={"session_id": "s-alice-2"})


async def running_job(jobs: PostgresJobs, pg_pool: Pool, **kwargs: object) -> str:
    """Enqueue and claim one job; return its claim token."""
    await enqueue(pg_pool, make_job(**kwargs))  # type: ignore[arg-type]
    return (await claim(jobs)).claim_token


async def assert_still_running(jobs: PostgresJobs, pg_pool: Pool, token: str) -> None:
    """The job is running under ``token``, and nothing was fanned out or woken."""
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], str(stored["claim_token"])) == ("running", token)
    assert (stored["outcome"], stored["settled_at"], stored["result_content"]) == (None, None, None)
    assert await outbox_rows(pg_pool) == []
    assert await wake_at(pg_pool) is None
    assert (await jobs.get("job-1")).state is JobState.RUNNING


async def test_settle_writes_one_reply_per_reply_to_and_arms_the_earliest_wake(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """Settling fans out one pending reply per replyTo address, keyed by index, and one wake."""
    await pg_pool.execute(
        "INSERT INTO birddog.wake (id, wake_at) VALUES (true, $1)", T0 + timedelta(hours=1)
    )
    token = await running_job(jobs, pg_pool, reply_to=(ALICE, CAROL, ALICE_ELSEWHERE))
    clock.advance(5)
    keys = await jobs.settle(
        job_id="job-1",
        claim_token=token,
        outcome=Outcome.COMPLETED,
        content="the answer is 42",
        diagnostic="ignored for completed",
        meta={"cancelledBy": "nobody", "secret": "never sent"},
    )
    expected = [f"outbox:mail-job-1:reply:{i}" for i in range(3)]
    assert keys == expected
    rows = await outbox_rows(pg_pool)
    assert [row["key"] for row in rows] == expected
    assert [row["reply"]["to"] for row in rows] == [
        address.model_dump(mode="json") for address in (ALICE, CAROL, ALICE_ELSEWHERE)
    ]
    for row in rows:
        assert row["state"] == "pending"
        assert row["due_at"] == clock.now()
        reply = row["reply"]
        assert reply["content"] == "the answer is 42"
        assert reply["inReplyTo"] == "mail-job-1"
        assert reply["from"] == {"kind": "agent", "agentId": "bob", "sessionId": "s-bob"}
        assert reply["createdAt"] == int(clock.now().timestamp() * 1000)
        assert reply["reply"] == {"commandId": "cmd-job-1", "outcome": "completed"}
        assert "never sent" not in str(reply)
    assert await wake_at(pg_pool) == clock.now()
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["outcome"], stored["result_content"]) == (
        "settled",
        "completed",
        "the answer is 42",
    )
    assert (stored["settled_at"], stored["lease_expires_at"]) == (clock.now(), None)


async def test_a_failed_settlement_carries_a_bounded_diagnostic(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A failed job's replies carry the diagnostic, one line, masked and cut to 200 characters."""
    token = await running_job(jobs, pg_pool)
    raw = "provider_error: 401\nAuthorization: Bearer sk-live-123 " + "x" * 500
    await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.FAILED, content="", diagnostic=raw
    )
    for row in await outbox_rows(pg_pool):
        diagnostic = row["reply"]["reply"]["diagnostic"]
        assert diagnostic.startswith("provider_error: 401 Authorization: Bearer [redacted]")
        assert len(diagnostic) <= DIAGNOSTIC_MAX_LENGTH
        assert row["reply"]["content"] == "The delegated work ended failed without reply text."
    assert (await job_row(pg_pool, "job-1"))["diagnostic"] == diagnostic


async def test_a_job_without_mail_settles_without_replies(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A job without mail settles, owes nobody anything, and arms no wake."""
    token = await running_job(jobs, pg_pool, with_mail=False)
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="done"
    )
    assert keys == []
    assert (await jobs.get("job-1")).outcome is Outcome.COMPLETED
    assert await outbox_rows(pg_pool) == []
    assert await wake_at(pg_pool) is None


async def test_a_job_that_is_not_an_agent_job_still_settles(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """The store never needs a BirdDog payload: a foreign job settles and owes no replies."""
    foreign = make_job().model_copy(update={"payload": {"kind": "watchdog-native", "n": 1}})
    await enqueue(pg_pool, foreign)
    token = (await claim(jobs)).claim_token
    assert (
        await jobs.settle(job_id="job-1", claim_token=token, outcome=Outcome.FAILED, content="")
        == []
    )
    assert (await jobs.get("job-1")).outcome is Outcome.FAILED


async def test_only_the_current_claim_token_settles(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """Another token, a malformed one, or an unknown job is refused and changes nothing."""
    token = await running_job(jobs, pg_pool)
    for stale in ("00000000-0000-0000-0000-000000000000", "garbage", ""):
        with pytest.raises(StaleClaim):
            await jobs.settle(
                job_id="job-1", claim_token=stale, outcome=Outcome.COMPLETED, content="x"
            )
    with pytest.raises(JobNotFound):
        await jobs.settle(job_id="nope", claim_token=token, outcome=Outcome.COMPLETED, content="")
    await assert_still_running(jobs, pg_pool, token)
    assert await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="x"
    )


async def test_a_queued_job_cannot_be_settled(jobs: PostgresJobs, pg_pool: Pool) -> None:
    """Settling a job nobody claimed is a stale claim."""
    await enqueue(pg_pool, make_job())
    with pytest.raises(StaleClaim):
        await jobs.settle(
            job_id="job-1",
            claim_token="00000000-0000-0000-0000-000000000000",
            outcome=Outcome.COMPLETED,
            content="",
        )
    assert (await jobs.get("job-1")).state is JobState.QUEUED


async def test_replaying_a_settlement_writes_nothing_twice(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """The same claim settling the same outcome again returns no keys and writes nothing."""
    token = await running_job(jobs, pg_pool)
    first = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="once"
    )
    assert len(first) == 2
    before = await job_row(pg_pool, "job-1")
    clock.advance(30)
    again = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="once"
    )
    assert again == []
    assert await job_row(pg_pool, "job-1") == before
    assert len(await outbox_rows(pg_pool)) == 2
    with pytest.raises(StaleClaim):
        await jobs.settle(job_id="job-1", claim_token=token, outcome=Outcome.FAILED, content="")


async def test_a_database_error_in_the_fan_out_leaves_neither_settlement_nor_replies(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A CHECK violation on the second reply rolls back the settlement already written."""
    token = await running_job(jobs, pg_pool)
    # Only carol's reply breaks the rule, so the job update and alice's row go through first.
    await pg_pool.execute(
        "ALTER TABLE birddog.outbox ADD CONSTRAINT test_refuses_carol "
        "CHECK (recipient_agent_id <> 'carol')"
    )
    with pytest.raises(StoreUnavailable) as caught:
        await jobs.settle(
            job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="lost?"
        )
    assert isinstance(caught.value.__cause__, asyncpg.CheckViolationError)
    await assert_still_running(jobs, pg_pool, token)
    await pg_pool.execute("ALTER TABLE birddog.outbox DROP CONSTRAINT test_refuses_carol")
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="lost?"
    )
    assert len(keys) == 2
    assert len(await outbox_rows(pg_pool)) == 2


async def test_a_database_error_arming_the_wake_leaves_neither(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """A wake that fails to arm after the replies were inserted rolls back everything."""
    token = await running_job(jobs, pg_pool)
    await pg_pool.execute(
        """
        CREATE FUNCTION test_refuse_wake() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'the test refuses to arm the wake'; END $$;
        CREATE TRIGGER test_refuse_wake BEFORE INSERT OR UPDATE ON birddog.wake
        FOR EACH ROW EXECUTE FUNCTION test_refuse_wake();
        """
    )
    with pytest.raises(StoreUnavailable) as caught:
        await jobs.settle(
            job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="lost?"
        )
    assert isinstance(caught.value.__cause__, asyncpg.RaiseError)
    assert "refuses to arm the wake" not in str(caught.value)  # driver text may quote values
    await assert_still_running(jobs, pg_pool, token)


async def test_a_cancellation_fan_out_failure_leaves_the_job_queued(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """Cancelling a queued job is all or nothing too: a failed fan-out leaves it queued."""
    await enqueue(pg_pool, make_job())
    await pg_pool.execute(
        "ALTER TABLE birddog.outbox ADD CONSTRAINT test_refuses_carol "
        "CHECK (recipient_agent_id <> 'carol')"
    )
    with pytest.raises(StoreUnavailable) as caught:
        await jobs.cancel(job_id="job-1", content="stop")
    assert isinstance(caught.value.__cause__, asyncpg.CheckViolationError)
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["cancel_requested_at"]) == ("queued", None)
    assert await outbox_rows(pg_pool) == []


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("nul \x00 inside", "handler returned text with a NUL character at index 4"),
        ("lone \ud800 surrogate", "handler returned text with a lone surrogate (\\ud800)"),
        ("é" * 600, "handler returned 1.2 KiB; the limit is 1000 bytes"),
        (42, "handler returned int, not a string"),
    ],
    ids=["nul", "surrogate", "too-large", "not-a-string"],
)
async def test_an_unstorable_result_settles_failed_saying_why(
    pg_pool: Pool, clock: FrozenClock, content: object, why: str
) -> None:
    """NUL, a lone surrogate, oversized or non-string content settles failed, replies owed."""
    jobs = PostgresJobs(pg_pool, clock=clock, max_content_bytes=1000)
    token = await running_job(jobs, pg_pool)
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content=content
    )
    stored = await job_row(pg_pool, "job-1")
    assert (stored["state"], stored["outcome"], stored["result_content"]) == (
        "settled",
        "failed",
        "",
    )
    assert stored["diagnostic"].startswith(why)
    assert len(keys) == 2
    replies = [row["reply"] for row in await outbox_rows(pg_pool)]
    assert {reply["reply"]["outcome"] for reply in replies} == {"failed"}
    assert all(reply["reply"]["diagnostic"].startswith(why) for reply in replies)
    again = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content=content
    )
    assert again == []


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("nul \x00 inside", InvalidInput),
        ("lone \ud800", InvalidInput),
        ("é" * 600, ContentTooLarge),
    ],
    ids=["nul", "surrogate", "too-large"],
)
async def test_bad_cancellation_content_is_refused_before_anything_is_written(
    pg_pool: Pool, clock: FrozenClock, content: str, error: type[Exception]
) -> None:
    """An operator's cancellation content that cannot be stored is refused, naming the field."""
    jobs = PostgresJobs(pg_pool, clock=clock, max_content_bytes=1000)
    token = await running_job(jobs, pg_pool)
    with pytest.raises(error) as caught:
        await jobs.cancel(job_id="job-1", content=content)
    assert isinstance(caught.value, InvalidInput)
    assert caught.value.field == "content"
    assert (await job_row(pg_pool, "job-1"))["cancel_requested_at"] is None
    await assert_still_running(jobs, pg_pool, token)


async def test_an_unknown_outcome_is_refused_before_anything_is_written(
    jobs: PostgresJobs, pg_pool: Pool
) -> None:
    """An outcome that is not a Watchdog outcome is refused, naming the field."""
    token = await running_job(jobs, pg_pool)
    with pytest.raises(InvalidInput) as caught:
        await jobs.settle(
            job_id="job-1",
            claim_token=token,
            outcome="done",
            content="",
        )
    assert caught.value.field == "outcome"
    await assert_still_running(jobs, pg_pool, token)


async def test_settling_after_the_lease_expired_but_before_recovery_still_counts(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """A late worker whose claim was not yet recovered still settles; recovery then skips it."""
    token = await running_job(jobs, pg_pool, max_recoveries=1)
    clock.advance(3600)
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="late"
    )
    assert len(keys) == 2
    assert await jobs.recover_expired() == []


async def test_schedule_wake_off_writes_replies_without_a_wake(
    pg_pool: Pool, clock: FrozenClock
) -> None:
    """With schedule_wake=False the replies are written and the wake table is left alone."""
    jobs = PostgresJobs(pg_pool, clock=clock, schedule_wake=False)
    token = await running_job(jobs, pg_pool)
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content=""
    )
    assert len(keys) == 2
    assert await wake_at(pg_pool) is None


async def test_settled_replies_drain_to_receipts_and_a_replay_owes_nothing_more(
    jobs: PostgresJobs, pg_pool: Pool, clock: FrozenClock
) -> None:
    """The fanned-out rows are what the Postgres outbox delivers; afterwards nothing is owed."""
    transport = RecordingTransport(True)
    room = pg_room(pg_pool, transport, wake=ManualWake(), clock=clock)
    token = await running_job(jobs, pg_pool)
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="delivered"
    )
    report = await room.drain_outbox()
    assert sorted(report.delivered) == keys
    assert [(reply.to, reply.content) for reply in transport.sent] == [
        (ALICE, "delivered"),
        (CAROL, "delivered"),
    ]
    assert (
        await jobs.settle(
            job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="delivered"
        )
        == []
    )
    assert not await has_pending_delivery(room.outbox)
    assert (await room.drain_outbox()).claimed == 0
