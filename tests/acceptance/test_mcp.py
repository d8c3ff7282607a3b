"""``birddog mcp`` over stdio, driven by the mcp package's own client, end to end.

One database, drain daemon and three command workers serve the whole module: ``upper``
answers at once (``tr a-z A-Z``), ``slow`` after six seconds, ``fail`` exits 3 with a
complaint on stderr. Each test starts its own ``birddog mcp --as ...`` subprocesses and
talks to them with ``ClientSession`` over ``stdio_client``, as Claude Code would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from mcp import ClientSession, stdio_client
from mcp.client.extension import NotificationBinding
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from birddog.clock import SystemClock
from birddog.http.inbox import Inbox
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import at, deliver_to_mailbox, eventually, make_reply
from tests.support.cli import Daemon, cli, cli_env, drop_agent_logins, token_of
from tests.support.inbox import TestInbox
from tests.support.mcp import (
    agents_room,
    call,
    facts_of,
    http_client,
    http_session,
    json_errlog,
    server_params,
    server_url,
    stdio_mcp,
    summary_of,
)

SLOW_S = 6.0
MAX_CONTENT_BYTES = 4096
LEASE_S = 3.0


@pytest.fixture(scope="module")
async def room(database_factory: Any) -> AsyncIterator[str]:
    """A database with a drain daemon and the three command agents running on it."""
    async with agents_room(database_factory, slow_s=SLOW_S, lease_s=LEASE_S) as dsn:
        yield dsn


@pytest.fixture
async def room_pool(room: str) -> AsyncIterator[Pool]:
    pool = await create_pool(room, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture
def errlog() -> Iterator[Any]:
    """Where the servers' stderr goes (every line must be JSON)."""
    with json_errlog() as log:
        yield log


@contextlib.asynccontextmanager
async def mcp_session(
    dsn: str, identity: str, errlog: Any, *args: str
) -> AsyncIterator[ClientSession]:
    """``birddog mcp --as IDENTITY`` with this module's limits, initialized."""
    env = {"BIRDDOG_MAX_CONTENT_BYTES": str(MAX_CONTENT_BYTES), "BIRDDOG_JOB_LEASE_S": str(LEASE_S)}
    async with stdio_mcp(dsn, identity, errlog, *args, **env) as session:
        yield session


async def until_unread(
    session: ClientSession, count: int, *, within_s: float = 60
) -> dict[str, Any]:
    """Poll inbox until it shows ``count`` unread replies (failing loudly with the last seen)."""

    async def inbox() -> dict[str, Any]:
        return (await call(session, "inbox"))[0]

    listed: dict[str, Any] = await eventually(
        inbox,
        f"{count} unread replies",
        until=lambda seen: seen.get("unread") == count,
        within_s=within_s,
        every_s=0.2,
    )
    return listed


async def test_an_ask_is_answered_by_a_command_agent(room: str, errlog: Any) -> None:
    """Ask returns the command agent's output as the answer; the instructions name the caller."""
    async with mcp_session(room, "me:s-me", errlog) as session:
        assert "me:s-me" in (session.instructions or "")
        assert "inbox URL" not in (session.instructions or "")
        structured, text, is_error = await call(
            session, "ask", to="upper:s-upper", content="what is due?"
        )
    assert not is_error, text
    assert structured["status"] == "answered"
    assert structured["outcome"] == "completed"
    assert structured["content"] == "WHAT IS DUE?"
    # The text block alone carries the answer: a first line, then the result's JSON.
    assert summary_of(text) == f"answered: {structured['key']} (completed)"
    assert facts_of(text)["content"] == "WHAT IS DUE?"


