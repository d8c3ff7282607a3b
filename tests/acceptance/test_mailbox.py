"""Mailbox routes from the shell: route add --mailbox and birddog inbox, as subprocesses."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import UTC, datetime

from birddog import AgentAddress, Outcome, Reply, ReplyFacts, reply_key
from tests.support import deliver_to_mailbox, until_listening
from tests.support.cli import BIRDDOG, ROOT, cli, cli_env
from tests.support.stacks import Harness

ASKER = AgentAddress(agent_id="asker", session_id="s-ask")
AGENT = AgentAddress(agent_id="upper", session_id="s-upper")


def answer(mail_key: str, *, content: str = "HELLO", diagnostic: str | None = None) -> Reply:
    return Reply(
        key=reply_key(mail_key, 0),
        in_reply_to=mail_key,
        to=ASKER,
        from_=AGENT,
        content=content,
        created_at=1_767_225_600_000,
        reply=ReplyFacts(
            command_id=f"cmd-{mail_key}",
            outcome=Outcome.COMPLETED if diagnostic is None else Outcome.FAILED,
            diagnostic=diagnostic,
        ),
    )


async def test_route_add_mailbox_needs_no_url(database_url: str) -> None:
    """A mailbox route is added without URL or secret and listed as a mailbox."""
    added = await cli(database_url, "route", "add", "asker", "--mailbox")
    assert added.returncode == 0, added.stderr
    assert "mailbox" in added.stdout
    listed = await cli(database_url, "route", "list", "--json")
    assert json.loads(listed.stdout) == [
        {
            "agentId": "asker",
            "kind": "mailbox",
            "url": None,
            "enabled": True,
            "batchSize": 1,
            "postTimeoutS": None,
            "maxAgeS": None,
            "maxAttempts": None,
            "digest": {"daily": "08:00", "everyS": None},  # the default digest
        }
    ]
    neither = await cli(database_url, "route", "add", "other")
    both = await cli(database_url, "route", "add", "other", "http://127.0.0.1:1/x", "--mailbox")
    for refused in (neither, both):
        assert refused.returncode == 2
        [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
        assert "--mailbox" in error
        assert "Traceback" not in refused.stderr


async def test_inbox_lists_acks_and_escapes(database_url: str, harness: Harness) -> None:
    """Inbox prints unread replies (content escaped), --json lines, and --ack marks them read."""
    await deliver_to_mailbox(
        harness.pool, answer("m-1", content="line one\nline \x1b[31mtwo"), at=_at(1)
    )
    await deliver_to_mailbox(
        harness.pool, answer("m-2", content="", diagnostic="exit status 3: boom"), at=_at(2)
    )
    listed = await cli(database_url, "inbox", "asker:s-ask")
    assert listed.returncode == 0, listed.stderr
    assert "line one" in listed.stdout
    assert "line \\x1b[31mtwo" in listed.stdout
    assert "\x1b" not in listed.stdout
    assert "diagnostic: exit status 3: boom" in listed.stdout
    assert listed.stdout.index(reply_key("m-1", 0)) < listed.stdout.index(reply_key("m-2", 0))

    as_json = await cli(database_url, "inbox", "asker", "--json", "--ack")
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(line["key"], line["outcome"], line["diagnostic"]) for line in lines] == [
        (reply_key("m-1", 0), "completed", None),
        (reply_key("m-2", 0), "failed", "exit status 3: boom"),
    ]
    assert lines[0]["content"] == "line one\nline \x1b[31mtwo"
    assert lines[0]["from"] == AGENT.model_dump(mode="json")

    again = await cli(database_url, "inbox", "asker")
    assert (again.returncode, again.stdout) == (0, "")
    assert "no unread replies" in again.stderr
    read = await harness.pool.fetchval(
        "SELECT count(*) FROM birddog.mailbox WHERE read_at IS NOT NULL"
    )
    assert read == 2


async def test_inbox_refuses_a_bad_address(database_url: str) -> None:
    """An empty agent or session is a one-line usage error."""
    for bad in (":s", "asker:"):
        refused = await cli(database_url, "inbox", bad)
        assert refused.returncode == 2
        assert "AGENT[:SESSION]" in refused.stderr


async def test_inbox_follow_streams_new_replies(database_url: str, harness: Harness) -> None:
    """Inbox --follow --json prints a reply delivered after it started, then stops on SIGTERM."""
    follower = await asyncio.create_subprocess_exec(
        BIRDDOG, "inbox", "asker", "--follow", "--json", "--ack",
        env=cli_env(database_url),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await until_listening(harness.pool)
        await deliver_to_mailbox(harness.pool, answer("m-9"), at=_at(9))
        assert follower.stdout is not None
        line = await asyncio.wait_for(follower.stdout.readline(), 60)
        assert json.loads(line)["key"] == reply_key("m-9", 0)
        follower.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(follower.wait(), 30) == 0
    finally:
        if follower.returncode is None:
            follower.kill()
            await follower.wait()
    unread = await harness.pool.fetchval(
        "SELECT count(*) FROM birddog.mailbox WHERE read_at IS NULL"
    )
    assert unread == 0


def _at(seconds: int) -> datetime:
    return datetime(2026, 1, 1, 0, 0, seconds, tzinfo=UTC)
