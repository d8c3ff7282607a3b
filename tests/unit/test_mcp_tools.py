"""The MCP tools' own rules, on fakes: arguments refused by name, a database away, the bound.

Every result here is held to the rules of results (``tests.support.mcp.checked_result``):
structured content that validates against the tool's output schema and is the JSON of
its text block, and none at all on a tool error.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from birddog import AgentAddress, Outcome, Reply, ReplyFacts, StoreUnavailable
from birddog.core.ask import ask_job_id, new_send_key
from birddog.core.mailbox import MailboxEntry
from birddog.mcp.schemas import INBOX_MAX_BYTES, TOOLS, input_schema
from birddog.mcp.texts import ToolResult
from birddog.mcp.tools import AgentTools, Services
from birddog.ports import Route
from tests.support.mcp import checked_result, facts_of
from tests.support.world import World, queued

ME = AgentAddress(agent_id="me", session_id="s-me")


def entry(index: int, content: str) -> MailboxEntry:
    reply = Reply(
        key=f"outbox:m-{index}:reply:0",
        in_reply_to=f"m-{index}",
        to=ME,
        from_=AgentAddress(agent_id="bob", session_id="s-bob"),
        content=content,
        created_at=1,
        reply=ReplyFacts(command_id="c", outcome=Outcome.COMPLETED),
    )
    return MailboxEntry(
        key=reply.key,
        agent_id="me",
        session_id="s-me",
        in_reply_to=reply.in_reply_to,
        command_id="c",
        outcome=Outcome.COMPLETED,
        reply=reply,
        delivered_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


class Away:
    """Every adapter call finds the database away."""

    def __getattr__(self, name: str) -> Any:
        async def away(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("database unavailable during send: connection refused")

        return away


class FullMailbox:
    """A mailbox holding 1,000 long unread replies."""

    def __init__(self) -> None:
        self.entries = [entry(i, "é" * 5000) for i in range(1000)]

    async def unread_count(self, owner: AgentAddress, **_: Any) -> int:
        """All of them are unread."""
        return len(self.entries)

    async def read(self, agent_id: str, session_id: str, *, limit: int) -> list[MailboxEntry]:
        """The oldest ``limit``."""
        return self.entries[:limit]


class CheckedDesk(AgentTools):
    """The agent_tools, each result it gives held to the rules of results."""

    async def call(self, name: str, arguments: Any, **kwargs: Any) -> ToolResult:
        """The tool's result, checked."""
        return checked_result(name, await super().call(name, arguments, **kwargs))


def agent_tools(**adapters: Any) -> AgentTools:
    services: dict[str, Any] = {
        name: Away() for name in ("sender", "mailbox", "asks", "jobs", "admin", "routes", "notices")
    }
    services.update(adapters)
    return CheckedDesk(Services(**services))


def test_every_tool_has_a_closed_object_schema_and_an_output_schema() -> None:
    """Each tool's arguments allow nothing else, and its structured content is described."""
    assert list(TOOLS) == [
        "send", "ask", "wait", "inbox", "read", "ack", "next_task", "answer", "status", "agents",
    ]  # fmt: skip
    for name, spec in TOOLS.items():
        schema = input_schema(name)
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert spec["output"]["type"] == "object"
        assert spec["output"]["additionalProperties"] is False, name


def test_every_tool_has_a_title_the_four_hints_and_every_argument_a_description() -> None:
    """A client lists a title, readOnly/destructive/idempotent/openWorld hints, described arguments."""
    for name, spec in TOOLS.items():
        assert spec["title"], name
        assert set(spec["annotations"]) == {
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        }
        for argument, schema in input_schema(name)["properties"].items():
            assert schema.get("description"), (name, argument)
    read_only = {name for name, spec in TOOLS.items() if spec["annotations"]["readOnlyHint"]}
    assert read_only == {"inbox", "read", "status", "agents"}
    assert "state" in TOOLS["ask"]["output"]["properties"]