async def test_an_agent_with_an_inbox_route_asks_and_its_other_replies_are_posted(
    room: str, room_pool: Pool, inbox: TestInbox, errlog: Any
) -> None:
    """As an agent whose route posts to a URL: ask answers; a send's reply goes to the URL."""
    route = await PostgresRoutes(room_pool, cache_s=0, clock=SystemClock()).add(
        "poster", inbox.url_for("poster")
    )
    assert route.secret is not None
    inbox.secrets["poster"] = Inbox(route.secret)
    async with mcp_session(room, "poster:s-poster", errlog) as session:
        assert "Your route posts to an inbox URL" in (session.instructions or "")
        answered, text, is_error = await call(
            session, "ask", to="upper:s-upper", content="what is due?"
        )
        assert not is_error, text
        assert (answered["status"], answered["content"]) == ("answered", "WHAT IS DUE?")
        listed, _, _ = await call(session, "inbox", unread_only=False)
        assert [reply["in_reply_to"] for reply in listed["replies"]] == [answered["key"]]
        sent, text, is_error = await call(session, "send", to="upper:s-upper", content="fyi")
        assert not is_error, text
        # wait sees the mailbox only: for the send, it says where the reply goes instead.
        _, text, is_error = await call(session, "wait", key=sent["key"], wait_s=1)
        assert is_error
        assert "posted to your inbox URL" in text
        again, text, is_error = await call(session, "wait", key=answered["key"], wait_s=1)
        assert not is_error, text
        assert again["content"] == "WHAT IS DUE?"
    await eventually(
        lambda: [reply.content for reply in inbox.replies],
        "the send's reply posted to poster's inbox URL",
        until=lambda contents: contents == ["FYI"],
        within_s=60,
    )
    assert inbox.replies[0].in_reply_to == sent["key"]


MOVED_SECRET = "whsec_" + base64.b64encode(b"the route changed under the ask").decode()
"""The signing secret of the inbox URL a caller's route becomes during its ask."""


@pytest.mark.parametrize("change", ["to-a-url", "held"])
async def test_an_ask_is_answered_whatever_the_callers_route_became(
    room: str, room_pool: Pool, inbox: TestInbox, errlog: Any, change: str
) -> None:
    """The caller's mailbox route becomes an inbox URL, or is held, during its ask: answered.

    The server gave the caller a mailbox route; while the slow agent works (six seconds)
    SQL turns it into an inbox URL, or ``birddog route hold`` holds it. The ask's answer
    comes from the mailbox, ``wait`` with the key gives it again, nothing is owed to the
    route and nothing is posted to the URL (the module's drain daemon runs throughout).
    """
    agent, key = f"mover-{change}", f"moved-{change}"
    async with mcp_session(room, f"{agent}:s-m", errlog) as session:
        asking = asyncio.create_task(
            call(session, "ask", to="slow:s-slow", content="move", key=key, wait_s=60)
        )
        await eventually(
            lambda: room_pool.fetchval(
                "SELECT count(*) FROM birddog.jobs WHERE payload #>> '{mail,key}' = $1", key
            ),
            "the ask's job",
            until=lambda jobs: jobs == 1,
            within_s=30,
        )
        if change == "to-a-url":
            inbox.secrets[agent] = Inbox(MOVED_SECRET)
            await room_pool.execute(
                "UPDATE birddog.routes SET kind = 'http', url = $2, secret = $3 "
                "WHERE agent_id = $1",
                agent, inbox.url_for(agent), MOVED_SECRET,
            )  # fmt: skip
        else:
            held = await cli(room, "route", "hold", agent)
            assert held.returncode == 0, held.stderr
        answered, text, is_error = await asking
        assert not is_error, text
        assert (answered["status"], answered["content"]) == ("answered", "MOVE")
        again, text, is_error = await call(session, "wait", key=key, wait_s=1)
        assert not is_error, text
        assert again["content"] == "MOVE"
    owed = "SELECT count(*) FROM birddog.outbox WHERE in_reply_to = $1"
    assert await room_pool.fetchval(owed, key) == 0
    assert inbox.posts == {}


