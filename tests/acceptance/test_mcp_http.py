"""``birddog mcp --http`` as clients find it, over real HTTP.

The 401 that says where to look, the metadata, the test mode, per-token session quotas
and idle timeouts, resumable SSE streams.

Each test starts its own ``birddog mcp --http --port 0`` on a fresh database and talks to it
with plain HTTP requests (what a client sees before and around the protocol) or the mcp
package's own client.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import httpx2
import pytest

from birddog.core.errors import InvalidSetting
from birddog.mcp.http import check_test_mode
from tests.support import eventually
from tests.support.cli import Daemon, cli, token_of
from tests.support.mcp import ACCEPT, INITIALIZE, call, http_client, http_session, server_url


@pytest.fixture
async def tokens(database_url: str) -> dict[str, str]:
    """Two agents' tokens (``birddog agent add``)."""
    issued = {}
    for address in ("alice:s-alice", "bob:s-bob"):
        added = await cli(database_url, "agent", "add", address)
        assert added.returncode == 0, added.stderr
        issued[address.split(":")[0]] = token_of(added.stdout)
    return issued


@contextlib.asynccontextmanager
async def served(database_url: str, *args: str, **env: str) -> AsyncIterator[tuple[str, Daemon]]:
    """``birddog mcp --http --port 0 ARGS``: its /mcp URL and the process."""
    server = Daemon(database_url, "--http", "--port", "0", *args, command="mcp", **env)
    try:
        yield await server_url(server), server
    finally:
        code, log = server.terminate()
        assert code == 0, log


async def initialize(client: httpx2.AsyncClient, url: str) -> httpx2.Response:
    """A raw initialize request; the response read whole (its SSE stream ends with it)."""
    return await client.post(url, json=INITIALIZE, headers=ACCEPT)


