"""The MCP tools' own rules, on fakes: arguments refused by name, a database away, the bound."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from birddog import AgentAddress, Outcome, Reply, ReplyFacts, StoreUnavailable
from birddog.core.mailbox import MailboxEntry
from birddog.mcp.tools import INBOX_MAX_BYTES, TOOLS, Desk, Services, input_schema

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


def desk(**adapters: Any) -> Desk:
    services: dict[str, Any] = {
        name: Away() for name in ("sender", "mailbox", "asks", "jobs", "admin", "routes", "notices")
    }
    services.update(adapters)
    return Desk(Services(**services))


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
    result = await desk().call(tool, arguments, caller=ME)
    assert result.is_error
    assert result.text.startswith(starts), result.text
    assert "\n" not in result.text


async def test_the_database_away_is_a_tool_error_that_says_so() -> None:
    """With the database unreachable, a tool answers is_error saying so, naming no secret."""
    result = await desk().call("inbox", {}, caller=ME)
    assert result.is_error
    assert result.text.startswith("the database is unreachable, nothing was done")


async def test_an_inbox_of_a_thousand_long_replies_stays_far_under_the_bound() -> None:
    """However long and many the replies, one inbox result holds at most 40,000 bytes."""
    result = await desk(mailbox=FullMailbox()).call("inbox", {"limit": 100}, caller=ME)
    assert not result.is_error
    size = len(json.dumps(result.structured, ensure_ascii=False).encode())
    assert size <= INBOX_MAX_BYTES
    assert result.structured["unread"] == 1000
    replies = result.structured["replies"]
    assert replies
    assert all(reply["truncated"] and len(reply["content"]) == 2000 for reply in replies)