async def test_a_slow_agent_is_pending_then_wait_gives_the_answer(room: str, errlog: Any) -> None:
    """An ask that outlasts wait_s is pending with its key; wait with the key then answers."""
    async with mcp_session(room, "me:s-slowpoke", errlog) as session:
        pending, text, is_error = await call(
            session, "ask", to="slow:s-slow", content="take your time", wait_s=1
        )
        assert not is_error, text
        assert pending["status"] == "pending"
        assert "wait" in pending["message"]
        # Where the ask stands: not yet taken, or its slow agent at work.
        assert pending["state"] in {"queued", "running"}
        assert ("nobody has taken it" in pending["message"]) or (
            "a worker has been running its job" in pending["message"]
        )
        answered, text, is_error = await call(session, "wait", key=pending["key"], wait_s=60)
    assert not is_error, text
    assert (answered["status"], answered["content"]) == ("answered", "TAKE YOUR TIME")


async def test_a_failing_agent_is_a_tool_error_with_its_diagnostic(room: str, errlog: Any) -> None:
    """An outcome other than completed is is_error, its text naming the outcome and why."""
    async with mcp_session(room, "me:s-failing", errlog) as session:
        structured, text, is_error = await call(session, "ask", to="fail:s-fail", content="go")
    assert is_error
    assert "failed" in text
    assert "no such thing" in text
    assert structured["outcome"] == "failed"
    assert "exit" in structured["diagnostic"]


async def test_two_sessions_one_asks_and_one_takes_the_task(room: str, errlog: Any) -> None:
    """One MCP session asks; another takes the task with next_task and answers it."""
    async with (
        mcp_session(room, "bob:s-bob", errlog) as bob,
        mcp_session(room, "alice:s-alice", errlog) as alice,
    ):
        asking = asyncio.create_task(
            call(alice, "ask", to="bob:s-bob", content="lunch?", wait_s=60)
        )
        task, text, is_error = await call(bob, "next_task", wait_s=30)
        assert not is_error, text
        assert (task["status"], task["from"], task["content"]) == (
            "task",
            "alice:s-alice",
            "lunch?",
        )
        again, _, _ = await call(bob, "next_task")
        assert again == {"status": "none"}  # one turn at a time
        settled, text, is_error = await call(bob, "answer", job_id=task["job_id"], content="yes")
        assert not is_error, text
        assert settled["status"] == "settled"
        assert len(settled["replies"]) == 1
        answered, text, is_error = await asyncio.wait_for(asking, 60)
        assert not is_error, text
        assert answered["content"] == "yes"
        _, text, is_error = await call(bob, "answer", job_id=task["job_id"], content="yes")
        assert is_error
        assert "already answered" in text


async def test_inbox_read_and_ack(room: str, errlog: Any) -> None:
    """Replies are listed unread, read whole, acked (twice is fine), then gone from unread."""
    async with mcp_session(room, "me:s-inbox", errlog) as session:
        empty, _, is_error = await call(session, "inbox")
        assert (empty, is_error) == ({"replies": [], "unread": 0}, False)
        long = "x" * 3000
        sent, text, is_error = await call(session, "send", to="upper:s-upper", content=long)
        assert not is_error, text
        assert sent["status"] == "sent"
        # A send's fresh key and its job are named as a send's, not an ask's.
        assert sent["key"].startswith("mail-")
        assert sent["job_id"] == "send:" + sent["key"]
        again, _, _ = await call(session, "send", to="upper:s-upper", content=long, key=sent["key"])
        assert again["status"] == "already sent"
        listed = await until_unread(session, 1)
        [reply] = listed["replies"]
        assert (reply["in_reply_to"], reply["from"], reply["truncated"]) == (
            sent["key"],
            "upper:s-upper",
            True,
        )
        assert len(reply["content"]) == 2000
        whole, _, _ = await call(session, "read", key=reply["key"])
        assert whole["content"] == "X" * 3000
        for _ in range(2):
            acked, text, is_error = await call(session, "ack", keys=[reply["key"]])
            assert (acked, is_error) == ({"acked": [reply["key"]]}, False), text
        after, _, _ = await call(session, "inbox")
        assert after == {"replies": [], "unread": 0}
        everything, _, _ = await call(session, "inbox", unread_only=False)
        assert [r["key"] for r in everything["replies"]] == [reply["key"]]
        story, text, is_error = await call(session, "status", key=sent["key"])
        assert not is_error, text
        assert story["state"] == "settled"
        assert [r["state"] for r in story["replies"]] == ["delivered"]