def test_a_sends_fresh_key_and_job_are_named_apart_from_an_asks() -> None:
    """A send's fresh key is mail-<time>-<token> and its job send:<key>; an ask's keeps ask:."""
    key = new_send_key(datetime(2026, 11, 30, 14, 5, 1, tzinfo=UTC), "9f3a61c2")
    assert key == "mail-20261130T140501Z-9f3a61c2"
    assert ask_job_id(key) == "send:" + key
    assert ask_job_id("ask-20261130T140501Z-9f3a61c2").startswith("ask:")
    assert ask_job_id("mail-" + "x" * 300).startswith("send:sha256:")


@pytest.mark.parametrize(
    ("tool", "arguments", "starts"),
    [
        ("send", {"content": "x"}, "to: required"),
        ("send", {"to": 7, "content": "x"}, "to: must be a string"),
        ("send", {"to": "a:b", "content": "x", "reply_to": "a:b"}, "reply_to: must be a list"),
        ("ask", {"to": "a:b", "content": "x", "wait_s": "soon"}, "wait_s: must be a number"),
        ("ask", {"to": "a:b", "content": "x", "wait_s": -1}, "wait_s: must be between 0"),
        ("ask", {"to": "a:b", "content": "x", "wait_s": True}, "wait_s: must be a number"),
        ("inbox", {"limit": 101}, "limit: must be between 1 and 100"),
        ("inbox", {"unread_only": "yes"}, "unread_only: must be true or false"),
        ("ack", {"keys": []}, "keys: give at least one"),
        ("ack", {"keys": ["a", 2]}, "keys: must be a list of strings"),
        ("next_task", {"wait_s": 1000}, "wait_s: must be between 0"),
        ("answer", {"job_id": "j", "content": "x", "outcome": "cancelled"}, "outcome:"),
        ("agents", {"all": True}, "all: not an argument of agents"),
        ("teleport", {}, "name: no tool 'teleport'"),
    ],
)
async def test_bad_arguments_are_refused_naming_the_field(
    tool: str, arguments: dict[str, Any], starts: str
) -> None:
    """A bad argument is a tool error whose one line starts with the field, before any I/O."""
    result = await agent_tools().call(tool, arguments, caller=ME)
    assert result.is_error
    assert result.structured_content is None
    assert result.text.startswith(starts), result.text
    assert "\n" not in result.text


async def test_the_database_away_is_a_tool_error_that_says_so() -> None:
    """With the database unreachable, a tool answers is_error saying so, naming no secret."""
    result = await agent_tools().call("inbox", {}, caller=ME)
    assert result.is_error
    assert result.text.startswith("the database is unreachable, nothing was done")


async def test_an_inbox_of_a_thousand_long_replies_stays_far_under_the_bound() -> None:
    """However long and many the replies, one inbox result holds at most 40,000 bytes."""
    result = await agent_tools(mailbox=FullMailbox()).call("inbox", {"limit": 100}, caller=ME)
    assert not result.is_error
    size = len(json.dumps(result.structured, ensure_ascii=False).encode())
    assert size <= INBOX_MAX_BYTES
    assert result.structured["unread"] == 1000
    replies = result.structured["replies"]
    assert replies
    assert all(reply["truncated"] and len(reply["content"]) == 2000 for reply in replies)


async def test_bad_input_to_ask_logs_no_send_failed_after_cancel() -> None:
    """An ask refused for its address is the caller's error, not a send lost after a cancel."""
    world = World()
    with capture_logs() as logs:
        result = await agent_tools(sender=world.mail).call(
            "ask", {"to": "no-colon", "content": "x"}, caller=ME
        )
    assert result.is_error
    assert result.text.startswith("to:")
    assert [entry for entry in logs if "after_cancel" in entry["event"]] == []
    assert world.jobs.jobs == {}


async def test_a_failed_ask_is_an_error_whose_text_carries_the_whole_reply() -> None:
    """A failed ask has no structured content; its text names the outcome and carries the reply."""
    world = World()
    await world.routes.add("bob", kind="mailbox")
    heard: list[tuple[float, str]] = []

    async def progressed(done: float, total: float, message: str) -> None:
        heard.append((done, message))

    asking = asyncio.create_task(
        agent_tools(sender=world.mail).call(
            "ask", {"to": "bob:s-bob", "content": "x"}, caller=ME, progress=progressed
        )
    )
    await queued(world)
    await world.answer("the whole reply " + "x" * 500, Outcome.FAILED, "no such thing")
    result = await asking
    assert result.is_error
    assert result.structured_content is None
    facts = facts_of(result.text)
    assert (facts["outcome"], facts["diagnostic"]) == ("failed", "no such thing")
    assert facts["content"] == "the whole reply " + "x" * 500
    assert heard[0][0] == 0
    assert facts["key"] in heard[0][1]


