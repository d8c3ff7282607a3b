"""``birddog agent``: tokens printed once, listed by id only, revoked for good."""

from __future__ import annotations

import json

from birddog import AgentAddress
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.pool import Pool
from tests.support.cli import cli, token_of


async def test_add_token_list_revoke(database_url: str, pg_pool: Pool) -> None:
    """Adding prints a working token once; the list never shows it; revoking ends it."""
    added = await cli(database_url, "agent", "add", "alice")
    assert added.returncode == 0, added.stderr
    assert "its replies go to its mailbox" in added.stdout
    first = token_of(added.stdout)
    agents = PostgresAgents(pg_pool)
    assert await agents.authenticate(first) == AgentAddress(agent_id="alice", session_id="default")

    more = await cli(database_url, "agent", "token", "alice:s-two")
    assert more.returncode == 0, more.stderr
    second = token_of(more.stdout)
    assert await agents.authenticate(second) == AgentAddress(agent_id="alice", session_id="s-two")

    listed = await cli(database_url, "agent", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(row["agentId"], row["sessionId"]) for row in rows] == [
        ("alice", "default"),
        ("alice", "s-two"),
    ]
    table = await cli(database_url, "agent", "list")
    for text in (listed.stdout, table.stdout, listed.stderr, added.stderr, more.stderr):
        assert first not in text
        assert second not in text

    second_id = rows[1]["tokenId"]
    assert second_id in table.stdout
    one = await cli(database_url, "agent", "revoke", "alice", "--token-id", second_id)
    assert (one.returncode, one.stdout) == (0, f"revoked 1 token of alice: {second_id}\n")
    assert await agents.authenticate(second) is None
    assert await agents.authenticate(first) is not None
    rest = await cli(database_url, "agent", "revoke", "alice")
    assert rest.returncode == 0, rest.stderr
    assert await agents.authenticate(first) is None


async def test_bad_requests_are_one_line_errors(database_url: str) -> None:
    """An unknown agent, a second add, an unknown token id: exit 1; a bad address: exit 2."""
    await cli(database_url, "agent", "add", "alice")
    for args, says in [
        (["agent", "token", "bob"], "no agent 'bob' was added"),
        (["agent", "revoke", "bob"], "no agent 'bob' was added"),
        (["agent", "add", "alice"], "was added before"),
        (["agent", "revoke", "alice", "--token-id", "tok_nope"], "has no token tok_nope"),
    ]:
        done = await cli(database_url, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert says in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert "token: " not in done.stdout
    bad = await cli(database_url, "agent", "add", "alice:")
    assert bad.returncode == 2, bad.stderr
    assert "a session after the colon" in bad.stderr
    assert "Traceback" not in bad.stderr