async def test_a_cancelled_ask_still_gets_its_reply(room: str, errlog: Any) -> None:
    """A call the client gives up on ends the wait, not the question: the reply lands."""
    async with mcp_session(room, "me:s-impatient", errlog) as session:
        with pytest.raises(MCPError):
            await session.call_tool(
                "ask",
                {"to": "slow:s-slow", "content": "cancel me", "key": "cancelled-1", "wait_s": 60},
                read_timeout_seconds=1.5,
            )
        listed = await until_unread(session, 1, within_s=60)
    assert listed["replies"][0]["in_reply_to"] == "cancelled-1"
    assert listed["replies"][0]["content"] == "CANCEL ME"


async def test_an_ask_given_up_at_once_has_named_its_key(room: str, errlog: Any) -> None:
    """An ask's first progress notification names its fresh key at 0 s; given up, it lands there."""
    heard: list[tuple[float, str]] = []

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message or ""))

    async with mcp_session(room, "me:s-hasty", errlog) as session:
        with pytest.raises(MCPError):
            await session.call_tool(
                "ask",
                {"to": "slow:s-slow", "content": "hasty", "wait_s": 60},
                read_timeout_seconds=2,
                progress_callback=progressed,
            )
        assert heard, "no progress notification came before the call was given up"
        done, message = heard[0]
        assert done == 0
        found = re.search(r"as key (ask-\S+):", message)
        assert found is not None, message
        listed = await until_unread(session, 1, within_s=60)
    assert listed["replies"][0]["in_reply_to"] == found.group(1)
    assert listed["replies"][0]["content"] == "HASTY"


async def test_every_tool_is_listed_titled_annotated_and_described(room: str, errlog: Any) -> None:
    """tools/list gives each tool a title, the four annotations, described arguments, a closed schema."""
    async with mcp_session(room, "me:s-list", errlog) as session:
        listed = await session.list_tools()
    assert [tool.name for tool in listed.tools] == [
        "send", "ask", "wait", "inbox", "read", "ack", "next_task", "answer", "status", "agents",
    ]  # fmt: skip
    for tool in listed.tools:
        assert tool.title, tool.name
        hints = tool.annotations
        assert hints is not None, tool.name
        for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"):
            assert isinstance(getattr(hints, hint), bool), (tool.name, hint)
        for name, argument in tool.input_schema["properties"].items():
            assert argument.get("description"), (tool.name, name)
        assert tool.output_schema is not None
        assert tool.output_schema["additionalProperties"] is False, tool.name
    read_only = {tool.name for tool in listed.tools if tool.annotations.read_only_hint}  # type: ignore[union-attr]
    assert read_only == {"inbox", "read", "status", "agents"}
    ask = next(tool for tool in listed.tools if tool.name == "ask")
    assert "state" in (ask.output_schema or {})["properties"]


async def test_progress_is_reported_while_waiting(room: str, errlog: Any) -> None:
    """A wait with a progress token gets a progress notification at least every 10 s."""
    seen: list[tuple[float, float | None]] = []

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with mcp_session(room, "me:s-progress", errlog) as session:
        result = await session.call_tool(
            "ask",
            {"to": "slow:s-slow", "content": "progress", "wait_s": 60},
            progress_callback=progressed,
        )
    assert not result.is_error
    assert seen, "no progress notification came"
    assert all(total == 60 for _, total in seen)
    assert seen[0][0] <= 10


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("ask", {"to": "no-colon", "content": "x"}, "to"),
    ("ask", {"to": "nobody:s-x", "content": "x"}, "to"),
    ("send", {"to": "upper:s-upper", "content": "x" * (MAX_CONTENT_BYTES + 1)}, "content"),
    ("send", {"to": "upper:s-upper", "content": "nul \x00 inside"}, "content"),
    ("send", {"to": "upper:s-upper", "content": "x", "reply_to": ["bad"]}, "replyTo"),
    ("send", {"to": "upper:s-upper"}, "content"),
    ("ask", {"to": "upper:s-upper", "content": "x", "wait_s": 241}, "wait_s"),
    ("ask", {"to": "upper:s-upper", "content": "x", "colour": "red"}, "colour"),
    ("wait", {"key": "never-sent"}, "key"),
    ("read", {"key": "outbox:never:reply:0"}, "key"),
    ("ack", {"keys": ["outbox:never:reply:0"]}, "keys"),
    ("ack", {"keys": "not-a-list"}, "keys"),
    ("inbox", {"limit": 0}, "limit"),
    ("answer", {"job_id": "not-mine", "content": "x"}, "job_id"),
    ("answer", {"job_id": "not-mine", "content": "x", "outcome": "maybe"}, "outcome"),
    ("status", {"key": "never-sent"}, "key"),
]


