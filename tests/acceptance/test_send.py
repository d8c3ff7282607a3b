"""``birddog send`` is idempotent and never guesses its content."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from datetime import timedelta

from tests.support import json_at
from tests.support.cli import BIRDDOG, ROOT, cli, cli_env
from tests.support.stacks import Harness

MAIL = ["--allow-unknown", "--job-id", "job-r", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", "mail-r", "--command-id", "cmd-r"]  # fmt: skip


async def _stored(harness: Harness) -> list[dict[str, object]]:
    rows = await harness.pool.fetch("SELECT payload::text AS payload FROM birddog.jobs")
    return [json.loads(row["payload"]) for row in rows]


async def test_an_identical_send_is_a_replay_that_says_already_sent(
    database_url: str, harness: Harness
) -> None:
    """Sending the same mail twice writes one job; the retry says 'already sent' and exits 0."""
    first = await cli(database_url, "send", *MAIL, "--content", "What is due?")
    assert (first.returncode, first.stdout.strip()) == (0, "sent: job-r"), first.stderr
    again = await cli(database_url, "send", *MAIL, "--content", "What is due?")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("already sent: job-r")
    assert len(await _stored(harness)) == 1


async def test_a_different_mail_under_the_same_job_id_is_refused_naming_the_field(
    database_url: str, harness: Harness
) -> None:
    """Another content under a sent job id exits 1 with the conflict; the stored job stays."""
    assert (await cli(database_url, "send", *MAIL, "--content", "one")).returncode == 0
    other = await cli(database_url, "send", *MAIL, "--content", "two")
    assert other.returncode == 1
    assert "job-r" in other.stderr
    assert "Traceback" not in other.stderr
    [payload] = await _stored(harness)
    assert json_at(payload, "mail", "content") == "one"


async def test_created_at_pins_the_time(database_url: str, harness: Harness) -> None:
    """--created-at is stored as the mail's createdAt; the same pin replays, another conflicts."""
    pinned = [*MAIL, "--content", "x", "--created-at", "1767225600000"]
    assert (await cli(database_url, "send", *pinned)).returncode == 0
    [payload] = await _stored(harness)
    assert json_at(payload, "mail", "createdAt") == 1767225600000
    assert (await cli(database_url, "send", *pinned)).stdout.startswith("already sent")
    moved = await cli(database_url, "send", *MAIL, "--content", "x", "--created-at", "1")
    assert moved.returncode == 1
    negative = await cli(database_url, "send", *MAIL, "--content", "x", "--created-at", "-5")
    assert negative.returncode == 2


