"""The route ports' contract: the route book, its edits, holds and list, fake and Postgres.

InMemoryRoutes stands for PostgresRoutes in the unit tests (the console's actions, the
mail service's known targets, replay's checks); these tests hold the two to the same
answers: what a route may be, what an edit changes, what a hold and a release do.
"""

from __future__ import annotations

import pytest

from birddog import InvalidInput, RouteNotFound
from birddog.core.egress import EgressPolicy
from birddog.core.errors import InvalidSecret
from birddog.ports import PushRoutes, RouteEdits, RouteList, RouteSummary
from birddog.postgres.pool import Pool
from birddog.postgres.push_routes import PostgresPushRoutes
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, InMemoryRoutes
from tests.support import T0

PORTS = ("RouteBook", "RouteHolds", "RouteEdits", "RouteList", "PushRoutes")
"""The ports these tests hold their fake and their Postgres adapter to."""

URL = "https://alice.example/inbox"
PUSH_ID = "a2a-push:0123456789abcdef0123456789abcdef01234567"
PUSHES = EgressPolicy().for_pushes()
"""Push URLs: public addresses only (the A2A server's default)."""


class Routes(RouteEdits, RouteList):
    """What both backends are: the route book, its edits and holds, and its list."""


@pytest.fixture
def memory_backend() -> InMemoryRoutes:
    """The in-memory route book."""
    return InMemoryRoutes(clock=FrozenClock(T0), push_egress=PUSHES)


@pytest.fixture
def postgres_backend(pg_pool: Pool) -> PostgresRoutes:
    """The Postgres route book on a fresh database, uncached."""
    return PostgresRoutes(pg_pool, cache_s=0, clock=FrozenClock(T0), push_egress=PUSHES)


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def routes(request: pytest.FixtureRequest) -> Routes:
    """Each backend in turn."""
    result: Routes = request.getfixturevalue(request.param)
    return result


async def test_an_added_route_is_found_with_a_fresh_secret(routes: Routes) -> None:
    """An http route without a secret gets a whsec_ one; it reads back as added."""
    added = await routes.add("alice", URL)
    assert added.secret is not None
    assert added.secret.startswith("whsec_")
    found = await routes.route("alice")
    assert found is not None
    assert (found.url, found.kind, found.enabled, found.secret) == (URL, "http", True, added.secret)
    assert await routes.route("nobody") is None


async def test_a_second_route_for_an_agent_is_refused(routes: Routes) -> None:
    """Adding a route an agent has already is bad input (update it instead)."""
    await routes.add("alice", kind="mailbox")
    with pytest.raises(InvalidInput, match="already has a route"):
        await routes.add("alice", URL)


@pytest.mark.parametrize(
    ("url", "secret", "kind", "field"),
    [
        (None, None, "http", "url"),
        ("ftp://alice.example/", None, "http", "url"),
        (URL, None, "mailbox", "url"),
        (URL, None, "carrier-pigeon", "kind"),
    ],
)
async def test_a_bad_route_is_refused_naming_the_field(
    routes: Routes, url: str | None, secret: str | None, kind: str, field: str
) -> None:
    """A route without a URL, with a bad one, a mailbox with one, a bad kind: refused."""
    with pytest.raises(InvalidInput) as refused:
        await routes.add("alice", url, secret, kind=kind)  # type: ignore[arg-type]
    assert refused.value.field == field
    assert await routes.route("alice") is None


async def test_a_bad_secret_is_refused(routes: Routes) -> None:
    """A signing secret that is not whsec_<base64> is InvalidSecret."""
    with pytest.raises(InvalidSecret):
        await routes.add("alice", URL, "hunter2")


async def test_an_update_changes_only_what_it_names(routes: Routes) -> None:
    """A new URL and batch size; the secret and kind stay; an unknown agent is not found."""
    added = await routes.add("alice", URL)
    updated = await routes.update("alice", url="https://alice.example/v2", batch_size=10)
    assert (updated.url, updated.batch_size, updated.secret) == (
        "https://alice.example/v2",
        10,
        added.secret,
    )
    with pytest.raises(RouteNotFound):
        await routes.update("nobody", batch_size=2)


