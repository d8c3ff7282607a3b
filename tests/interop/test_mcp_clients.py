"""``birddog mcp`` as the hosts built on the TypeScript MCP SDK see it, over stdio and HTTP.

Each test runs ``mcp_tour.mjs`` once (one Node process): two agents' clients of the TS SDK
(``@modelcontextprotocol/sdk``, pinned by ``package-lock.json`` here) list the tools, call
every tool, feed every kind of bad input, wait with progress, give up on an ask, and take
and answer a task. The script reports what each call came to; the assertions here read
what a model is shown (the text block) and what the SDK accepted or refused. Skipped, with
the reason, where ``node`` or the installed ``node_modules`` (``make interop-deps``) are
absent.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from birddog.clock import SystemClock
from birddog.http.inbox import Inbox
from birddog.postgres.pool import create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support.cli import ROOT, Daemon, cli, cli_env, command_line, token_of
from tests.support.inbox import TestInbox, serving
from tests.support.mcp import agents_room, facts_of, server_url, summary_of
from tests.support.node import NODE, run_tour
from tests.support.waiting import eventually

HERE = Path(__file__).parent
SDK = HERE / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
MAX_CONTENT_BYTES = 4096
LEASE_S = 3.0
SLOW_S = 3.0

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not on PATH (the interop tests need Node)"),
    pytest.mark.skipif(
        not SDK.is_file(), reason="tests/interop/node_modules is absent: run make interop-deps"
    ),
    # The tour waits for slow agents and polls mailboxes: a minute or so on a busy machine.
    pytest.mark.timeout(300),
]

ENV = {"BIRDDOG_MAX_CONTENT_BYTES": str(MAX_CONTENT_BYTES), "BIRDDOG_JOB_LEASE_S": str(LEASE_S)}


@pytest.fixture(scope="module")
async def room(database_factory: Any) -> AsyncIterator[str]:
    """A database with a drain daemon and the three command agents (upper, slow, fail)."""
    async with agents_room(database_factory, slow_s=SLOW_S, lease_s=LEASE_S) as dsn:
        yield dsn


async def tour(config: dict[str, Any]) -> dict[str, Any]:
    """Run ``mcp_tour.mjs`` with ``config`` (and this module's content limit); its steps."""
    return await run_tour(HERE / "mcp_tour.mjs", {**config, "maxContentBytes": MAX_CONTENT_BYTES})


def stdio_side(dsn: str, identity: str) -> dict[str, Any]:
    """How the TS SDK's StdioClientTransport starts ``birddog mcp --as IDENTITY``."""
    command, args = command_line(["mcp", "--as", identity])
    return {"command": command, "args": args, "env": cli_env(dsn, **ENV), "cwd": str(ROOT)}


def assert_tour(steps: dict[str, Any]) -> None:
    """What a host on the TS SDK sees, step by step (the tour's observations)."""
    listed = {tool["name"]: tool for tool in steps["listed"]}
    assert list(listed) == [
        "send", "ask", "wait", "inbox", "read", "ack", "next_task", "answer", "status", "agents",
    ]  # fmt: skip
    for name, tool in listed.items():
        assert tool["title"], name
        assert tool["outputSchema"], name
        assert tool["undescribed"] == [], name
        hints = tool["annotations"]
        assert {key: type(hints[key]) for key in hints if key != "title"} == {
            "readOnlyHint": bool,
            "destructiveHint": bool,
            "idempotentHint": bool,
            "openWorldHint": bool,
        }, name
    for label in ("send", "read", "ack", "status", "agents", "ask", "wait", "next_task"):
        step = steps[label]
        assert "thrown" not in step, (label, step)
        assert not step["isError"], (label, step)
        assert step["blocks"] == 1, (label, step)
        # The structured content the SDK validated is the JSON of the text block.
        assert facts_of(step["text"]) == step["structured"], (label, step)

    sent = facts_of(steps["send"]["text"])
    assert sent["key"].startswith("mail-")
    assert sent["job_id"] == "send:" + sent["key"]
    # The reply, from inbox's text alone; then whole from read's.
    assert "HELLO FROM NODE" in steps["inbox"]["text"]
    assert steps["inbox"]["replyContent"] == "HELLO FROM NODE"
    assert "HELLO FROM NODE" in steps["read"]["text"]
    assert steps["ack"]["structured"] == {"acked": [steps["inbox"]["replyKey"]]}
    assert "delivered" in summary_of(steps["status"]["text"])
    assert '"agent_id": "upper"' in steps["agents"]["text"]

    # The answer is in the text block; a failed ask's reason and reply are too.
    assert summary_of(steps["ask"]["text"]).startswith("answered: ")
    assert "WHAT IS DUE?" in steps["ask"]["text"]
    failed = steps["ask_failed"]
    assert failed["isError"]
    assert failed["structured"] is None
    assert "failed" in summary_of(failed["text"])
    assert "no such thing" in failed["text"]
    assert facts_of(failed["text"])["outcome"] == "failed"
    pending = steps["ask_pending"]
    assert not pending["isError"]
    assert pending["structured"]["status"] == "pending"
    assert pending["structured"]["state"] in {"queued", "running"}
    assert pending["structured"]["key"] in summary_of(pending["text"])
    assert "TAKE YOUR TIME" in steps["wait"]["text"]

    progressed = steps["ask_progress"]
    assert "PROGRESS" in progressed["text"]
    first = progressed["progress"][0]
    assert first["progress"] == 0
    assert facts_of(progressed["text"])["key"] in first["message"]

    cancelled = steps["ask_cancelled"]
    assert "thrown" in cancelled, cancelled
    heard = cancelled["progress"][0]
    assert heard["progress"] == 0
    key = re.search(r"as key (\S+):", heard["message"])
    assert key is not None, heard
    assert cancelled["landed"]["in_reply_to"] == key.group(1)
    assert cancelled["landed"]["content"] == "CANCEL ME"

    task = steps["next_task"]
    assert "from alice:s-alice" in summary_of(task["text"])
    assert '"content": "lunch?"' in task["text"]
    assert facts_of(steps["next_task_again"]["text"]) == {"status": "none"}
    assert not steps["answer"]["isError"], steps["answer"]
    assert "yes, at noon" in steps["asked_bob"]["text"]
    again = steps["answer_again"]
    assert again["isError"]
    assert "already answered" in again["text"]

    reasons = {
        "unknown_argument": "colour: not an argument of ask",
        "bad_address": "to:",
        "unknown_agent": "nobody",
        "wait_too_long": "wait_s: must be between 0 and 240 seconds",
        "content_too_large": "content",
        "nul_in_content": "content",
        "bad_reply_to": "replyTo",
        "missing_content": "content: required",
        "wait_unknown_key": "key: no mail with key 'never-sent'",
        "read_unknown_key": "key: no reply in your mailbox",
        "ack_unknown_key": "keys: no reply in your mailbox",
        "ack_not_a_list": "keys: must be a list of strings",
        "inbox_limit_zero": "limit: must be between 1 and 100",
        "answer_not_taken": "job_id: 'not-mine' is not a task you took",
        "answer_bad_outcome": "outcome: must be completed or failed",
        "status_unknown_key": "key: no mail of yours has key 'never-sent'",
    }
    for label, reason in reasons.items():
        step = steps["errors"][label]
        # Never the SDK's "does not match the tool's output schema": the reason itself.
        assert "thrown" not in step, (label, step)
        assert step["isError"], (label, step)
        assert step["structured"] is None, (label, step)
        assert reason in step["text"], (label, step["text"])
    assert steps["unknown_tool"]["thrown"]["code"] == -32602
    assert "nonesuch" in steps["unknown_tool"]["thrown"]["message"]
    assert not steps["after_errors"]["isError"]

    # The agent whose route posts to an inbox URL got its answer, in the text block.
    asked = steps["poster_ask"]
    assert not asked["isError"], asked
    assert summary_of(asked["text"]).startswith("answered: ")
    assert "ASKED FROM AN INBOX ROUTE" in asked["text"]
    assert not steps["poster_send"]["isError"], steps["poster_send"]


async def route_to(room: str, inbox: TestInbox, agent: str) -> None:
    """Give ``agent`` an inbox URL route to ``inbox`` (its replies are posted, signed)."""
    pool = await create_pool(room, max_size=1)
    try:
        route = await PostgresRoutes(pool, cache_s=0, clock=SystemClock()).add(
            agent, inbox.url_for(agent)
        )
    finally:
        await pool.close()
    assert route.secret is not None
    inbox.secrets[agent] = Inbox(route.secret)


async def until_posted(inbox: TestInbox, steps: dict[str, Any]) -> None:
    """The reply to the inbox-routed agent's send is posted to its URL; its ask's is not."""
    key = facts_of(steps["poster_send"]["text"])["key"]
    posted = await eventually(
        lambda: [(reply.in_reply_to, reply.content) for reply in inbox.replies],
        "the send's reply posted to the agent's inbox URL",
        until=lambda seen: seen == [(key, "SENT FROM AN INBOX ROUTE")],
        within_s=60,
    )
    assert posted == [(key, "SENT FROM AN INBOX ROUTE")]


async def test_the_ts_sdk_client_over_stdio_reads_every_result(room: str) -> None:
    """Over stdio, a TS SDK client sees every answer, reply, task and error reason in text."""
    async with serving(TestInbox()) as inbox:
        await route_to(room, inbox, "carol")
        steps = await tour(
            {
                "transport": "stdio",
                "alice": stdio_side(room, "alice:s-alice"),
                "bob": stdio_side(room, "bob:s-bob"),
                "poster": stdio_side(room, "carol:s-carol"),
            }
        )
        assert_tour(steps)
        await until_posted(inbox, steps)


async def test_the_ts_sdk_client_over_http_reads_every_result(room: str) -> None:
    """Over streamable HTTP with bearer headers, the same tour reads the same."""
    async with serving(TestInbox()) as inbox:
        await route_to(room, inbox, "dave")
        tokens = {}
        for address in ("alice:s-alice", "bob:s-bob", "dave:s-dave"):
            added = await cli(room, "agent", "add", address)
            assert added.returncode == 0, added.stderr
            tokens[address.split(":")[0]] = token_of(added.stdout)
        server = Daemon(room, "--http", "--port", "0", command="mcp", **ENV)
        try:
            url = await server_url(server)
            steps = await tour(
                {
                    "transport": "http",
                    "url": url,
                    "alice": {"token": tokens["alice"]},
                    "bob": {"token": tokens["bob"]},
                    "poster": {"token": tokens["dave"]},
                }
            )
        finally:
            code, log = server.terminate()
        assert code == 0, log
        assert_tour(steps)
        await until_posted(inbox, steps)
