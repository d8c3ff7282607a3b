"""PostgresAgents: per-agent bearer tokens issued, authenticated, revoked and listed."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
import structlog

from birddog import AgentAddress, InvalidInput
from birddog.clock import SystemClock
from birddog.core.errors import AgentNotFound
from birddog.core.tokens import DEFAULT_SESSION, TOKEN_PREFIX, agent_address, make_token
from birddog.ports import TokenBook
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import InMemoryTokenBook

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")

MALFORMED: list[object] = [
    "",
    "bd_",
    "Bearer bd_" + "A" * 43,
    "bd_" + "A" * 42,
    "bd_" + "A" * 44,
    "bd_" + "A" * 42 + "=",
    "bd_" + "A" * 42 + "\x00",
    "bd_" + "é" * 43,
    "xx_" + "A" * 43,
    "bd_" + "\ud800" * 43,
    None,
    b"bd_" + b"A" * 43,
    42,
]
"""What a careless or hostile client may present instead of a token."""


async def test_an_issued_token_names_its_agent_session(pg_pool: Pool) -> None:
    """Tokens from add and issue authenticate as exactly the address they name."""
    agents = PostgresAgents(pg_pool)
    added = await agents.add(ALICE)
    other = await agents.issue(AgentAddress(agent_id="alice", session_id="s-two"))
    assert added.token.startswith(TOKEN_PREFIX)
    assert added.token != other.token
    assert await agents.authenticate(added.token) == ALICE
    assert await agents.authenticate(other.token) == other.address
    assert other.address.session_id == "s-two"


async def test_bad_unknown_and_revoked_tokens_name_nobody(pg_pool: Pool) -> None:
    """Malformed input never raises; an unknown or a revoked token authenticates as nobody."""
    agents = PostgresAgents(pg_pool)
    first = await agents.add(ALICE)
    second = await agents.issue(ALICE)
    for presented in MALFORMED:
        assert await agents.authenticate(cast("str", presented)) is None, repr(presented)
    assert await agents.authenticate(make_token(b"\x07" * 32)) is None
    assert await agents.revoke("alice", token_id=second.token_id) == [second.token_id]
    assert await agents.authenticate(second.token) is None
    assert await agents.authenticate(first.token) == ALICE
    assert await agents.revoke("alice") == [first.issued.token_id]
    assert await agents.authenticate(first.token) is None
    assert await agents.revoke("alice") == []


async def test_unknown_agents_and_a_second_add_are_refused(pg_pool: Pool) -> None:
    """Tokens are issued for added agents only, and adding an agent twice is refused."""
    agents = PostgresAgents(pg_pool)
    with pytest.raises(AgentNotFound, match="birddog agent add bob"):
        await agents.issue(AgentAddress(agent_id="bob", session_id="s-bob"))
    with pytest.raises(AgentNotFound):
        await agents.revoke("bob")
    await agents.add(ALICE)
    with pytest.raises(InvalidInput, match="birddog agent token alice"):
        await agents.add(ALICE)
    assert [info.agent_id for info in await agents.list()] == ["alice"]
    assert len((await agents.list())[0].tokens) == 1


async def test_add_gives_a_mailbox_only_to_an_agent_without_a_route(pg_pool: Pool) -> None:
    """An agent without a route gets a mailbox route; one with an inbox URL keeps it."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    await routes.add("bob", "http://127.0.0.1:9/inbox")
    agents = PostgresAgents(pg_pool)
    assert (await agents.add(ALICE)).mailbox_added
    assert not (await agents.add(AgentAddress(agent_id="bob", session_id="s-bob"))).mailbox_added
    kinds = {
        row["agent_id"]: row["kind"]
        for row in await pg_pool.fetch("SELECT agent_id, kind FROM birddog.routes")
    }
    assert kinds == {"alice": "mailbox", "bob": "http"}


async def test_the_list_shows_ids_and_last_use_never_a_token(pg_pool: Pool) -> None:
    """The list shows ids, sessions, creation and last use; no token, and the table holds none."""
    agents = PostgresAgents(pg_pool)
    added = await agents.add(ALICE)
    [before] = await agents.list()
    assert [t.token_id for t in before.tokens] == [added.issued.token_id]
    assert before.tokens[0].last_used_at is None
    await agents.authenticate(added.token)
    [after] = await agents.list()
    assert after.tokens[0].session_id == "s-alice"
    assert after.tokens[0].last_used_at is not None
    assert added.token not in repr(after)
    assert added.token not in repr(added.issued)
    stored = await pg_pool.fetch("SELECT * FROM birddog.agent_tokens")
    assert added.token not in repr([dict(row) for row in stored])
    assert stored[0]["token_digest"] == hashlib.sha256(added.token.encode()).digest()


