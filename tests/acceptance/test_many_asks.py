"""A thousand asks at once on a pool of ten: each answers, or times out on time.

The orchestrator's shape: one process fans a question out with ``asyncio.gather``. Its
waits share one listener and hold no pool connection, so a pool far smaller than the
number of asks serves them all (it once hung for ever: 200 asks on a pool of 60). The
asked agents are served by a real ``birddog worker`` and a real drain daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from birddog import AskTimedOut, open_asking
from birddog.asking import Asking
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support.cli import Daemon

ASKS = 1000
SESSIONS = 100
"""The asks go to this many sessions of one agent: a session takes one turn at a time."""


async def timed_ask(asking: Asking, index: int, timeout_s: float) -> tuple[str | None, float]:
    """Ask one question; its answer (None: timed out) and how long the call took."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        answer: str | None = await asking.ask(
            to=f"echo:s-{index % SESSIONS}",
            from_="fan:s-fan",
            content=f"question {index}",
            timeout_s=timeout_s,
        )
    except AskTimedOut:
        answer = None
    return answer, loop.time() - began


@pytest.fixture
async def small_pool(database_url: str) -> AsyncIterator[Pool]:
    """The asking process's pool: ten connections for a thousand asks."""
    pool = await create_pool(database_url, min_size=1, max_size=10)
    yield pool
    await pool.close()


@pytest.fixture
async def echo_agent(pg_pool: Pool, daemons: Callable[..., Daemon]) -> None:
    """The asked agent has a mailbox route, and a drain daemon delivers the replies."""
    await PostgresRoutes(pg_pool).add("echo", kind="mailbox")
    daemons()


@pytest.mark.usefixtures("echo_agent")
async def test_a_thousand_asks_on_a_pool_of_ten_are_all_answered(
    database_url: str, small_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """Every one of 1,000 concurrent asks gets its own answer, none past its timeout."""
    daemons(
        "--handler",
        "tests.acceptance.handlers:echo",
        command="worker",
        BIRDDOG_WORKER_CONCURRENCY="32",
    )
    timeout_s = 90.0
    async with open_asking(small_pool, database_url) as asking:
        results = await asyncio.gather(*(timed_ask(asking, i, timeout_s) for i in range(ASKS)))
    answers = [answer for answer, _ in results]
    assert answers == [f"echo: question {i}" for i in range(ASKS)]
    slowest = max(took for _, took in results)
    assert slowest <= timeout_s, slowest


@pytest.mark.usefixtures("echo_agent")
async def test_a_thousand_asks_with_no_worker_all_time_out_on_time(
    database_url: str, small_pool: Pool
) -> None:
    """With nobody answering, each of 1,000 asks times out within its timeout plus a second."""
    timeout_s = 6.0
    async with open_asking(small_pool, database_url) as asking:
        results = await asyncio.gather(*(timed_ask(asking, i, timeout_s) for i in range(ASKS)))
    assert [answer for answer, _ in results] == [None] * ASKS
    took = sorted(took for _, took in results)
    assert took[0] >= timeout_s - 0.05, took[0]
    assert took[-1] <= timeout_s + 1.0, took[-1]
    asked = await small_pool.fetchval("SELECT count(*) FROM birddog.jobs")
    assert asked == ASKS  # every question was asked, and stays owed
