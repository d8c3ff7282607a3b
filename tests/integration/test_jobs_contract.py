"""The job store port's contract, run against InMemoryJobs and PostgresJobs alike.

The in-memory store is the reference a worker's tests run on; if the two ever disagree
on what a worker sees (claim order, one job per session, leases, settling with its
fan-out, cancelling, recovering), one of these fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from birddog import AgentJobPayload, Job, JobConflict, JobNotFound, JobState, Outcome, StaleClaim
from birddog.core.jobs import DEFAULT_CANCEL_GRACE_S
from birddog.core.lifecycle import Keep, SettleRequested
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import Pool
from birddog.testing import FrozenClock, InMemoryJobs, InMemoryOutbox, ManualListener
from birddog.worker import Worker
from tests.support import ALICE, CAROL, T0, make_job

LEASE_S = 30.0

PORTS = ("JobStore", "JobBacklog", "JobReaper", "JobCancels", "TurnRecords", "ClaimedJobLike")
"""The ports these tests hold their fake and their Postgres adapter to."""


@dataclass
class Backend:
    """A job store under test, its clock, how a sender enqueues, and the replies written."""

    name: str
    jobs: InMemoryJobs | PostgresJobs
    clock: FrozenClock
    enqueue: Callable[[Job], Awaitable[bool]]
    reply_keys: Callable[[], Awaitable[list[str]]]


@pytest.fixture
async def memory_backend() -> Backend:
    """The in-memory reference store, writing replies into an in-memory outbox."""
    clock = FrozenClock(T0)
    outbox = InMemoryOutbox()
    jobs = InMemoryJobs(clock=clock, outbox=outbox)

    async def reply_keys() -> list[str]:
        return sorted(outbox.rows)

    return Backend("memory", jobs, clock, jobs.enqueue, reply_keys)


@pytest.fixture
async def postgres_backend(pg_pool: Pool) -> Backend:
    """The Postgres store on a fresh database; a sender enqueues in its own transaction."""
    clock = FrozenClock(T0)

    async def enqueue(job: Job) -> bool:
        async with pg_pool.acquire() as conn, conn.transaction():
            return await enqueue_accepted_job(conn, job)

    async def reply_keys() -> list[str]:
        return [row["key"] for row in await pg_pool.fetch("SELECT key FROM birddog.outbox")]

    return Backend("postgres", PostgresJobs(pg_pool, clock=clock), clock, enqueue, reply_keys)


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    result: Backend = request.getfixturevalue(request.param)
    return result


async def claimed_ids(backend: Backend, **kwargs: object) -> list[str]:
    """Claim until nothing is claimable; the job ids in claim order."""
    ids: list[str] = []
    while (claimed := await backend.jobs.claim(lease_s=LEASE_S, **kwargs)) is not None:  # type: ignore[arg-type]
        ids.append(claimed.job.job_id)
    return ids


async def test_one_job_per_session_runs_at_a_time(backend: Backend) -> None:
    """A session's second job waits while its first runs; another session's is claimed."""
    await backend.enqueue(make_job("b1", session="s-bob"))
    await backend.enqueue(make_job("b2", session="s-bob"))
    await backend.enqueue(make_job("d1", session="s-dan"))
    assert await claimed_ids(backend) == ["b1", "d1"]
    assert (await backend.jobs.get("b2")).state is JobState.QUEUED


async def test_claims_take_the_highest_priority_then_the_oldest(backend: Backend) -> None:
    """Across sessions the higher priority goes first, then enqueue order; in one, its head."""
    await backend.enqueue(make_job("old", session="s-1"))
    await backend.enqueue(make_job("urgent", session="s-2", priority=5))
    await backend.enqueue(make_job("young", session="s-3"))
    await backend.enqueue(make_job("late-urgent", session="s-1", priority=9))
    assert await claimed_ids(backend) == ["late-urgent", "urgent", "young"]


async def test_agents_and_not_before_choose_what_a_claim_takes(backend: Backend) -> None:
    """A claim by agent takes that agent's sessions only; a job not yet due waits, unblocking."""
    later = Job.model_validate(
        {**make_job("later", agent="ceo", session="s-2").model_dump(by_alias=False),
         "not_before": T0 + timedelta(minutes=1)}
    )  # fmt: skip
    await backend.enqueue(make_job("school", agent="school", session="s-1"))
    await backend.enqueue(later)
    await backend.enqueue(make_job("ceo-now", agent="ceo", session="s-3"))
    assert await claimed_ids(backend, agents=["ceo"]) == ["ceo-now"]
    backend.clock.advance(60)
    assert await claimed_ids(backend, agents=["ceo"]) == ["later"]
    assert await claimed_ids(backend, agents=["school"], queues=["s-9"]) == ["school"]