async def test_every_bad_input_is_a_tool_error_and_the_server_serves_on(
    room: str, room_pool: Pool, errlog: Any
) -> None:
    """Each bad call is is_error naming the field, writes nothing, and the next call works."""
    jobs_before = await room_pool.fetchval("SELECT count(*) FROM birddog.jobs")
    async with mcp_session(room, "me:s-careless", errlog) as session:
        for tool, arguments, field in BAD_CALLS:
            _, text, is_error = await call(session, tool, **arguments)
            assert is_error, (tool, arguments, text)
            assert text.startswith(f"{field}:") or f"{field}" in text.split(":")[0], (tool, text)
            assert "\n" not in summary_of(text)
            agents, text, is_error = await call(session, "agents")
            assert not is_error, text
            assert {"agent_id": "upper", "kind": "mailbox", "held": False} in agents["agents"]
        # An unknown tool is the specification's protocol error, and the server serves on.
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("nonesuch", {})
        assert unknown.value.code == -32602
        assert "nonesuch" in unknown.value.message
        _, text, is_error = await call(session, "agents")
        assert not is_error, text
    assert await room_pool.fetchval("SELECT count(*) FROM birddog.jobs") == jobs_before


async def test_a_thousand_unread_replies_stay_under_the_bound(
    room: str, room_pool: Pool, errlog: Any
) -> None:
    """Inbox of 1,000 long unread replies is bounded well under 25,000 tokens."""
    for i in range(1000):
        reply = make_reply(f"outbox:flood-{i}:reply:0", agent="flood", content="é" * 2500)
        await deliver_to_mailbox(
            room_pool,
            reply.model_copy(update={"in_reply_to": f"flood-{i}"}),
            at=at(i),
            notify=False,
        )
    async with mcp_session(room, "flood:flood-session", errlog) as session:
        result = await session.call_tool("inbox", {"limit": 100})
    body = json.dumps(result.model_dump(mode="json", by_alias=True), ensure_ascii=False)
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["unread"] == 1000
    assert result.structured_content["replies"]
    assert len(body.encode()) < 25_000 * 2  # bytes; a token is at least two of these


async def test_next_task_rules_cancel_wins_and_a_lost_session_is_recovered(
    room: str, room_pool: Pool, errlog: Any
) -> None:
    """A recorded cancellation wins over answer; a disconnected session's task is recovered."""
    jobs = PostgresJobs(room_pool, clock=SystemClock())
    async with (
        mcp_session(room, "carol:s-carol", errlog) as carol,
        mcp_session(room, "dan:s-dan", errlog) as dan,
    ):
        await call(dan, "send", to="carol:s-carol", content="first", key="cw-1")
        task, text, _ = await call(carol, "next_task", wait_s=30)
        assert task["status"] == "task", text
        await jobs.cancel(job_id=task["job_id"], content="called off")
        _, text, is_error = await call(carol, "answer", job_id=task["job_id"], content="done")
        assert is_error
        assert "cancelled" in text
        await call(dan, "send", to="carol:s-carol", content="second", key="cw-2")
        task, text, _ = await call(carol, "next_task", wait_s=30)
        assert task["key"] == "cw-2", text
    # Carol's connection is gone: nobody renews the lease, so the reaper recovers the job.
    state = await eventually(
        lambda: room_pool.fetchval(
            "SELECT state || ':' || coalesce(outcome, '') FROM birddog.jobs WHERE job_id = $1",
            task["job_id"],
        ),
        "the abandoned task recovered",
        until=lambda seen: seen != "running:",
        within_s=60,
        every_s=0.2,
    )
    assert state in ("queued:", "settled:outcome_unknown"), state


