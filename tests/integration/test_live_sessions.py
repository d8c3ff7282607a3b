"""Live sessions first: a worker's claim leaves a live session's queue to it for the grace.

Real PostgreSQL, real claims: the live session's holder claims what a worker may not yet,
the worker takes it once the job has waited its route's grace or the live session has
gone (left, or its TTL passed), a live session of another agent's session of the same id
holds nothing, and the beats and the leave wake the workers (``NOTIFY birddog_jobs``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from birddog import AgentAddress, AgentWork, Job, Mail, agent_job
from birddog.clock import SystemClock
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.live import PostgresLiveSessions
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import ALICE, BOB, enqueue, eventually

CLOCK = SystemClock()
HOLDER = "mcp:host:1"
WORKER = "host:2"


def mail_job(job_id: str, *, to: AgentAddress = BOB, kind: str = "task") -> Job:
    """Job ``job_id``: a mail from alice to ``to``."""
    mail = Mail(key=f"m-{job_id}", to=to, from_=ALICE, reply_to=[ALICE], content="hi", created_at=1)
    work = AgentWork(job_id=job_id, session_id=to.session_id, command_fact_id=f"c-{job_id}")
    return agent_job(work, mail, kind=kind)


@pytest.fixture
def jobs(pg_pool: Pool) -> PostgresJobs:
    """The job store on the test database, on the wall clock."""
    return PostgresJobs(pg_pool, clock=CLOCK)


@pytest.fixture
def live(pg_pool: Pool) -> PostgresLiveSessions:
    """The live sessions on the test database."""
    return PostgresLiveSessions(pg_pool)


async def beat(live: PostgresLiveSessions, who: AgentAddress = BOB, ttl_s: float = 5) -> None:
    """One beat of ``HOLDER``'s live session of ``who``."""
    await live.beat(agent_id=who.agent_id, session=who.session_id, holder=HOLDER, ttl_s=ttl_s)


@pytest.mark.parametrize("kind", ["task", "report"])
async def test_a_live_sessions_queue_is_its_own_for_the_grace(
    jobs: PostgresJobs, live: PostgresLiveSessions, pg_pool: Pool, kind: str
) -> None:
    """While bob's session is live, a worker claims none of its fresh jobs; the holder takes them."""
    await beat(live)
    await enqueue(pg_pool, mail_job("j1", kind=kind), mail_job("j2", kind=kind))
    assert await jobs.claim(worker_id=WORKER) is None
    assert await jobs.claim(agents=["bob"], worker_id=WORKER) is None
    assert await jobs.claim_many(queues=["s-bob"], worker_id=WORKER, limit=5, batch=5) == []
    taken = await jobs.claim(queues=["s-bob"], worker_id=HOLDER)
    assert taken is not None
    assert taken.job.job_id == "j1"


async def test_a_worker_takes_what_waited_past_the_grace(
    jobs: PostgresJobs, live: PostgresLiveSessions, pg_pool: Pool
) -> None:
    """A job sent longer ago than the route's grace goes to the worker, live session or not."""
    await PostgresRoutes(pg_pool, clock=CLOCK).add("bob", kind="mailbox")
    await live.set_grace("bob", 2.0)
    await beat(live)
    await enqueue(pg_pool, mail_job("old"), created_at=CLOCK.now() - timedelta(seconds=3))
    await enqueue(pg_pool, mail_job("new"))
    # A batched claim takes the job past the grace and leaves the fresh one behind it.
    claimed = await jobs.claim_many(worker_id=WORKER, limit=1, batch=5)
    assert [c.job.job_id for c in claimed] == ["old"]


async def test_a_live_session_that_left_or_lapsed_holds_nothing(
    jobs: PostgresJobs, live: PostgresLiveSessions, pg_pool: Pool
) -> None:
    """After the holder leaves, or its TTL passes without a beat, the worker claims at once."""
    lapsing = AgentAddress(agent_id="bob", session_id="s-2")
    await beat(live)
    await beat(live, lapsing, ttl_s=1)
    await enqueue(pg_pool, mail_job("j1"), mail_job("j2", to=lapsing))
    assert await jobs.claim(worker_id=WORKER) is None
    assert await live.leave(agent_id="bob", session="s-bob", holder=HOLDER)
    first = await jobs.claim(worker_id=WORKER)
    assert first is not None
    assert first.job.job_id == "j1"
    # Nothing beats s-2 again: once its TTL has passed, the worker takes its job.
    second = await eventually(
        lambda: jobs.claim(queues=["s-2"], worker_id=WORKER), "the lapsed session's job", within_s=5
    )
    assert second is not None
    assert second.job.job_id == "j2"
    assert await live.live() == []


async def test_another_agents_session_of_the_same_id_is_not_held(
    jobs: PostgresJobs, live: PostgresLiveSessions, pg_pool: Pool
) -> None:
    """A live s-bob of carol's holds carol's queue only: bob's s-bob goes to the worker."""
    await beat(live, AgentAddress(agent_id="carol", session_id="s-bob"))
    await enqueue(pg_pool, mail_job("j1"))
    claimed = await jobs.claim(worker_id=WORKER)
    assert claimed is not None


async def test_the_beats_and_the_leave_wake_the_workers(
    live: PostgresLiveSessions, pg_pool: Pool, database_url: str
) -> None:
    """A beat after a queued job's grace ended, and a leave with jobs queued, NOTIFY birddog_jobs."""
    await PostgresRoutes(pg_pool, clock=CLOCK).add("bob", kind="mailbox")
    await live.set_grace("bob", 0.5)
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(database_url)
    try:
        await conn.add_listener("birddog_jobs", lambda *args: heard.put_nowait(args[3]))
        await beat(live)
        await enqueue(pg_pool, mail_job("j1"))
        assert await heard.get() == "s-bob"  # the enqueue's own
        assert heard.empty()

        async def beaten() -> bool:
            await beat(live)
            return not heard.empty()

        await eventually(beaten, "a beat's notification once the grace ended", within_s=5)
        assert await heard.get() == "s-bob"
        assert await live.leave(agent_id="bob", session="s-bob", holder=HOLDER)
        assert await asyncio.wait_for(heard.get(), 5) == "s-bob"
    finally:
        await conn.close()
