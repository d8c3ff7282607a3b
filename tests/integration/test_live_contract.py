"""The live-session port's contract: beats, leaves, the TTL's bounds and the grace, fake and Postgres.

InMemoryLiveSessions stands for PostgresLiveSessions in the unit tests of the announcer;
these tests hold the two to the same answers.
"""

from __future__ import annotations

import pytest

from birddog import InvalidInput, RouteNotFound
from birddog.core.live import DEFAULT_LIVE_GRACE_S, LIVE_TTL_MAX_S, LIVE_TTL_MIN_S
from birddog.ports import LiveSessions, RouteEdits
from birddog.postgres.live import PostgresLiveSessions
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, InMemoryLiveSessions, InMemoryRoutes

PORTS = ("LiveSessions",)
"""The ports these tests hold their fake and their Postgres adapter to."""


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[LiveSessions, RouteEdits]:
    """Each backend in turn: the live sessions, and the route book their graces need."""
    if request.param == "memory":
        routes = InMemoryRoutes(clock=FrozenClock())
        return InMemoryLiveSessions(routes=routes), routes
    pool: Pool = request.getfixturevalue("pg_pool")
    return PostgresLiveSessions(pool), PostgresRoutes(pool, cache_s=0, clock=FrozenClock())


async def test_a_beat_makes_a_session_live_and_a_leave_ends_it(
    backend: tuple[LiveSessions, RouteEdits],
) -> None:
    """A beat lists the session under its holder; leaving ends it, once."""
    live, _ = backend
    granted = await live.beat(agent_id="bob", session="s-bob", holder="mcp:a", ttl_s=5)
    assert granted == pytest.approx(5)
    await live.beat(agent_id="bob", session="s-bob", holder="mcp:b", ttl_s=5)
    await live.beat(agent_id="carol", session="s-bob", holder="mcp:a", ttl_s=5)
    found = [(s.agent_id, s.session, s.holder) for s in await live.live()]
    assert found == [
        ("bob", "s-bob", "mcp:a"),
        ("bob", "s-bob", "mcp:b"),
        ("carol", "s-bob", "mcp:a"),
    ]
    assert [s.holder for s in await live.live(agent_id="carol")] == ["mcp:a"]
    assert await live.leave(agent_id="bob", session="s-bob", holder="mcp:a")
    assert not await live.leave(agent_id="bob", session="s-bob", holder="mcp:a")
    assert [s.holder for s in await live.live(agent_id="bob")] == ["mcp:b"]


async def test_a_renewal_keeps_its_start(backend: tuple[LiveSessions, RouteEdits]) -> None:
    """A second beat of a live session moves its expiry, never its start."""
    live, _ = backend
    await live.beat(agent_id="bob", session="s-bob", holder="w", ttl_s=5)
    [first] = await live.live()
    await live.beat(agent_id="bob", session="s-bob", holder="w", ttl_s=10)
    [second] = await live.live()
    assert second.started_at == first.started_at
    assert second.expires_at > first.expires_at


@pytest.mark.parametrize(("asked", "granted"), [(0.01, LIVE_TTL_MIN_S), (3600, LIVE_TTL_MAX_S)])
async def test_the_ttl_is_bounded(
    backend: tuple[LiveSessions, RouteEdits], asked: float, granted: float
) -> None:
    """A TTL below a second or above fifteen is granted as the bound."""
    live, _ = backend
    assert await live.beat(
        agent_id="bob", session="s-bob", holder="w", ttl_s=asked
    ) == pytest.approx(granted)


@pytest.mark.parametrize(
    ("agent_id", "session", "holder", "field"),
    [("", "s", "h", "agentId"), ("a", "", "h", "sessionId"), ("a", "s", "h" * 257, "holder")],
)
async def test_a_bad_name_is_refused(
    backend: tuple[LiveSessions, RouteEdits], agent_id: str, session: str, holder: str, field: str
) -> None:
    """An empty or over-long id or holder is bad input, and nothing is live."""
    live, _ = backend
    with pytest.raises(InvalidInput) as refused:
        await live.beat(agent_id=agent_id, session=session, holder=holder, ttl_s=5)
    assert refused.value.field == field
    assert await live.live() == []


async def test_the_grace_is_the_routes(backend: tuple[LiveSessions, RouteEdits]) -> None:
    """30 s by default; set on a route, put back with None; no route, not found."""
    live, routes = backend
    await routes.add("bob", kind="mailbox")
    assert await live.grace("bob") == DEFAULT_LIVE_GRACE_S
    assert await live.set_grace("bob", 2.0) == 2.0
    assert await live.grace("bob") == 2.0
    assert await live.set_grace("bob", None) == DEFAULT_LIVE_GRACE_S
    assert await live.grace("bob") == DEFAULT_LIVE_GRACE_S
    with pytest.raises(RouteNotFound):
        await live.set_grace("nobody", 1.0)
    with pytest.raises(InvalidInput):
        await live.set_grace("bob", -1.0)
