"""The CLI says what happened: unknown keys, bad secrets and empty updates are errors."""

from __future__ import annotations

import json

from tests.support.cli import cli
from tests.support.stacks import Harness


async def test_replaying_an_unknown_key_or_agent_exits_1_naming_it(database_url: str) -> None:
    """Replay of a key or agent with no dead letter exits 1 and names what it looked for."""
    unknown = await cli(database_url, "replay", "outbox:nope:reply:0")
    assert unknown.returncode == 1
    assert "no dead letter with key 'outbox:nope:reply:0'" in unknown.stderr
    nobody = await cli(database_url, "replay", "--agent", "nobody")
    assert nobody.returncode == 1
    assert "recipient 'nobody'" in nobody.stderr


async def test_route_add_checks_the_secret_format_and_update_needs_a_change(
    database_url: str, harness: Harness
) -> None:
    """A secret without whsec_ is refused unechoed; an update with nothing to change is an error."""
    bad = await cli(
        database_url, "route", "add", "alice", "http://127.0.0.1:9/in", "--secret", "hunter2"
    )
    assert bad.returncode != 0
    assert "whsec_" in bad.stderr
    assert "hunter2" not in bad.stderr + bad.stdout
    assert await harness.pool.fetchval("SELECT count(*) FROM birddog.routes") == 0
    assert (
        await cli(database_url, "route", "add", "alice", "http://127.0.0.1:9/in")
    ).returncode == 0
    empty = await cli(database_url, "route", "update", "alice")
    assert empty.returncode == 2
    assert "nothing to change" in empty.stderr


async def test_status_prints_tables_and_plain_json(database_url: str) -> None:
    """Status prints headed tables (no Python reprs); --json gives the same report as JSON."""
    shown = await cli(database_url, "status")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:3] == [
        "replies",
        "pending  held  in flight  dead  oldest pending  next wake in",
        "0        0     0          0     -               -",
    ]
    assert "None" not in shown.stdout
    assert "{" not in shown.stdout
    report = json.loads((await cli(database_url, "status", "--json")).stdout)
    assert report["replies"]["pending"] == 0
    assert report["jobs"] == {"queued": 0, "running": 0, "settled": 0}
    assert report["daemons"] == []


async def test_environment_twins_follow_the_flag_name(database_url: str) -> None:
    """BIRDDOG_STATUS_JSON=1 turns on --json (the flag's name, not the parameter's)."""
    shown = await cli(database_url, "status", BIRDDOG_STATUS_JSON="1")
    assert json.loads(shown.stdout)["jobs"]["queued"] == 0
