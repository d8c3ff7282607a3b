"""Policies per route: one recipient's own post timeout, age limit and attempts."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from birddog import Reply
from birddog.http.inbox import Inbox
from birddog.postgres.pool import Pool
from tests.support.cli import cli
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness, fan_out


async def add_route(database_url: str, inbox: TestInbox, agent: str, *flags: str) -> str:
    """``birddog route add AGENT URL FLAGS``; the test inbox learns the secret it printed."""
    added = await cli(database_url, "route", "add", agent, inbox.url_for(agent), *flags)
    assert added.returncode == 0, added.stderr
    secret = added.stdout.split("signing secret: ")[1].strip()
    inbox.secrets[agent] = Inbox(secret)
    return added.stdout


async def test_a_route_post_timeout_of_2s_times_out_where_the_default_would_not(
    database_url: str, harness: Harness, inbox: TestInbox, pg_pool: Pool
) -> None:
    """Two inboxes answer after 4 s: the one routed with --post-timeout 2s fails, the other is delivered."""

    async def after_four_seconds(_reply: Reply, _count: int) -> web.StreamResponse | None:
        await asyncio.sleep(4)  # the inbox's own slowness, what the timeout is about
        return None

    inbox.behaviour = after_four_seconds
    said = await add_route(
        database_url, inbox, "hasty", "--post-timeout", "2s", "--max-attempts", "1"
    )
    assert "(post timeout 2s, max attempts 1)" in said
    await add_route(database_url, inbox, "patient")
    listed = await cli(database_url, "route", "list", "--json")
    policies = {
        row["agentId"]: (row["postTimeoutS"], row["maxAgeS"], row["maxAttempts"])
        for row in json.loads(listed.stdout)
    }
    assert policies == {"hasty": (2.0, None, 1), "patient": (None, None, None)}
    [hasty_key] = await fan_out(harness, 1, ["hasty"], prefix="h")
    [patient_key] = await fan_out(harness, 1, ["patient"], prefix="p")

    # The default post timeout, 10 s, outlasts the inbox's 4 s.
    ran = await cli(database_url, "run", "--once", BIRDDOG_POST_TIMEOUT_S="10", timeout_s=90)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "delivered 1 reply, 1 dead; nothing left pending"
    assert await harness.states() == {hasty_key: "dead", patient_key: "receipt"}
    dead = await pg_pool.fetchrow(
        "SELECT dead_reason, attempts, last_error FROM birddog.dead_letters WHERE key = $1",
        hasty_key,
    )
    assert dead is not None
    assert (dead["dead_reason"], dead["attempts"]) == ("attempts_exhausted", 1)
    assert dead["last_error"] == "no answer within 2 s; request cancelled"


async def test_route_update_sets_and_puts_back_a_policy(
    database_url: str, inbox: TestInbox
) -> None:
    """`route update` sets one field, keeps the others, and 'default' puts one back; list shows it."""
    await add_route(database_url, inbox, "alice", "--max-age", "6h")
    updated = await cli(database_url, "route", "update", "alice", "--max-attempts", "50")
    assert updated.returncode == 0, updated.stderr
    assert updated.stdout.strip().endswith("(max age 6h 00m, max attempts 50)")
    reset = await cli(database_url, "route", "update", "alice", "--max-age", "default")
    assert reset.stdout.strip().endswith("(max attempts 50)")
    listed = await cli(database_url, "route", "list")
    assert listed.stdout.strip().endswith("\tmax attempts 50\tdigest daily@08:00 UTC")


async def test_a_post_timeout_the_lease_would_not_outlast_is_refused(
    database_url: str, inbox: TestInbox
) -> None:
    """--post-timeout at or past BIRDDOG_LEASE_S is refused naming both; nothing is added."""
    added = await cli(
        database_url, "route", "add", "slow", inbox.url_for("slow"), "--post-timeout", "120s"
    )
    assert added.returncode != 0
    assert "must be shorter than the daemons' lease, BIRDDOG_LEASE_S (60 s)" in added.stderr
    assert "Traceback" not in added.stderr
    listed = await cli(database_url, "route", "list", "--json")
    assert json.loads(listed.stdout) == []
    longer = await cli(
        database_url, "route", "add", "slow", inbox.url_for("slow"), "--post-timeout", "120s",
        BIRDDOG_LEASE_S="300",
    )  # fmt: skip
    assert longer.returncode == 0, longer.stderr
    bad = await cli(database_url, "route", "update", "slow", "--max-attempts", "0")
    assert bad.returncode == 2
    assert "--max-attempts must be a whole number from 1 to 100,000" in bad.stderr
