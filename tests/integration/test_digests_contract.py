"""The digest port's contract: schedules set, read, listed and put back; waiting mail, fake and Postgres.

InMemoryDigests (``InMemoryRoutes.digests``) stands for PostgresDigests
(``PostgresRoutes.digests``) in the commands' unit tests; these tests hold the two to the
same answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, time, timedelta

import pytest

from birddog import Job, RouteNotFound
from birddog.core.digests import DEFAULT_DIGEST, DigestSchedule, DigestWait, next_digest
from birddog.ports import Digests, JobBacklog, RouteEdits
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, InMemoryJobs, InMemoryRoutes
from tests.support import enqueue, make_job

PORTS = ("Digests", "JobBacklog")
"""The ports these tests hold their fake and their Postgres adapter to."""

NOW = datetime.now(UTC).replace(microsecond=0)
"""When the jobs are sent: now, so that Postgres (which judges waiting at now()) agrees."""

Enqueue = Callable[[Job], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[Digests, RouteEdits, Enqueue]:
    """Each backend in turn: the digests, the route book, a way to enqueue a job at NOW."""
    clock = FrozenClock(NOW)
    if request.param == "memory":
        routes = InMemoryRoutes(clock=clock)
        jobs = InMemoryJobs(clock=clock)

        async def put(job: Job) -> None:
            assert await jobs.enqueue(job)

        routes.digests.jobs = jobs
        return routes.digests, routes, put
    pool: Pool = request.getfixturevalue("pg_pool")

    async def insert(job: Job) -> None:
        await enqueue(pool, job, created_at=NOW)

    book = PostgresRoutes(pool, cache_s=0, clock=clock)
    return book.digests, book, insert


async def test_a_schedule_is_the_routes_own_or_the_default(
    backend: tuple[Digests, RouteEdits, Enqueue],
) -> None:
    """Set, read, listed, put back; an agent without a route has none to set."""
    digests, routes, _ = backend
    await routes.add("bob", kind="mailbox")
    await routes.add("carol", kind="mailbox")
    assert await digests.schedule("bob") == DEFAULT_DIGEST
    every = DigestSchedule(every_s=1800)
    assert await digests.set_schedule("bob", every) == every
    daily = DigestSchedule(daily=time(21, 30))
    assert await digests.set_schedule("carol", daily) == daily
    assert await digests.schedule("bob") == every
    assert await digests.schedules() == {"bob": every, "carol": daily}
    assert await digests.set_schedule("bob", None) == DEFAULT_DIGEST
    assert await digests.schedules() == {"bob": DEFAULT_DIGEST, "carol": daily}
    with pytest.raises(RouteNotFound):
        await digests.set_schedule("nobody", every)


async def test_informational_mail_waits_for_its_routes_next_digest(
    backend: tuple[Digests, RouteEdits, Enqueue],
) -> None:
    """A report and a receipt wait until the next digest time; a task waits for none."""
    digests, routes, put = backend
    await routes.add("bob", kind="mailbox")
    daily = DigestSchedule(daily=(NOW + timedelta(hours=6)).time().replace(second=0))
    await digests.set_schedule("bob", daily)
    assert await digests.waiting() == DigestWait()
    await put(make_job("task-1"))
    await put(make_job("report-1", kind="report"))
    await put(make_job("receipt-1", kind="receipt"))
    await put(make_job("report-2", kind="report", agent="carol"))  # carol's default digest
    due = next_digest(daily, NOW)
    assert due > NOW
    assert await digests.waiting(agents=["bob"]) == DigestWait(2, due)
    assert await digests.waiting(queues=["s-bob"]) == DigestWait(3, min(due, carols(NOW)))
    assert await digests.waiting(agents=["dave"]) == DigestWait()


def carols(at: datetime) -> datetime:
    """Carol's digest of mail sent at ``at``: her route's default (she has none)."""
    return next_digest(DEFAULT_DIGEST, at)


@pytest.fixture(params=["memory", "postgres"])
def backlog(request: pytest.FixtureRequest) -> tuple[JobBacklog, Enqueue]:
    """Each job store in turn, with a way to enqueue a job at NOW."""
    if request.param == "memory":
        jobs = InMemoryJobs(clock=FrozenClock(NOW))

        async def put(job: Job) -> None:
            assert await jobs.enqueue(job)

        return jobs, put
    pool: Pool = request.getfixturevalue("pg_pool")

    async def insert(job: Job) -> None:
        await enqueue(pool, job, created_at=NOW)

    return PostgresJobs(pool, clock=FrozenClock(NOW)), insert


async def test_the_backlog_leaves_out_mail_waiting_for_its_digest_but_a_live_sessions(
    backlog: tuple[JobBacklog, Enqueue],
) -> None:
    """A worker's backlog counts the task alone; a live session's counts the report too."""
    jobs, put = backlog
    await put(make_job("task-1"))
    await put(make_job("report-1", kind="report"))
    assert await jobs.queued_backlog(queues=["s-bob"]) == (1, NOW)
    assert await jobs.queued_backlog(queues=["s-bob"], digests=True) == (2, NOW)


@pytest.mark.parametrize(
    "schedule",
    [
        DEFAULT_DIGEST,
        DigestSchedule(daily=time(0, 0)),
        DigestSchedule(daily=time(23, 59)),
        DigestSchedule(every_s=60),
        DigestSchedule(every_s=1800),
        DigestSchedule(every_s=5400),
        DigestSchedule(every_s=7 * 86400),
    ],
    ids=str,
)
async def test_the_database_and_python_agree_on_every_digest_time(
    pg_pool: Pool, schedule: DigestSchedule
) -> None:
    """birddog._digest_at is next_digest: at, before and after a digest time, on any day."""
    book = PostgresRoutes(pg_pool, cache_s=0, clock=FrozenClock(NOW))
    await book.add("bob", kind="mailbox")
    await book.digests.set_schedule("bob", schedule)
    first = next_digest(schedule, NOW)
    moments = [NOW, first, first - timedelta(microseconds=1), first + timedelta(microseconds=1)]
    moments += [
        datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2027, 3, 28, 1, 30, tzinfo=UTC),
    ]
    for at in moments:
        found = await pg_pool.fetchval("SELECT birddog._digest_at('bob', $1)", at)
        assert found == next_digest(schedule, at), at
        assert found >= at
    assert next_digest(schedule, first) == first  # a mail sent at its digest time goes then
