"""Send checks its reply addresses, and replay refuses a dead letter whose cause still holds."""

from __future__ import annotations

import json

from birddog.postgres.pool import Pool
from tests.support.cli import cli

TO_CAROL = ["--allow-unknown", "--job-id", "job-c", "--to", "bob:s-bob", "--from", "alice:s-alice",
            "--reply-to", "carol:s-carol", "--key", "mail-c", "--command-id", "cmd-c",
            "--content", "hello"]  # fmt: skip
REPLY = "outbox:mail-c:reply:0"


async def dead_reason(pool: Pool) -> str | None:
    """The reply's dead reason (None while it is pending); it must still be in the outbox."""
    row = await pool.fetchrow("SELECT state, dead_reason FROM birddog.outbox WHERE key = $1", REPLY)
    assert row is not None, "the reply left the outbox"
    return None if row["state"] == "pending" else row["dead_reason"]


async def test_a_reply_to_an_agent_without_a_route_is_warned_of_and_refused_when_strict(
    database_url: str, pg_pool: Pool
) -> None:
    """Send warns on stderr and in --json of carol's missing route; --strict writes nothing."""
    strict = await cli(database_url, "send", *TO_CAROL, "--strict")
    assert strict.returncode == 3
    assert "no route for reply-to carol: its reply would die unknown_recipient" in strict.stderr
    assert "nothing was sent" in strict.stderr
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 0
    sent = await cli(database_url, "send", *TO_CAROL, "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {
        "status": "sent",
        "jobId": "job-c",
        "key": "mail-c",
        "commandId": "cmd-c",
        "unroutedReplyTo": ["carol"],
    }
    assert "warning: no route for reply-to carol" in sent.stderr
    assert "birddog route add carol URL, or --mailbox" in sent.stderr
    routed = await cli(database_url, "route", "add", "carol", "--mailbox")
    assert routed.returncode == 0, routed.stderr
    again = await cli(database_url, "send", *TO_CAROL, "--strict")
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout.startswith("already sent: job-c")


async def test_replay_refuses_while_the_cause_holds_and_replays_once_fixed(
    database_url: str, pg_pool: Pool
) -> None:
    """No route, then a held one, then one the egress policy refuses: refused; fixed: replayed."""
    assert (await cli(database_url, "send", *TO_CAROL)).returncode == 0
    worked = await cli(database_url, "worker", "--command", "cat", "--once")
    assert worked.returncode == 0, worked.stderr
    assert (await cli(database_url, "run", "--once")).returncode == 0
    assert await dead_reason(pg_pool) == "unknown_recipient"

    unrouted = await cli(database_url, "replay", REPLY)
    assert unrouted.returncode == 1
    assert "not replayed, it would die again: carol still has no route: add one first" in (
        unrouted.stderr
    )
    assert await dead_reason(pg_pool) == "unknown_recipient"

    added = await cli(database_url, "route", "add", "carol", "http://127.0.0.1:9/inbox", "--held")
    assert added.returncode == 0, added.stderr
    held = await cli(database_url, "replay", "--agent", "carol")
    assert held.returncode == 1
    assert "carol's route is held: release it first (birddog route release carol)" in held.stderr

    assert (await cli(database_url, "route", "release", "carol")).returncode == 0
    public_only = await cli(database_url, "replay", REPLY, BIRDDOG_EGRESS="public")
    assert public_only.returncode == 1
    assert "carol's route URL is still refused" in public_only.stderr
    assert "BIRDDOG_EGRESS_ALLOW" in public_only.stderr
    assert await dead_reason(pg_pool) == "unknown_recipient"

    replayed = await cli(database_url, "replay", REPLY)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith("replayed 1 dead letter(s)")
    assert await dead_reason(pg_pool) is None