async def test_empty_content_must_be_explicit(database_url: str, harness: Harness) -> None:
    """An empty stdin is refused with a hint; --content '' sends empty content on purpose."""
    empty = await asyncio.to_thread(
        subprocess.run,
        [BIRDDOG, "send", *MAIL],
        stdin=subprocess.DEVNULL, env=cli_env(database_url), cwd=ROOT,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert empty.returncode == 2
    assert "--content ''" in empty.stderr
    assert await _stored(harness) == []
    explicit = await cli(database_url, "send", *MAIL, "--content", "")
    assert explicit.returncode == 0, explicit.stderr
    [payload] = await _stored(harness)
    assert json_at(payload, "mail", "content") == ""


async def test_a_terminal_on_stdin_without_content_is_an_error(database_url: str) -> None:
    """With a terminal on stdin and no --content, send says what to do instead of waiting."""
    leader, follower = os.openpty()
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [BIRDDOG, "send", *MAIL],
            stdin=follower, env=cli_env(database_url), cwd=ROOT,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    assert "no content: give --content TEXT or pipe it on stdin" in done.stderr


async def test_send_takes_priority_not_before_and_expiry_and_a_retry_is_a_replay(
    database_url: str, harness: Harness
) -> None:
    """A send with priority, not-before 1h and expiry 10m stores them; its retry is a replay."""
    timing = ["--priority", "7", "--not-before", "1h", "--expires-in", "10m"]
    first = await cli(database_url, "send", *MAIL, *timing, "--content", "later")
    assert (first.returncode, first.stdout.strip()) == (0, "sent: job-r"), first.stderr
    row = await harness.pool.fetchrow(
        "SELECT priority, agent_id, not_before - created_at AS wait, "
        "expires_at - created_at AS life FROM birddog.jobs WHERE job_id = 'job-r'"
    )
    assert (row["priority"], row["agent_id"], row["life"]) == (7, "bob", timedelta(minutes=10))
    assert timedelta(minutes=59) < row["wait"] <= timedelta(hours=1)
    # A retry computes "1h" from a later now: the stored moment makes it the same mail.
    again = await cli(database_url, "send", *MAIL, *timing, "--content", "later")
    assert again.stdout.startswith("already sent: job-r"), again.stderr
    listed = await cli(database_url, "jobs", "list")
    assert "not before" in listed.stdout.splitlines()[0]
    status = await cli(database_url, "status")
    assert "1 queued not before a later time" in status.stdout


async def test_send_and_ask_refuse_an_unknown_agent_as_the_mcp_send_does(
    database_url: str, harness: Harness
) -> None:
    """To an agent with no route and a session never sent work: exit 3, nothing written."""
    sent = await cli(
        database_url, "send", "--to", "nosuch:s-1", "--from", "me:s-me", "--content", "hi"
    )
    assert sent.returncode == 3, sent
    assert sent.stdout == ""
    assert "unknown agent session nosuch:s-1: the agent has no route" in sent.stderr
    assert "--allow-unknown" in sent.stderr
    assert "nothing was sent" in sent.stderr
    assert "Traceback" not in sent.stderr
    strict = await cli(
        database_url, "send", "--to", "nosuch:s-1", "--from", "me:s-me", "--content", "hi",
        "--strict",
    )  # fmt: skip
    assert strict.returncode == 3
    asked = await cli(
        database_url, "ask", "--to", "nosuch:s-1", "--from", "me:s-me", "--timeout", "0", "hi"
    )
    assert asked.returncode == 3, asked
    assert "unknown agent session nosuch:s-1" in asked.stderr
    assert await harness.pool.fetchval("SELECT count(*) FROM birddog.jobs") == 0


async def test_allow_unknown_queues_mail_for_a_worker_not_started_yet(
    database_url: str, harness: Harness
) -> None:
    """--allow-unknown queues it; the session is then known, so a plain send goes through."""
    waiting = await cli(
        database_url, "send", "--to", "later:s-1", "--from", "me:s-me", "--content", "one",
        "--allow-unknown",
    )  # fmt: skip
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout.startswith("sent: send:mail-")
    plain = await cli(
        database_url, "send", "--to", "later:s-1", "--from", "me:s-me", "--content", "two"
    )
    assert plain.returncode == 0, plain.stderr
    assert await harness.pool.fetchval("SELECT count(*) FROM birddog.jobs") == 2


async def test_to_from_and_content_are_enough_the_ids_are_made_and_printed(
    database_url: str, harness: Harness
) -> None:
    """Unset key, job id and command id are made, printed; --key KEY again is a replay."""
    await harness.routes.add("bob", kind="mailbox")
    sent = await cli(
        database_url, "send", "--to", "bob:s-bob", "--from", "me:s-me", "--content", "hi"
    )
    assert sent.returncode == 0, sent.stderr
    job_id = sent.stdout.strip().removeprefix("sent: ")
    assert job_id.startswith("send:mail-")
    key = job_id.removeprefix("send:")
    assert f"sent as key {key}, job id {job_id}, command id {job_id}" in sent.stderr
    assert f"--key {key} sends the same again" in sent.stderr
    payload = json.loads(
        await harness.pool.fetchval(
            "SELECT payload::text FROM birddog.jobs WHERE job_id = $1", job_id
        )
    )
    assert (payload["mail"]["key"], payload["commandFactId"]) == (key, job_id)
    again = await cli(
        database_url, "send", "--to", "bob:s-bob", "--from", "me:s-me", "--content", "hi",
        "--key", key, "--json",
    )  # fmt: skip
    assert json.loads(again.stdout) == {
        "status": "already sent",
        "jobId": job_id,
        "key": key,
        "commandId": job_id,
        "unroutedReplyTo": [],
    }
