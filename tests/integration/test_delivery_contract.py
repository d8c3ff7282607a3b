"""The delivery ports' contract: transports, the wake and the clock, fake and real alike.

RecordingTransport and RecordingParcelTransport stand for the HTTP transport (posting to a
real inbox on 127.0.0.1), ManualWake for the Postgres wake table, FrozenClock for the wall
clock: an accepted post is accepted and a refused one a failure, one result per parcel; an
armed wake is what a drainer going to sleep looks again at; the time is aware.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from aiohttp import web

from birddog.clock import SystemClock
from birddog.core.delivery import Accepted, Failed, Parcel, as_result
from birddog.core.mail import AgentAddress, Reply, ReplyFacts
from birddog.http import HttpTransport, StaticRoutes
from birddog.ports import Clock, ParcelTransport, WakeBoard
from birddog.postgres.pool import Pool
from birddog.postgres.wake import PostgresWake
from birddog.testing import FrozenClock, ManualWake, RecordingParcelTransport
from tests.support import T0
from tests.support.inbox import posts_to

PORTS = ("Transport", "ParcelTransport", "WakeScheduler", "WakeBoard", "Clock")
"""The ports these tests hold their fakes and their real adapters to."""


def reply(index: int) -> Reply:
    """Reply ``index`` to the agent ``caller``."""
    return Reply(
        key=f"outbox:mail-1:reply:{index}",
        in_reply_to="mail-1",
        to=AgentAddress(agent_id="caller", session_id="s-a"),
        from_=AgentAddress(agent_id="worker", session_id="s-b"),
        content="the answer is 42",
        created_at=1_767_225_600_000,
        reply=ReplyFacts(command_id="command-1", outcome="completed"),
    )


@dataclass
class Posting:
    """A transport under test and the switch that makes its recipient refuse."""

    transport: ParcelTransport
    refuse: Callable[[], None]


@pytest.fixture
async def memory_posting() -> Posting:
    """The recording transport, accepting until told to refuse."""
    transport = RecordingParcelTransport(True)

    def refuse() -> None:
        transport.answer = False

    return Posting(transport, refuse)


@pytest.fixture
async def http_posting() -> AsyncIterator[Posting]:
    """The HTTP transport, posting to a real inbox on 127.0.0.1."""
    accepting = [True]

    async def handle(_: web.Request) -> web.StreamResponse:
        if accepting[0]:
            return web.json_response({"accepted": True})
        return web.Response(status=500, text="no")

    def refuse() -> None:
        accepting[0] = False

    async with posts_to(handle, "/inbox") as url:
        routes = StaticRoutes()
        routes.add("caller", url)
        async with HttpTransport(routes, timeout_s=5.0, clock=SystemClock()) as http:
            yield Posting(http, refuse)


@pytest.fixture(params=["memory_posting", "http_posting"])
def posting(request: pytest.FixtureRequest) -> Posting:
    """Each transport in turn."""
    result: Posting = request.getfixturevalue(request.param)
    return result


async def test_an_accepted_post_is_accepted_and_a_refused_one_fails(posting: Posting) -> None:
    """A recipient that acknowledges: Accepted; one that refuses: a failure, never a receipt."""
    assert as_result(await posting.transport.post(reply(0))) == Accepted()
    posting.refuse()
    assert isinstance(as_result(await posting.transport.post(reply(1))), Failed)


async def test_parcels_get_one_result_each_in_order(posting: Posting) -> None:
    """Posting stored replies as they are gives one result per parcel."""
    parcels = [Parcel.of(reply(0))]
    assert await posting.transport.post_parcels(parcels) == [Accepted()]
    posting.refuse()
    [result] = await posting.transport.post_parcels([Parcel.of(reply(1))])
    assert isinstance(result, Failed)


@pytest.fixture
def memory_wake() -> WakeBoard:
    """The manual wake."""
    return ManualWake()


@pytest.fixture
def postgres_wake(pg_pool: Pool) -> WakeBoard:
    """The Postgres wake table on a fresh database."""
    return PostgresWake(pg_pool)


@pytest.fixture(params=["memory_wake", "postgres_wake"])
def wake(request: pytest.FixtureRequest) -> WakeBoard:
    """Each wake in turn."""
    result: WakeBoard = request.getfixturevalue(request.param)
    return result


async def test_a_drainer_sleeps_until_its_own_time_when_no_wake_is_armed(wake: WakeBoard) -> None:
    """Nothing armed: a drainer going to sleep looks again when it meant to."""
    until = T0 + timedelta(minutes=5)
    assert await wake.going_to_sleep(until=until, now=T0) == until


async def test_an_armed_wake_before_the_drainers_time_comes_first(wake: WakeBoard) -> None:
    """A wake armed between now and the drainer's time is when it looks again."""
    armed = T0 + timedelta(minutes=1)
    await wake.schedule_wake(at=armed)
    assert await wake.going_to_sleep(until=T0 + timedelta(minutes=5), now=T0) == armed


@pytest.mark.parametrize("clock", [FrozenClock(T0), SystemClock()], ids=["frozen", "system"])
def test_the_time_is_aware_and_never_goes_back(clock: Clock) -> None:
    """now() carries a time zone, and a second reading is not earlier than the first."""
    first = clock.now()
    assert first.tzinfo is not None
    assert clock.now() >= first