def sse_events(body: str) -> list[dict[str, str]]:
    """The events of an SSE body, each its fields (``id``, ``retry``, ``data``...)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        if fields:
            events.append(fields)
    return events


async def test_a_request_without_a_token_is_told_where_to_find_out(
    database_url: str, tokens: dict[str, str]
) -> None:
    """401 names resource_metadata; the RFC 9728 metadata and its page say: birddog agent token."""
    async with served(database_url) as (url, _server):
        base = url.removesuffix("/mcp")
        async with http_client(None) as client:
            refused = await client.post(url, json=INITIALIZE, headers=ACCEPT)
            assert refused.status_code == 401
            challenge = refused.headers["www-authenticate"]
            assert challenge.startswith("Bearer ")
            expected = f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
            assert expected in challenge
            for path in (
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource",
            ):
                metadata = (await client.get(base + path)).json()
                assert metadata["resource"] == url
                assert metadata["bearer_methods_supported"] == ["header"]
                assert "authorization_servers" not in metadata
                assert "birddog agent token" in metadata["resource_name"]
            page = await client.get(metadata["resource_documentation"])
        assert page.status_code == 200
        assert "There is no OAuth authorization server" in page.text
        assert "birddog agent token AGENT:SESSION" in page.text
        assert "Authorization: Bearer <token>" in page.text
        async with http_session(url, tokens["alice"]) as session:
            _, text, is_error = await call(session, "inbox")
            assert not is_error, text


async def test_the_insecure_test_mode_serves_one_agent_with_no_token_and_says_so_loudly(
    database_url: str,
) -> None:
    """--insecure-test-mode warns at start and serves every request, token or not, as its agent."""
    async with served(database_url, "--insecure-test-mode", "tester:s-tester") as (url, server):
        log = server.log()
        assert "mcp_insecure_test_mode" in log
        assert "WARNING: --insecure-test-mode" in log
        async with http_client(None) as client:
            opened = await initialize(client, url)
        assert opened.status_code == 200
        async with http_session(url, "any-token-at-all") as session:
            assert "tester:s-tester" in (session.instructions or "")
            _, text, is_error = await call(session, "inbox")
            assert not is_error, text


async def test_the_test_mode_is_refused_off_loopback_and_without_http(database_url: str) -> None:
    """The test mode refuses a non-loopback address, and a server that is not --http."""
    for host in ("0.0.0.0", "192.0.2.7", "::", "example.org"):
        with pytest.raises(InvalidSetting):
            check_test_mode(host)
    for host in ("127.0.0.1", "127.8.0.1", "::1"):
        check_test_mode(host)
    refused = await cli(database_url, "mcp", "--insecure-test-mode", "tester:s-t")
    assert refused.returncode != 0
    assert "--http" in refused.stderr


async def test_one_token_cannot_lock_another_out(database_url: str, tokens: dict[str, str]) -> None:
    """Past its quota a token's idlest session ends, all busy it gets 429; bob still initializes."""
    async with (
        served(database_url, BIRDDOG_MCP_SESSIONS_PER_TOKEN="2") as (url, _server),
        http_client(tokens["alice"]) as alice,
        http_client(tokens["bob"]) as bob,
    ):
        first, second = [await initialize(alice, url) for _ in range(2)]
        ids = [response.headers["mcp-session-id"] for response in (first, second)]
        third = await initialize(alice, url)
        assert third.status_code == 200
        # The session idle the longest (the first) was ended to make room.
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        gone = await alice.post(url, json=ping, headers={**ACCEPT, "mcp-session-id": ids[0]})
        assert gone.status_code == 404
        kept = await alice.post(url, json=ping, headers={**ACCEPT, "mcp-session-id": ids[1]})
        assert kept.status_code == 200
        # Both held sessions busy (an open GET stream each): a new one is refused, and says why.
        held = [ids[1], third.headers["mcp-session-id"]]
        async with contextlib.AsyncExitStack() as streams:
            for session_id in held:
                headers = {
                    "Accept": "text/event-stream",
                    "mcp-session-id": session_id,
                    "mcp-protocol-version": "2025-11-25",
                }
                stream = await streams.enter_async_context(
                    alice.stream("GET", url, headers=headers)
                )
                assert stream.status_code == 200
            refused = await initialize(alice, url)
            assert refused.status_code == 429
            assert "BIRDDOG_MCP_SESSIONS_PER_TOKEN" in refused.json()["error"]["message"]
            # Another origin is refused as such first: it never learns of the quota.
            elsewhere = {**ACCEPT, "Origin": "http://evil.example.com"}
            foreign = await alice.post(url, json=INITIALIZE, headers=elsewhere)
            assert foreign.status_code == 403
            for _ in range(3):
                theirs = await initialize(bob, url)
                assert theirs.status_code == 200, theirs.text


async def test_an_idle_session_ends_soon(database_url: str, tokens: dict[str, str]) -> None:
    """A session with no request for BIRDDOG_MCP_SESSION_IDLE_S is ended (404 afterwards)."""
    async with (
        served(database_url, BIRDDOG_MCP_SESSION_IDLE_S="1") as (url, _server),
        http_client(tokens["alice"]) as alice,
    ):
        opened = await initialize(alice, url)
        session_id = opened.headers["mcp-session-id"]

        async def status() -> int:
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            headers = {**ACCEPT, "mcp-session-id": session_id}
            # Each look is itself a request: it restarts the idle clock, so wait a while.
            return (await alice.post(url, json=ping, headers=headers)).status_code

        assert await status() == 200
        await eventually(
            status,
            "the idle session ended",
            until=lambda code: code == 404,
            within_s=30,
            every_s=1.5,
        )


async def test_every_stream_is_primed_with_an_event_id_and_a_retry(
    database_url: str, tokens: dict[str, str]
) -> None:
    """Each SSE response opens with a priming event (an id, retry 2000 ms) before the result."""
    async with served(database_url) as (url, _server):
        async with http_client(tokens["alice"]) as alice:
            opened = await initialize(alice, url)
        assert opened.headers["content-type"].startswith("text/event-stream")
        events = sse_events(opened.text)
        priming, *rest = events
        assert priming.get("id")
        assert priming.get("retry") == "2000"
        assert priming.get("data", "") == ""
        result = json.loads(rest[-1]["data"])
        assert result["id"] == 1
        assert "serverInfo" in result["result"]
        assert rest[-1].get("id")
        assert rest[-1]["id"] != priming["id"]