# ---- the same tools over streamable HTTP ----------------------------------------------


async def test_the_tools_over_http_need_the_token(room: str) -> None:
    """--http --as serves the tools to a bearer of its token and refuses any other request."""
    token = "tok-" + "a" * 40
    server = Daemon(
        room,
        "--as",
        "me:s-http",
        "--http",
        "--port",
        "0",
        command="mcp",
        BIRDDOG_MCP_TOKEN=token,
    )
    try:
        url = await server_url(server)
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/mcp")
        assert token not in server.log()  # a token it was given is never printed
        for bearer in (None, "wrong-token"):
            async with http_client(bearer) as client:
                refused = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401
        async with http_session(url, token) as session:
            assert "me:s-http" in (session.instructions or "")
            answered, text, is_error = await call(
                session, "ask", to="upper:s-upper", content="over http"
            )
            assert (answered.get("content"), is_error) == ("OVER HTTP", False), text
            _, text, is_error = await call(session, "ask", to="no-colon", content="x")
            assert is_error
            assert text.startswith("to:")
            listed, _, _ = await call(session, "inbox")
            assert listed == {"replies": [], "unread": 0}  # the answer was read by ask
    finally:
        code, _ = server.terminate()
    assert code == 0


async def test_per_agent_tokens_act_only_as_their_agent(room: str) -> None:
    """Mcp --http without --as: each agent's token (agent add) acts as itself only; revoked, 401."""
    tokens = {}
    for address in ("alice-h:s-alice", "bob-h:s-bob"):
        added = await cli(room, "agent", "add", address)
        assert added.returncode == 0, added.stderr
        tokens[address] = token_of(added.stdout)
    alice, bob = tokens["alice-h:s-alice"], tokens["bob-h:s-bob"]
    server = Daemon(room, "--http", "--port", "0", command="mcp")
    try:
        url = await server_url(server)
        assert alice not in server.log()
        assert bob not in server.log()
        async with http_session(url, alice) as as_alice, http_session(url, bob) as as_bob:
            assert "alice-h:s-alice" in (as_alice.instructions or "")
            assert "bob-h:s-bob" in (as_bob.instructions or "")
            pending, _, _ = await call(
                as_alice, "ask", to="upper:s-upper", content="mine", wait_s=0
            )
            listed = await until_unread(as_alice, 1)
            assert len(listed["replies"]) == 1, listed
            [reply] = listed["replies"]
            assert await call(as_bob, "inbox") == (
                {"replies": [], "unread": 0},
                '0 unread replies shown; 0 unread in all\n\n{"replies": [], "unread": 0}',
                False,
            )
            for tool, arguments in (
                ("read", {"key": reply["key"]}),
                ("ack", {"keys": [reply["key"]]}),
                ("wait", {"key": pending["key"], "wait_s": 0}),
                ("status", {"key": pending["key"]}),
            ):
                _, text, is_error = await call(as_bob, tool, **arguments)
                assert is_error, (tool, text)
            mine, _, is_error = await call(as_alice, "read", key=reply["key"])
            assert (mine["content"], is_error) == ("MINE", False)
        revoked = await cli(room, "agent", "revoke", "bob-h")
        assert revoked.returncode == 0, revoked.stderr
        for bearer in (bob, "bd_" + "x" * 40, None):
            async with http_client(bearer) as client:
                refused = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401, bearer
    finally:
        code, _ = server.terminate()
    assert code == 0


class ChannelEvent(BaseModel):
    """What a ``notifications/claude/channel`` carries."""

    content: str
    meta: dict[str, str]