async def test_the_backlog_counts_what_waits_for_a_worker_of_the_queues(backend: Backend) -> None:
    """Queued jobs of the queues or agents served count, the oldest's time with them."""
    await backend.enqueue(make_job("b1", session="s-bob"))
    backend.clock.advance(5)
    await backend.enqueue(make_job("b2", session="s-bob"))
    await backend.enqueue(make_job("d1", agent="dan", session="s-dan"))
    count, oldest = await backend.jobs.queued_backlog(queues=["s-bob"])
    assert count == 2
    assert oldest is not None
    assert await claimed_ids(backend, queues=["s-bob"]) == ["b1"]
    assert (await backend.jobs.queued_backlog(queues=["s-bob"]))[0] == 1
    assert (await backend.jobs.queued_backlog(agents=["dan"]))[0] == 1
    assert (await backend.jobs.queued_backlog(queues=["s-none"])) == (0, None)


async def test_reserved_queues_are_claimed_only_when_named(backend: Backend) -> None:
    """A queue starting with birddog: is left alone unless the claim names it."""
    await backend.enqueue(make_job("probe", session="birddog:probe"))
    assert await claimed_ids(backend) == []
    assert await claimed_ids(backend, queues=["birddog:probe"]) == ["probe"]


async def test_a_replayed_enqueue_is_accepted_and_a_different_one_refused(
    backend: Backend,
) -> None:
    """The same job again writes nothing; the same id with other fields is a conflict."""
    job = make_job("job-1")
    assert await backend.enqueue(job) is True
    assert await backend.enqueue(job) is False
    with pytest.raises(JobConflict):
        await backend.enqueue(job.model_copy(update={"priority": 3}))


async def test_a_mail_key_names_one_job(backend: Backend) -> None:
    """A second job carrying a mail key another job carries is refused; nothing is stored."""
    first = make_job("job-1")
    assert await backend.enqueue(first) is True
    reuse = make_job("job-2").model_copy(
        update={"payload": {**make_job("job-2").payload, "mail": first.payload["mail"]}}
    )
    with pytest.raises(JobConflict, match="mail key 'mail-job-1' is carried by another job"):
        await backend.enqueue(reuse)
    with pytest.raises(JobNotFound):
        await backend.jobs.get("job-2")
    assert await backend.enqueue(make_job("job-3")) is True


async def test_a_heartbeat_extends_the_lease_and_reports_a_cancellation(
    backend: Backend,
) -> None:
    """A held job's heartbeat keeps it past its lease and says when cancelling was asked."""
    await backend.enqueue(make_job("job-1"))
    claimed = await backend.jobs.claim(lease_s=LEASE_S)
    assert claimed is not None
    backend.clock.advance(LEASE_S - 1)
    token = claimed.claim_token
    assert await backend.jobs.heartbeat(job_id="job-1", claim_token=token, lease_s=LEASE_S) is False
    backend.clock.advance(LEASE_S - 1)
    assert await backend.jobs.recover_expired() == []
    assert await backend.jobs.cancel(job_id="job-1", content="stop") is None
    assert await backend.jobs.heartbeat(job_id="job-1", claim_token=token, lease_s=LEASE_S) is True


async def test_a_worker_that_ignores_a_cancel_loses_the_job_within_the_grace(
    backend: Backend,
) -> None:
    """Cancelled, a running job's lease ends within the cancel grace, heartbeats or not."""
    await backend.enqueue(make_job("job-1"))
    claimed = await backend.jobs.claim(lease_s=3000)
    assert claimed is not None
    token = claimed.claim_token
    assert await backend.jobs.cancel(job_id="job-1", content="stop") is None
    assert await backend.jobs.heartbeat(job_id="job-1", claim_token=token, lease_s=3000) is True
    backend.clock.advance(DEFAULT_CANCEL_GRACE_S + DEFAULT_KILL_GRACE_S + 5)
    assert await backend.jobs.recover_expired() == [("job-1", "cancelled")]
    job = await backend.jobs.get("job-1")
    assert (job.state, job.outcome) == (JobState.SETTLED, Outcome.CANCELLED)


async def test_only_the_current_claim_may_heartbeat_or_finish(backend: Backend) -> None:
    """Another token is a stale claim, for a heartbeat and a settlement alike."""
    await backend.enqueue(make_job("job-1"))
    assert await backend.jobs.claim(lease_s=LEASE_S) is not None
    stale = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(StaleClaim):
        await backend.jobs.heartbeat(job_id="job-1", claim_token=stale, lease_s=LEASE_S)
    with pytest.raises(StaleClaim):
        await backend.jobs.finish(
            job_id="job-1", claim_token=stale, event=SettleRequested(Outcome.COMPLETED, "x")
        )


