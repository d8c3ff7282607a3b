"""PostgresRoutes: the route book port and the operator's edits, on a real database."""

from __future__ import annotations

import asyncio
import base64
import logging

import pytest

from birddog import InvalidInput, RouteNotFound
from birddog.clock import SystemClock
from birddog.core.errors import InvalidSecret
from birddog.ports import Route, RouteBook
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes, new_secret
from birddog.postgres.wake import PostgresWake

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


async def test_add_then_route_returns_it(pg_pool: Pool) -> None:
    """An added route is what the route book answers for that agent; others are unknown."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    book: RouteBook = routes
    added = await routes.add("alice", "https://alice.example/inbox", secret=SECRET)
    assert added == Route(agent_id="alice", url="https://alice.example/inbox", secret=SECRET)
    assert await book.route("alice") == added
    assert await book.route("bob") is None


async def test_a_generated_secret_is_32_random_bytes(pg_pool: Pool) -> None:
    """Without a secret, add generates whsec_ plus the base64 of 32 fresh random bytes."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    first = await routes.add("alice", "http://127.0.0.1:8080/inbox")
    second = await routes.add("bob", "http://127.0.0.1:8080/inbox")
    for route in (first, second):
        assert route.secret is not None
        assert route.secret.startswith("whsec_")
        assert len(base64.b64decode(route.secret.removeprefix("whsec_"))) == 32
    assert first.secret != second.secret
    assert new_secret() != new_secret()


async def test_repr_and_logs_never_show_the_secret(
    pg_pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """A route's repr hides its secret, and route operations log nothing that holds it."""
    caplog.set_level(logging.DEBUG)
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    route = await routes.add("alice", "https://alice.example/inbox", secret=SECRET)
    await routes.hold("alice")
    await routes.release("alice")
    assert SECRET not in repr(route)
    assert SECRET not in repr(await routes.list())
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/inbox",
        "javascript:alert(1)",
        "http://",
        "https:///path-only",
        "not a url",
        "example.com/inbox",
        "http://exa mple.com/",
        "http://example.com:notaport/",
        "http://example.com/\x00",
        "https://example.com/" + "x" * 2100,
    ],
)
async def test_only_http_and_https_urls_with_a_host_are_accepted(pg_pool: Pool, url: str) -> None:
    """A URL that is not http(s) with a host is refused, naming ``url``, and nothing is stored."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    with pytest.raises(InvalidInput) as refused:
        await routes.add("alice", url)
    assert refused.value.field == "url"
    assert await routes.list() == []


@pytest.mark.parametrize("agent_id", ["", "a" * 257, "nul\x00id"])
async def test_agent_ids_are_validated_like_addresses(pg_pool: Pool, agent_id: str) -> None:
    """Agent ids must be 1 to 256 storable characters, like an AgentAddress's."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    with pytest.raises(InvalidInput) as refused:
        await routes.add(agent_id, "https://example.com/inbox")
    assert refused.value.field == "agentId"
    assert await routes.list() == []


async def test_a_bad_secret_is_refused_without_echoing_it(pg_pool: Pool) -> None:
    """A secret that is not whsec_<base64> is refused, and the message does not repeat it."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    for secret in ("whsec_!!!not-base64!!!", "whsec_", "hunter2"):
        with pytest.raises(InvalidSecret) as refused:
            await routes.add("alice", "https://example.com/inbox", secret=secret)
        assert refused.value.field == "secret"
        assert "!!!not-base64!!!" not in str(refused.value)
        assert "hunter2" not in str(refused.value)
    assert await routes.list() == []


async def test_adding_an_existing_agent_is_refused(pg_pool: Pool) -> None:
    """A second add for the same agent is refused, so a secret is never replaced by mistake."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    original = await routes.add("alice", "https://example.com/inbox")
    with pytest.raises(InvalidInput) as refused:
        await routes.add("alice", "https://other.example/inbox")
    assert refused.value.field == "agentId"
    assert await routes.route("alice") == original