async def test_a_send_without_a_key_gets_a_sends_key_from_the_service() -> None:
    """The agent tools' send leaves the key to the mail service: mail-<time>-<token>, job send:."""
    world = World()
    await world.routes.add("bob", kind="mailbox")
    result = await agent_tools(sender=world.mail).call(
        "send", {"to": "bob:s-bob", "content": "fyi"}, caller=ME
    )
    assert not result.is_error, result.text
    key = result.structured["key"]
    assert key.startswith("mail-")
    assert result.structured["job_id"] == "send:" + key
    assert list(world.jobs.jobs) == ["send:" + key]


async def test_an_ask_kept_in_the_spool_is_pending_and_says_spooled() -> None:
    """With the database away, ask and then wait are pending in state spooled, saying why."""
    world = World()
    await world.routes.add("bob", kind="mailbox")
    world.away()
    asked = await agent_tools(sender=world.mail).call(
        "ask", {"to": "bob:s-bob", "content": "and?", "key": "m-2", "wait_s": 0.05}, caller=ME
    )
    assert not asked.is_error, asked.text
    assert (asked.structured["status"], asked.structured["state"]) == ("pending", "spooled")
    assert asked.structured["message"].startswith(
        "spooled (database unreachable): the question m-2"
    )
    waited = await agent_tools(sender=world.mail).call(
        "wait", {"key": "m-2", "wait_s": 0.05}, caller=ME
    )
    assert not waited.is_error, waited.text
    assert (waited.structured["status"], waited.structured["state"]) == ("pending", "spooled")
    assert waited.structured["message"].startswith("spooled: the question m-2")
    world.away(None)
    again = await agent_tools(sender=world.mail).call(
        "wait", {"key": "m-2", "wait_s": 0.05}, caller=ME
    )
    assert (again.structured["status"], again.structured["state"]) == ("pending", "queued")
    assert "spooled" not in again.structured["message"]


async def test_wait_and_the_instructions_read_the_callers_route_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether a reply comes to the mailbox is told from the caller's route, not every route.

    The caller's route posts to a URL: the instructions say so, a wait on its send's key
    says the reply is posted there, and a wait on its ask's key gives the answer; agents
    lists the routes' summaries (no route read whole, URL and all).
    """
    world = World()
    await world.routes.add("bob", kind="mailbox")
    await world.routes.add("me", "https://me.example/inbox")

    async def every_route() -> list[Route]:
        raise AssertionError("every route was read for one caller")

    monkeypatch.setattr(world.routes, "list", every_route)
    tools = agent_tools(
        sender=world.mail, mailbox=world.mailbox, jobs=world.jobs, routes=world.routes
    )
    assert "Your route posts to an inbox URL" in await tools.instructions(ME)
    asking = asyncio.create_task(
        tools.call("ask", {"to": "bob:s-bob", "content": "and?", "key": "m-3"}, caller=ME)
    )
    await queued(world)
    await world.answer("yes")
    assert (await asking).structured["content"] == "yes"
    again = await tools.call("wait", {"key": "m-3", "wait_s": 0.05}, caller=ME)
    assert (again.structured["status"], again.structured["content"]) == ("answered", "yes")
    sent = await tools.call("send", {"to": "bob:s-bob", "content": "fyi"}, caller=ME)
    waited = await tools.call("wait", {"key": sent.structured["key"], "wait_s": 0.05}, caller=ME)
    assert waited.is_error
    assert "posted to your inbox URL" in waited.text
    listed = await tools.call("agents", {}, caller=ME)
    assert listed.structured["agents"] == [
        {"agent_id": "bob", "kind": "mailbox", "held": False},
        {"agent_id": "me", "kind": "inbox", "held": False},
    ]