async def test_finishing_settles_the_job_and_writes_one_reply_per_address(
    backend: Backend,
) -> None:
    """A completed job settles and fans out; replaying the settlement writes nothing."""
    await backend.enqueue(make_job("job-1", reply_to=[ALICE, CAROL]))
    claimed = await backend.jobs.claim(lease_s=LEASE_S)
    assert claimed is not None
    event = SettleRequested(Outcome.COMPLETED, "the answer")
    token = claimed.claim_token
    finished = await backend.jobs.finish(job_id="job-1", claim_token=token, event=event)
    owed = ["outbox:mail-job-1:reply:0", "outbox:mail-job-1:reply:1"]
    assert (finished.outcome, sorted(finished.keys)) == (Outcome.COMPLETED, owed)
    assert sorted(await backend.reply_keys()) == owed
    job = await backend.jobs.get("job-1")
    assert (job.state, job.outcome) == (JobState.SETTLED, Outcome.COMPLETED)
    again = await backend.jobs.finish(job_id="job-1", claim_token=token, event=event)
    assert isinstance(again.decision, Keep)
    assert again.keys == []


async def test_cancelling_a_queued_job_settles_it_and_its_sender_hears(backend: Backend) -> None:
    """A queued job cancelled settles cancelled at once; its replies carry the content."""
    await backend.enqueue(make_job("job-1", reply_to=[ALICE]))
    assert await backend.jobs.cancel(job_id="job-1", content="not needed") is Outcome.CANCELLED
    assert await backend.reply_keys() == ["outbox:mail-job-1:reply:0"]
    assert await claimed_ids(backend) == []


async def test_a_recorded_cancellation_wins_over_the_workers_result(backend: Backend) -> None:
    """A running job cancelled settles cancelled, whatever its handler then reports."""
    await backend.enqueue(make_job("job-1"))
    claimed = await backend.jobs.claim(lease_s=LEASE_S)
    assert claimed is not None
    assert await backend.jobs.cancel(job_id="job-1", content="stop") is None
    finished = await backend.jobs.finish(
        job_id="job-1",
        claim_token=claimed.claim_token,
        event=SettleRequested(Outcome.COMPLETED, "done anyway"),
    )
    assert finished.outcome is Outcome.CANCELLED


async def test_an_expired_lease_requeues_within_budget_then_settles_unknown(
    backend: Backend,
) -> None:
    """A vanished worker's job runs again while budget is left, then ends outcome_unknown."""
    await backend.enqueue(make_job("job-1", reply_to=[ALICE], max_recoveries=1))
    assert await claimed_ids(backend) == ["job-1"]
    backend.clock.advance(LEASE_S)
    # The lease ended; the kill grace keeps the job until a dead worker's turn is over.
    assert await backend.jobs.recover_expired() == []
    backend.clock.advance(DEFAULT_KILL_GRACE_S)
    assert await backend.jobs.recover_expired() == [("job-1", "requeued")]
    again = await backend.jobs.claim(lease_s=LEASE_S)
    assert again is not None
    assert (again.job.job_id, again.job.state) == ("job-1", JobState.RUNNING)
    backend.clock.advance(LEASE_S + DEFAULT_KILL_GRACE_S)
    assert await backend.jobs.recover_expired() == [("job-1", "outcome_unknown")]
    assert await backend.reply_keys() == ["outbox:mail-job-1:reply:0"]


async def test_an_unknown_job_is_not_found(backend: Backend) -> None:
    """Reading or cancelling a job id nobody enqueued says so."""
    with pytest.raises(JobNotFound):
        await backend.jobs.get("nobody")
    with pytest.raises(JobNotFound):
        await backend.jobs.cancel(job_id="nobody", content="")


async def test_a_worker_runs_its_jobs_on_either_store(backend: Backend) -> None:
    """The worker, driven with once, claims, runs and settles every job of either store."""
    for index in range(3):
        await backend.enqueue(make_job(f"job-{index}", session=f"s-{index}", reply_to=[ALICE]))

    async def handler(payload: AgentJobPayload) -> str:
        return f"done {payload.command_fact_id}"

    worker = Worker(jobs=backend.jobs, handler=handler, listener=ManualListener(), lease_s=5)
    await worker.run(once=True)
    assert worker.summary() == {"completed": 3}
    assert len(await backend.reply_keys()) == 3


async def test_a_turn_is_recorded_under_its_claim_and_listed_while_the_job_runs(
    backend: Backend,
) -> None:
    """record_turn needs the current claim; turns_on_host lists running jobs of that boot."""
    await backend.enqueue(make_job("job-1"))
    claimed = await backend.jobs.claim(lease_s=LEASE_S)
    assert claimed is not None
    turn = Turn(host="host-a", boot_id="boot-1", pid=4242, start_ticks=987654321012)
    await backend.jobs.record_turn(job_id="job-1", claim_token=claimed.claim_token, turn=turn)
    with pytest.raises(StaleClaim):
        await backend.jobs.record_turn(job_id="job-1", claim_token="not-the-claim", turn=turn)
    assert await backend.jobs.turns_on_host(host="host-a", boot_id="boot-1") == [("job-1", turn)]
    assert await backend.jobs.turns_on_host(host="host-a", boot_id="boot-2") == []
    await backend.jobs.settle(
        job_id="job-1", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED, content=""
    )
    assert await backend.jobs.turns_on_host(host="host-a", boot_id="boot-1") == []