async def test_update_changes_only_what_is_given(pg_pool: Pool) -> None:
    """Update replaces the URL and/or secret given and keeps the rest."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    original = await routes.add("alice", "https://example.com/inbox")
    moved = await routes.update("alice", url="https://new.example/inbox")
    assert (moved.url, moved.secret) == ("https://new.example/inbox", original.secret)
    rotated = await routes.update("alice", secret=SECRET)
    assert (rotated.url, rotated.secret) == ("https://new.example/inbox", SECRET)
    with pytest.raises(InvalidInput):
        await routes.update("alice", url="gopher://x")
    with pytest.raises(RouteNotFound):
        await routes.update("nobody", url="https://example.com/")


async def test_hold_and_release(pg_pool: Pool) -> None:
    """Hold disables a route; release enables it again and wakes a drain."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    wake = PostgresWake(pg_pool)
    await routes.add("alice", "https://example.com/inbox")
    held = await routes.hold("alice")
    assert held.enabled is False
    assert (await routes.route("alice")) == held
    assert await wake.wake_at() is None

    released = await routes.release("alice")
    assert released.enabled is True
    assert await wake.wake_at() is not None


async def test_added_held_route(pg_pool: Pool) -> None:
    """A route can be added already held."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    route = await routes.add("alice", "https://example.com/inbox", enabled=False)
    assert route.enabled is False


async def test_missing_routes_raise_route_not_found(pg_pool: Pool) -> None:
    """Hold, release and remove of an unknown agent raise RouteNotFound."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    for operation in (routes.hold, routes.release, routes.remove):
        with pytest.raises(RouteNotFound):
            await operation("nobody")


async def test_remove_and_list(pg_pool: Pool) -> None:
    """List returns routes by agent id; a removed route is gone."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    for agent in ("carol", "alice", "bob"):
        await routes.add(agent, f"https://{agent}.example/inbox")
    assert [route.agent_id for route in await routes.list()] == ["alice", "bob", "carol"]
    await routes.remove("bob")
    assert [route.agent_id for route in await routes.list()] == ["alice", "carol"]
    assert await routes.route("bob") is None


async def test_lookups_are_cached_but_local_edits_take_effect_at_once(pg_pool: Pool) -> None:
    """A looked-up route is reused without a query; an edit here replaces it immediately."""
    routes = PostgresRoutes(pg_pool, cache_s=60, clock=SystemClock())
    await routes.add("zed", "http://127.0.0.1:9/a")
    first = await routes.route("zed")
    await pg_pool.execute("UPDATE birddog.routes SET url = 'http://127.0.0.1:9/b'")
    assert await routes.route("zed") == first
    updated = await routes.update("zed", url="http://127.0.0.1:9/c")
    assert await routes.route("zed") == updated
    await routes.remove("zed")
    assert await routes.route("zed") is None


async def test_unknown_agents_are_never_cached(pg_pool: Pool) -> None:
    """A route added by another process is found at the next lookup."""
    routes = PostgresRoutes(pg_pool, cache_s=60, clock=SystemClock())
    assert await routes.route("late") is None
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("late", "http://127.0.0.1:9/x")
    found = await routes.route("late")
    assert found is not None
    assert found.url == "http://127.0.0.1:9/x"


async def test_concurrent_lookups_of_one_agent_share_one_query(pg_pool: Pool) -> None:
    """Posts that miss the cache at once get one lookup's route, not one query each."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("herd", "http://127.0.0.1:9/inbox")
    routes = PostgresRoutes(pg_pool, cache_s=0, clock=SystemClock())
    found = await asyncio.gather(*(routes.route("herd") for _ in range(16)))
    assert {id(route) for route in found} == {id(found[0])}
    assert found[0] is not None
    assert found[0].url == "http://127.0.0.1:9/inbox"
    again = await routes.route("herd")
    assert again is not found[0]
    assert list(await asyncio.gather(routes.route("nobody"), routes.route("nobody"))) == [
        None,
        None,
    ]