async def test_last_use_is_written_at_most_once_a_minute(pg_pool: Pool) -> None:
    """Authenticating again within a minute reads only; an older last use is refreshed."""
    agents = PostgresAgents(pg_pool)
    added = await agents.add(ALICE)
    await agents.authenticate(added.token)
    first = await pg_pool.fetchval("SELECT last_used_at FROM birddog.agent_tokens")
    await agents.authenticate(added.token)
    assert await pg_pool.fetchval("SELECT last_used_at FROM birddog.agent_tokens") == first
    await pg_pool.execute(
        "UPDATE birddog.agent_tokens SET last_used_at = now() - interval '2 minutes'"
    )
    await agents.authenticate(added.token)
    assert await pg_pool.fetchval("SELECT last_used_at FROM birddog.agent_tokens") > first


async def test_many_callers_authenticate_at_once(pg_pool: Pool) -> None:
    """Concurrent authentications of one token all succeed (the last-use write never blocks them)."""
    agents = PostgresAgents(pg_pool)
    added = await agents.add(ALICE)
    found = await asyncio.gather(*(agents.authenticate(added.token) for _ in range(40)))
    assert found == [ALICE] * 40


async def test_no_log_event_carries_a_token(pg_pool: Pool) -> None:
    """Adding, issuing, authenticating and revoking log ids only, never a token's text."""
    agents = PostgresAgents(pg_pool)
    with structlog.testing.capture_logs() as events:
        added = await agents.add(ALICE)
        issued = await agents.issue(ALICE)
        await agents.authenticate(added.token)
        await agents.authenticate(issued.token + "x")
        await agents.revoke("alice")
    assert {event["event"] for event in events} >= {
        "agent_added",
        "agent_token_issued",
        "agent_tokens_revoked",
    }
    text = repr(events)
    assert added.issued.token_id in text
    for token in (added.token, issued.token):
        assert token not in text
        assert token.removeprefix(TOKEN_PREFIX) not in text


def test_an_address_without_a_session_names_the_default_session() -> None:
    """AGENT alone is AGENT:default; an empty session or a bad id is refused, naming the field."""
    assert agent_address("alice") == AgentAddress(agent_id="alice", session_id=DEFAULT_SESSION)
    assert agent_address("alice:s1") == AgentAddress(agent_id="alice", session_id="s1")
    for bad in ("alice:", "", ":s1", "a" * 257):
        with pytest.raises(InvalidInput, match="agent"):
            agent_address(bad)


Issue = Callable[[AgentAddress], Any]


@pytest.fixture(params=["memory", "postgres"])
async def token_book(
    request: pytest.FixtureRequest, pg_pool: Pool
) -> AsyncIterator[tuple[TokenBook, Issue, Callable[[str], Any]]]:
    """A token book and how to issue and revoke tokens in it: the fake, then Postgres."""
    if request.param == "memory":
        memory = InMemoryTokenBook()

        async def issue_memory(address: AgentAddress) -> str:
            return memory.issue(address)

        async def revoke_memory(token: str) -> None:
            memory.revoke(token)

        yield memory, issue_memory, revoke_memory
        return
    agents = PostgresAgents(pg_pool)
    issued: dict[str, str] = {}

    async def issue_postgres(address: AgentAddress) -> str:
        if not any(info.agent_id == address.agent_id for info in await agents.list()):
            await agents.add(address)
        token = await agents.issue(address)
        issued[token.token] = token.token_id
        return token.token

    async def revoke_postgres(token: str) -> None:
        address = await agents.authenticate(token)
        assert address is not None
        await agents.revoke(address.agent_id, token_id=issued[token])

    yield agents, issue_postgres, revoke_postgres


async def test_the_token_book_contract(
    token_book: tuple[TokenBook, Issue, Callable[[str], Any]],
) -> None:
    """Fake and adapter alike: a token names its address until revoked; bad input names nobody."""
    book, issue, revoke = token_book
    alice = await issue(ALICE)
    bob = await issue(AgentAddress(agent_id="bob", session_id="s-bob"))
    assert await book.authenticate(alice) == ALICE
    assert (await book.authenticate(bob) or ALICE).agent_id == "bob"
    for presented in MALFORMED:
        assert await book.authenticate(cast("str", presented)) is None
    await revoke(alice)
    assert await book.authenticate(alice) is None
    assert await book.authenticate(bob) is not None