async def test_the_channel_pushes_replies_and_tasks(room: str, errlog: Any) -> None:
    """--channel declares claude/channel and pushes a reply's and a task's arrival."""
    events: asyncio.Queue[ChannelEvent] = asyncio.Queue()

    async def heard(event: ChannelEvent) -> None:
        await events.put(event)

    env = cli_env(room)
    params = server_params(env, "--as", "me:s-chan", "--channel")
    binding = NotificationBinding(
        method="notifications/claude/channel", params_type=ChannelEvent, handler=heard
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write, notification_bindings=[binding]) as session,
        mcp_session(room, "other:s-other", errlog) as other,
    ):
        init = await session.initialize()
        assert "claude/channel" in (init.capabilities.experimental or {})
        sent, _, _ = await call(session, "send", to="upper:s-upper", content="push me")
        reply = await asyncio.wait_for(events.get(), 60)
        assert reply.meta["kind"] == "reply"
        assert reply.meta["key"] == f"outbox:{sent['key']}:reply:0"
        assert reply.meta["sender"] == "upper:s-upper"
        assert reply.content.startswith("Untrusted text")
        assert "PUSH ME" in reply.content
        await call(other, "send", to="me:s-chan", content="a task for you")
        task = await asyncio.wait_for(events.get(), 60)
        assert task.meta["kind"] == "task"


async def test_send_takes_a_kind_and_refuses_an_unknown_one_in_one_line(
    room: str, room_pool: Pool, errlog: Any
) -> None:
    """The send tool's kind lands in the job (not the mail); a fifth kind is a one-line error."""
    async with mcp_session(room, "me:s-kinds", errlog) as session:
        sent, text, is_error = await call(
            session, "send", to="upper:s-upper", content="nightly numbers", kind="report"
        )
        assert not is_error, text
        _, refused, refused_error = await call(
            session, "send", to="upper:s-upper", content="x", kind="urgent"
        )
    assert refused_error
    assert "kind must be one of task, escalation, report, receipt" in refused
    assert "\n" not in summary_of(refused)
    row = await room_pool.fetchrow(
        "SELECT kind, payload -> 'mail' ? 'kind' AS in_mail FROM birddog.jobs WHERE job_id = $1",
        sent["job_id"],
    )
    assert row is not None
    assert (row["kind"], row["in_mail"]) == ("report", False)


async def test_under_an_agents_own_login_the_server_reads_its_callers_route(
    database_url: str, pg_pool: Pool, logins: dict[str, str], errlog: Any
) -> None:
    """Least privilege: the agent's login reads no route's URL, yet its route is told.

    The server reads its caller's route only, and agents the routes' summaries (never a
    route whole, whose URL the login may not read): the instructions say where its replies
    go, a wait on its plain send's key says the reply is posted to its URL, and agents
    lists who has a route.
    """
    assert "sender" in logins  # the roles are in place
    await pg_pool.execute(
        "INSERT INTO birddog.routes (agent_id, url, secret, kind) "
        "VALUES ('poster', 'http://127.0.0.1:9/inbox', 'whsec_c2VjcmV0', 'http'), "
        "('upper', NULL, NULL, 'mailbox')"
    )
    try:
        added = await cli(database_url, "agent", "add", "poster:s-p", "--login")
        assert added.returncode == 0, added.stderr
        [own] = re.findall(r"^DATABASE_URL=(\S+)$", added.stdout, re.M)
        async with mcp_session(own, "poster:s-p", errlog) as session:
            assert "Your route posts to an inbox URL" in (session.instructions or "")
            sent, text, is_error = await call(session, "send", to="upper:s-upper", content="fyi")
            assert not is_error, text
            _, text, is_error = await call(session, "wait", key=sent["key"], wait_s=1)
            assert is_error
            assert "posted to your inbox URL" in text
            listed, text, is_error = await call(session, "agents")
            assert not is_error, text
            assert [agent["agent_id"] for agent in listed["agents"]] == ["poster", "upper"]
    finally:
        await drop_agent_logins(database_url)