async def test_a_hold_keeps_its_first_time_and_a_release_ends_it(routes: Routes) -> None:
    """Held: not enabled, since the first hold; released: enabled, no hold time."""
    await routes.add("alice", kind="mailbox")
    held = await routes.hold("alice")
    again = await routes.hold("alice")
    assert (held.enabled, held.held_at, again.held_at) == (False, T0, T0)
    released = await routes.release("alice")
    assert (released.enabled, released.held_at) == (True, None)
    with pytest.raises(RouteNotFound):
        await routes.hold("nobody")
    with pytest.raises(RouteNotFound):
        await routes.release("nobody")


async def test_the_list_is_by_agent_id_without_secrets(routes: Routes) -> None:
    """Every route, sorted by agent id, none carrying its secret."""
    await routes.add("carol", URL)
    await routes.add("alice", kind="mailbox")
    listed = await routes.list()
    assert [route.agent_id for route in listed] == ["alice", "carol"]
    assert all(route.secret is None for route in listed)


async def test_the_summaries_are_by_agent_id_with_kind_and_hold(routes: Routes) -> None:
    """Every route's agent id, kind and hold, sorted by agent id (what anyone may know)."""
    await routes.add("carol", URL)
    await routes.add("alice", kind="mailbox", enabled=False)
    assert await routes.summaries() == [
        RouteSummary(agent_id="alice", kind="mailbox", enabled=False),
        RouteSummary(agent_id="carol", kind="http", enabled=True),
    ]


async def test_one_agents_summary_is_read_as_it_is_now(routes: Routes) -> None:
    """Only that agent's summary (held or not); none for an agent without a route."""
    await routes.add("carol", URL)
    await routes.add("alice", kind="mailbox")
    await routes.hold("alice")
    assert await routes.summaries("alice") == [
        RouteSummary(agent_id="alice", kind="mailbox", enabled=False)
    ]
    assert await routes.summaries("carol") == [RouteSummary(agent_id="carol", kind="http")]
    assert await routes.summaries("nobody") == []


@pytest.fixture
def push_routes(routes: Routes, request: pytest.FixtureRequest) -> PushRoutes:
    """The push routes over the same database (the fake: the same route book)."""
    if isinstance(routes, PostgresRoutes):
        return PostgresPushRoutes(request.getfixturevalue("pg_pool"), push_egress=PUSHES)
    assert isinstance(routes, InMemoryRoutes)
    return routes


async def test_a_push_route_is_stored_and_read_back_only_as_a_push_configs(
    routes: Routes, push_routes: PushRoutes
) -> None:
    """Who has a route is known; only a push config's route reads back or is written as one."""
    await routes.add("alice", URL)
    assert await push_routes.known("alice")
    assert not await push_routes.known("nobody")
    assert await push_routes.push_route("alice") is None  # an http route's URL is not the A2A's
    added = await push_routes.add_push_route(PUSH_ID, "https://push.example/hook", "tok")
    assert (added.kind, added.url, added.secret) == ("a2a", "https://push.example/hook", "tok")
    found = await push_routes.push_route(PUSH_ID)
    assert found is not None
    assert (found.kind, found.url, found.secret) == ("a2a", "https://push.example/hook", "tok")
    assert await push_routes.known(PUSH_ID)
    with pytest.raises(InvalidInput, match="already has a route"):
        await push_routes.add_push_route(PUSH_ID, "https://other.example/", "tok")
    with pytest.raises(InvalidInput, match="a2a-push"):
        await push_routes.add_push_route("bob", "https://push.example/hook", "tok")
    with pytest.raises(InvalidInput):
        await push_routes.add_push_route(PUSH_ID + "0", "http://127.0.0.1/hook", "tok")
    assert await push_routes.push_route(PUSH_ID + "0") is None
