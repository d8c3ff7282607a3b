"""The worker over the real job store: handler outcomes become settlements with replies."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import structlog
from asyncpg import Pool

from birddog import (
    AgentJobPayload,
    AgentWork,
    Job,
    JobState,
    Mail,
    Outcome,
    Recovery,
    StoreUnavailable,
    agent_job,
)
from birddog.cancels import CancelHints
from birddog.clock import SystemClock
from birddog.core.lifecycle import SettleRequested
from birddog.postgres.jobs import JOBS_CHANNEL, ClaimedJob, PostgresJobs, enqueue_accepted_job
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.wake import WakeListener
from birddog.testing import ManualListener
from birddog.worker import HandlerNotFound, Worker, load_handler
from tests.support import ALICE, BOB, eventually, make_job, settled_job


async def enqueue(pool: Pool, job_id: str, *, recovery: int | None = None) -> Job:
    base = settled_job(key=job_id, reply_to=[ALICE])
    mail = agent_job_payload_mail(base)
    work = AgentWork(
        job_id=job_id,
        session_id=BOB.session_id,
        command_fact_id=f"cmd-{job_id}",
        recovery=None if recovery is None else Recovery(max_recoveries=recovery),
    )
    job = agent_job(work, mail)
    async with pool.acquire() as conn, conn.transaction():
        await enqueue_accepted_job(conn, job)
    return job


def agent_job_payload_mail(job: Job) -> Mail | None:
    from birddog import decode_agent_job  # noqa: PLC0415

    return decode_agent_job(job).mail


@pytest.fixture
async def store(pg_pool: Pool) -> PostgresJobs:
    """The job store on the test database."""
    return PostgresJobs(pg_pool, clock=SystemClock())


def make_worker(
    store: PostgresJobs, handler: Callable[[AgentJobPayload], Awaitable[str]], **kw: float
) -> Worker:
    return Worker(
        jobs=store,
        handler=handler,
        listener=ManualListener(max_wait_s=0.05),
        lease_s=kw.get("lease_s", 3.0),
        handler_timeout_s=kw.get("handler_timeout_s", 10.0),
        shutdown_grace_s=kw.get("shutdown_grace_s", 0.2),
        concurrency=2,
    )


def until_cancelled(cancelled: asyncio.Event) -> Callable[[AgentJobPayload], Awaitable[str]]:
    """A handler that runs until it is cancelled, and then sets ``cancelled``."""

    async def handle(payload: AgentJobPayload) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    return handle


async def reply_of(pool: Pool, job_id: str) -> dict[str, object]:
    row = await pool.fetchrow(
        "SELECT reply FROM birddog.outbox WHERE key = $1", f"outbox:{job_id}:reply:0"
    )
    assert row is not None, "no reply was fanned out"
    reply: dict[str, object] = row["reply"]
    return reply


async def test_a_handlers_text_becomes_a_completed_reply(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """The handler's return value is the reply content of a completed settlement."""

    async def handle(payload: AgentJobPayload) -> str:
        assert payload.mail is not None
        return f"done: {payload.mail.content}"

    await enqueue(pg_pool, "j1")
    await make_worker(store, handle).run(once=True)
    job = await store.get("j1")
    assert (job.state, job.outcome) == (JobState.SETTLED, Outcome.COMPLETED)
    reply = await reply_of(pg_pool, "j1")
    assert reply["content"] == "done: please"


async def test_a_raising_handler_settles_failed_with_a_bounded_diagnostic(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """A handler exception settles failed; the diagnostic is one masked line."""

    async def handle(payload: AgentJobPayload) -> str:
        raise RuntimeError("401\nAuthorization: Bearer sk-secret-1")

    await enqueue(pg_pool, "j2")
    await make_worker(store, handle).run(once=True)
    assert (await store.get("j2")).outcome is Outcome.FAILED
    facts = (await reply_of(pg_pool, "j2"))["reply"]
    assert isinstance(facts, dict)
    assert facts["diagnostic"] == "RuntimeError: 401 Authorization: Bearer [redacted]"


async def test_a_handler_past_its_timeout_is_cancelled_and_interrupted(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """A handler that runs too long is cancelled; without budget the job is interrupted."""
    cancelled = asyncio.Event()
    handle = until_cancelled(cancelled)

    await enqueue(pg_pool, "j3")
    await make_worker(store, handle, handler_timeout_s=0.2).run(once=True)
    assert cancelled.is_set()
    assert (await store.get("j3")).outcome is Outcome.INTERRUPTED
    facts = (await reply_of(pg_pool, "j3"))["reply"]
    assert isinstance(facts, dict)
    assert "timed out" in str(facts["diagnostic"])


async def test_a_timed_out_job_with_budget_is_requeued_and_runs_again(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """With recovery budget left, an interrupted job is queued again and completes."""
    runs = 0

    async def handle(payload: AgentJobPayload) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            await asyncio.Event().wait()
        return "second time lucky"

    await enqueue(pg_pool, "j4", recovery=1)
    await make_worker(store, handle, handler_timeout_s=0.2).run(once=True)
    job = await store.get("j4")
    assert (runs, job.outcome) == (2, Outcome.COMPLETED)


async def test_a_recorded_cancellation_stops_the_handler_and_wins(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """Cancelling a running job cancels its handler at the next heartbeat; replies say cancelled."""
    started = asyncio.Event()

    async def handle(payload: AgentJobPayload) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    await enqueue(pg_pool, "j5")
    run = asyncio.create_task(make_worker(store, handle, lease_s=0.3).run(once=True))
    await asyncio.wait_for(started.wait(), 10)
    await store.cancel(job_id="j5", content="Cancelled by alice.")
    await asyncio.wait_for(run, 10)
    assert (await store.get("j5")).outcome is Outcome.CANCELLED
    assert (await reply_of(pg_pool, "j5"))["content"] == "Cancelled by alice."


async def test_a_cancellation_reaches_the_running_handler_at_once(
    pg_pool: Pool, store: PostgresJobs, database_url: str
) -> None:
    """A cancel's NOTIFY makes the worker heartbeat now: cancelled within 1 s, lease 60 s."""
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handle(payload: AgentJobPayload) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    await enqueue(pg_pool, "j5-hint")
    hints = CancelHints()
    async with WakeListener(database_url, channel=JOBS_CHANNEL, on_notify=hints.heard) as heard:
        worker = Worker(
            jobs=store, handler=handle, listener=heard, lease_s=60.0, cancel_hints=hints
        )
        run = asyncio.create_task(worker.run(once=True))
        await asyncio.wait_for(started.wait(), 10)
        await eventually(lambda: hints.watched == 1, what="the running job watches its hints")
        asked = asyncio.get_running_loop().time()
        await store.cancel(job_id="j5-hint", content="Cancelled by alice.")
        await asyncio.wait_for(cancelled.wait(), 1.0)
        await asyncio.wait_for(run, 5)
        took_s = asyncio.get_running_loop().time() - asked
    assert (await store.get("j5-hint")).outcome is Outcome.CANCELLED
    assert took_s < 1.0, f"the cancellation took {took_s:.2f} s (a heartbeat is 20 s away)"
    assert hints.watched == 0


async def test_a_payload_that_is_not_ours_settles_failed(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """A foreign payload is settled failed with a diagnostic naming the problem."""
    job = Job(job_id="alien", queue="s-bob", payload={"foo": 1})
    async with pg_pool.acquire() as conn, conn.transaction():
        await enqueue_accepted_job(conn, job)

    async def handle(payload: AgentJobPayload) -> str:
        raise AssertionError("the handler must not run")

    await make_worker(store, handle).run(once=True)
    settled = await store.get("alien")
    assert settled.outcome is Outcome.FAILED
    diagnostic = await pg_pool.fetchval(
        "SELECT diagnostic FROM birddog.jobs WHERE job_id = 'alien'"
    )
    assert "not a BirdDog agent job" in diagnostic


async def test_shutdown_interrupts_running_work(pg_pool: Pool, store: PostgresJobs) -> None:
    """On stop, a handler still running after the grace period is cancelled and interrupted."""
    started = asyncio.Event()

    async def handle(payload: AgentJobPayload) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    await enqueue(pg_pool, "j6")
    worker = make_worker(store, handle)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    worker.stop.set()
    await asyncio.wait_for(run, 10)
    job = await store.get("j6")
    assert job.outcome is Outcome.INTERRUPTED
    assert "shut down" in str(
        await pg_pool.fetchval("SELECT diagnostic FROM birddog.jobs WHERE job_id = 'j6'")
    )


async def test_replies_of_settled_jobs_drain(pg_pool: Pool, store: PostgresJobs) -> None:
    """The worker's fan-out is visible to the Postgres outbox as a pending row."""

    async def handle(payload: AgentJobPayload) -> str:
        return "ok"

    await enqueue(pg_pool, "j7")
    await make_worker(store, handle).run(once=True)
    assert await PostgresOutbox(pg_pool).has_pending()


def test_load_handler_reports_bad_specs() -> None:
    """A handler spec without a colon, module or attribute is refused clearly."""
    for spec in ("nocolon", "no.such.module:fn", "birddog:no_such_function"):
        with pytest.raises(HandlerNotFound):
            load_handler(spec)
    assert load_handler("tests.acceptance.handlers:echo").__name__ == "echo"


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ("nul \x00 inside", "handler returned text with a NUL character at index 4"),
        ("lone \ud800", "handler returned text with a lone surrogate (\\ud800) at index 5"),
        ("x" * 1500, "handler returned 1.5 KiB; the limit is 1000 bytes"),
        (42, "handler returned int, not a string"),
    ],
    ids=["nul", "surrogate", "too-large", "not-a-string"],
)
async def test_an_unstorable_result_settles_failed_after_exactly_one_run(
    pg_pool: Pool, result: object, why: str
) -> None:
    """A result that cannot be stored settles failed at once, saying why; the handler runs once."""
    store = PostgresJobs(pg_pool, max_content_bytes=1000, clock=SystemClock())
    runs = 0

    async def handle(payload: AgentJobPayload) -> str:
        nonlocal runs
        runs += 1
        return result  # type: ignore[return-value]

    await enqueue(pg_pool, "j8", recovery=2)
    worker = make_worker(store, handle)
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        with structlog.testing.capture_logs() as events:
            await worker.run(once=True)
        gc.collect()  # a task that died unobserved reports itself when collected
    finally:
        loop.set_exception_handler(previous)
    assert runs == 1
    job_row = await pg_pool.fetchrow(
        "SELECT state, outcome, diagnostic, recovery_count FROM birddog.jobs WHERE job_id = 'j8'"
    )
    assert job_row is not None
    assert (job_row["state"], job_row["outcome"], job_row["recovery_count"]) == (
        "settled",
        "failed",
        0,
    )
    assert job_row["diagnostic"].startswith(why)
    reply = await reply_of(pg_pool, "j8")
    facts = reply["reply"]
    assert isinstance(facts, dict)
    assert (facts["outcome"], str(facts["diagnostic"]).startswith(why)) == ("failed", True)
    unstorable = [e for e in events if e["event"] == "job_result_unstorable"]
    assert len(unstorable) == 1
    assert [e["event"] for e in events if e.get("log_level") in ("warning", "error")] == [
        "job_result_unstorable"
    ]
    assert worker.summary() == {"failed": 1}
    assert unhandled == []


class UnreachableHeartbeats:
    """The real job store, except that every heartbeat finds the database away."""

    def __init__(self, store: PostgresJobs) -> None:
        self.store = store
        self.claim = store.claim
        self.claim_many = store.claim_many
        self.finish = store.finish
        self.queued_backlog = store.queued_backlog

    async def heartbeat(self, *, job_id: str, claim_token: str, lease_s: float) -> bool:
        """Fail as a lost connection would."""
        raise StoreUnavailable("database unavailable during heartbeat: ConnectionResetError")


async def test_a_worker_that_cannot_renew_its_lease_stops_the_handler_and_leaves_the_job(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """Past its lease without a renewal, the turn ends unreported: the reaper owns the job."""
    cancelled = asyncio.Event()
    handle = until_cancelled(cancelled)

    await enqueue(pg_pool, "j9", recovery=1)
    worker = Worker(
        jobs=UnreachableHeartbeats(store),  # type: ignore[arg-type]
        handler=handle,
        listener=ManualListener(max_wait_s=0.05),
        lease_s=0.3,
        handler_timeout_s=30,
    )
    with structlog.testing.capture_logs() as events:
        await asyncio.wait_for(worker.run(once=True), 10)
    assert cancelled.is_set()
    assert "lease_lost" in [e["event"] for e in events]
    row = await pg_pool.fetchrow("SELECT state, outcome FROM birddog.jobs WHERE job_id = 'j9'")
    assert row is not None
    assert (row["state"], row["outcome"]) == ("running", None)
    assert worker.summary() == {}


async def test_a_session_runs_its_next_job_as_soon_as_the_last_one_settles(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """No notification needed: a job of the worker's own ending lets it claim its session's next."""
    for job_id in ("n1", "n2", "n3"):
        await enqueue(pg_pool, job_id)

    async def handle(payload: AgentJobPayload) -> str:
        return "done"

    stop = asyncio.Event()
    worker = Worker(
        jobs=store,
        handler=handle,
        listener=ManualListener(),  # never rung: only the backstop would wake it
        backstop_s=60.0,
        concurrency=4,
        stop=stop,
    )
    running = asyncio.create_task(worker.run())
    try:
        await eventually(
            lambda: worker.settled, "three jobs settled", until=lambda n: n == 3, within_s=10
        )
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert worker.summary() == {"completed": 3}


async def test_once_waits_for_a_job_of_its_queue_queued_behind_another_workers(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """`once` does not return while a job it may take waits behind another worker's running job."""
    await enqueue(pg_pool, "o1")
    await enqueue(pg_pool, "o2")
    other = await store.claim(worker_id="other")  # o1 runs elsewhere; o2 waits behind it
    assert other is not None

    async def handle(payload: AgentJobPayload) -> str:
        return "done"

    worker = make_worker(store, handle)
    running = asyncio.create_task(worker.run(once=True))
    await eventually(
        lambda: worker.left, "the worker saw o2 queued", until=lambda n: n == 1, within_s=10
    )
    assert not running.done()
    await store.finish(
        job_id=other.job.job_id,
        claim_token=other.claim_token,
        event=SettleRequested(Outcome.COMPLETED, "elsewhere"),
    )
    await asyncio.wait_for(running, 10)
    assert (worker.summary(), worker.left) == ({"completed": 1}, 0)


class CountedClaims:
    """The real job store, counting the worker's claims and what each asked for and got."""

    def __init__(self, store: PostgresJobs) -> None:
        self.store = store
        self.calls: list[tuple[int, int]] = []
        self.heartbeat = store.heartbeat
        self.finish = store.finish
        self.queued_backlog = store.queued_backlog
        self.claim = store.claim

    async def claim_many(self, **kwargs: Any) -> list[ClaimedJob]:
        """Claim as the store does; record (limit, jobs claimed)."""
        claimed = await self.store.claim_many(**kwargs)
        self.calls.append((kwargs["limit"], len(claimed)))
        return claimed


async def test_a_worker_claims_its_free_slots_in_one_call_and_waits_after_a_short_claim(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """Three jobs, four free slots: one claim for four takes all three, and none follows at once."""
    release = asyncio.Event()
    for session in ("c-1", "c-2", "c-3"):
        async with pg_pool.acquire() as conn, conn.transaction():
            await enqueue_accepted_job(conn, make_job(session, session=session))
    started: list[str] = []

    async def handle(payload: AgentJobPayload) -> str:
        assert payload.mail is not None
        started.append(payload.mail.key)
        await release.wait()
        return "done"

    counted = CountedClaims(store)
    stop = asyncio.Event()
    worker = Worker(
        jobs=counted,  # type: ignore[arg-type]
        handler=handle,
        listener=ManualListener(),  # never rung: only the backstop would wake it
        backstop_s=60.0,
        concurrency=4,
        stop=stop,
    )
    running = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: len(started), "three handlers started", until=lambda n: n == 3)
        with pytest.raises(TimeoutError):  # no claim follows a short one on its own
            await asyncio.wait_for(asyncio.shield(running), 0.3)
        assert counted.calls == [(4, 3)]
        release.set()
        await eventually(lambda: worker.settled, "three jobs settled", until=lambda n: n == 3)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert worker.summary() == {"completed": 3}
    assert counted.calls[0] == (4, 3)


async def test_a_heartbeat_that_finds_the_job_under_another_claim_stops_the_handler(
    pg_pool: Pool, store: PostgresJobs
) -> None:
    """A claim the database no longer holds (another claim took the job) ends the turn at its next beat."""
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def handle(payload: AgentJobPayload) -> str:
        started.set()
        return await until_cancelled(cancelled)(payload)

    await enqueue(pg_pool, "j-stolen")
    worker = make_worker(store, handle, lease_s=0.6)
    with structlog.testing.capture_logs() as events:
        running = asyncio.create_task(worker.run(once=True))
        await asyncio.wait_for(started.wait(), 10)
        await pg_pool.execute(
            "UPDATE birddog.jobs SET claim_token = gen_random_uuid() WHERE job_id = 'j-stolen'"
        )
        await asyncio.wait_for(running, 10)
    assert cancelled.is_set()
    assert "claim_lost" in [e["event"] for e in events]
    assert worker.summary() == {}
