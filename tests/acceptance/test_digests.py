"""Digests: informational mail with no live session waits for its digest, then goes in one turn.

Real ``birddog worker --command ... --batch 20 --once`` processes on this test's database;
bob's command agent writes one line per spawn (the turn's job ids) to a file, so a test
counts turns and sees which mails each took. Bob's route has a daily digest twelve hours
from now (so none falls due while a test runs); a digest is made due by setting the jobs'
``digest_at`` in the past by SQL (and repairing the queue heads, as for any job written
by hand).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from birddog.core.digests import digest_time_text
from birddog.postgres.pool import Pool
from tests.support.cli import cli

AGENT = r"""
import json, os, sys
mails = [json.loads(line) for line in sys.stdin if line.strip()]
with open(sys.argv[1], "a") as turns:
    turns.write(json.dumps([m["job_id"] for m in mails]) + "\n")
for mail in mails:
    print(json.dumps({"job_id": mail["job_id"], "content": mail["kind"] + " read"}))
"""

SEND = ["send", "--allow-unknown", "--to", "bob:s-bob", "--from", "alice:s-alice"]


@pytest.fixture
def digest_time() -> str:
    """Bob's digest time of day: twelve hours from now (UTC), so none falls due in a test."""
    return (datetime.now(UTC) + timedelta(hours=12)).strftime("%H:%M")


@pytest.fixture
async def bob(database_url: str, digest_time: str) -> str:
    """Bob's route: a mailbox with a daily digest twelve hours from now."""
    added = await cli(
        database_url, "route", "add", "bob", "--mailbox", "--digest", f"daily@{digest_time}"
    )
    assert added.returncode == 0, added.stderr
    assert f"digest daily@{digest_time} UTC" in added.stdout
    return "bob"


@pytest.fixture
def turns(tmp_path: Path) -> Path:
    """The file bob's agent appends one line to per turn: that turn's job ids."""
    return tmp_path / "turns"


async def worker_once(database_url: str, tmp_path: Path, turns: Path, *more: str) -> str:
    """One ``birddog worker --agent bob --batch 20 --once`` run of bob's agent; its stdout."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    ran = await cli(
        database_url,
        "worker",
        "--agent",
        "bob",
        "--batch",
        "20",
        *more,
        "--command",
        f"{sys.executable} {agent} {turns}",
        "--once",
        timeout_s=90,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def turns_taken(turns: Path) -> list[list[str]]:
    """Each turn bob's agent ran, as the job ids it was given."""
    if not turns.exists():
        return []
    return [json.loads(line) for line in turns.read_text().splitlines()]


async def send(database_url: str, key: str, kind: str) -> None:
    """Send mail ``key`` of ``kind`` from alice to bob's session."""
    sent = await cli(database_url, *SEND, "--key", key, "--kind", kind, "--content", key)
    assert sent.returncode == 0, sent.stderr


async def job_ids(pool: Pool, kind: str) -> list[str]:
    """The ids of the jobs of ``kind``, in the order they were sent."""
    rows = await pool.fetch(
        "SELECT job_id FROM birddog.jobs WHERE kind = $1 ORDER BY created_at, job_id", kind
    )
    return [row["job_id"] for row in rows]


async def make_digest_due(pool: Pool) -> None:
    """Every waiting digest due a minute ago (as if its time had come), the heads repaired."""
    await pool.execute(
        "UPDATE birddog.jobs SET digest_at = now() - interval '1 minute' "
        "WHERE digest_at IS NOT NULL"
    )
    await pool.execute("SELECT birddog.queue_heads_repair()")


@pytest.mark.usefixtures("bob")
async def test_reports_wait_for_the_digest_a_task_behind_them_does_not_then_one_turn_takes_all(
    database_url: str, pg_pool: Pool, digest_time: str, tmp_path: Path, turns: Path
) -> None:
    """Three reports wait (the worker says so) while a task behind them is answered; due, one turn."""
    for key in ("r-1", "r-2", "r-3"):
        await send(database_url, key, "report")
    await send(database_url, "t-1", "task")
    first = await worker_once(database_url, tmp_path, turns)
    tasks = await job_ids(pg_pool, "task")
    assert turns_taken(turns) == [tasks]
    assert "settled 1 job: 1 completed" in first, first
    assert "left 3 jobs waiting for their digest (at " in first, first
    assert f"{digest_time} UTC)" in first, first
    queued = await pg_pool.fetchval(
        "SELECT count(*) FROM birddog.jobs WHERE state = 'queued' AND kind = 'report'"
    )
    assert queued == 3
    await says_it_waits(database_url, pg_pool, await job_ids(pg_pool, "report"))

    await make_digest_due(pg_pool)
    second = await worker_once(database_url, tmp_path, turns)
    assert "settled 3 jobs: 3 completed" in second, second
    assert "waiting for" not in second
    assert turns_taken(turns) == [tasks, await job_ids(pg_pool, "report")]
    answers = await pg_pool.fetch(
        "SELECT result_content FROM birddog.jobs WHERE kind = 'report' AND outcome = 'completed'"
    )
    assert [row["result_content"] for row in answers] == ["report read"] * 3


async def says_it_waits(database_url: str, pool: Pool, reports: list[str]) -> None:
    """Jobs list and show, a mail's story and status say the reports wait for their digest."""
    due = await pool.fetchval("SELECT min(digest_at) FROM birddog.jobs")
    shown = f"waiting for digest (at {digest_time_text(due)})"
    listed = await cli(database_url, "jobs", "list", "--state", "queued")
    assert listed.stdout.count(shown) == len(reports), listed.stdout
    assert "stuck" not in listed.stdout
    as_json = json.loads((await cli(database_url, "jobs", "list", "--json")).stdout)
    assert {row["job_id"] for row in as_json["jobs"] if row["digest_at"]} == set(reports)
    job = await cli(database_url, "jobs", "show", reports[0])
    assert f"queued, {shown}" in job.stdout, job.stdout
    story = await cli(database_url, "show", "r-1")
    assert f"queued, {shown}" in story.stdout, story.stdout
    status = await cli(database_url, "status")
    assert f"{len(reports)} queued waiting for digest" in status.stdout, status.stdout
    assert digest_time_text(due) in status.stdout


@pytest.mark.usefixtures("bob")
async def test_a_live_session_gets_informational_mail_at_once(
    database_url: str, pg_pool: Pool, tmp_path: Path, turns: Path
) -> None:
    """A worker --live bob:s-bob takes waiting reports and a receipt at once, in one turn."""
    await send(database_url, "r-1", "report")
    await send(database_url, "c-1", "receipt")
    ran = await worker_once(database_url, tmp_path, turns, "--live", "bob:s-bob")
    assert "settled 2 jobs: 2 completed" in ran, ran
    assert "waiting for" not in ran
    [turn] = turns_taken(turns)
    assert sorted(turn) == sorted(
        await job_ids(pg_pool, "report") + await job_ids(pg_pool, "receipt")
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--digest", "weekly"), "daily@HH:MM"),
        (("--digest", "daily@24:00"), "daily@HH:MM"),
        (("--digest", "daily@8:00"), "daily@HH:MM"),
        (("--digest-every", "10s"), "from 1m to 7d"),
        (("--digest-every", "8d"), "from 1m to 7d"),
        (("--digest-every", "soon"), "--digest-every"),
        (("--digest", "daily@08:00", "--digest-every", "1h"), "not both"),
    ],
)
async def test_a_bad_digest_is_a_one_line_error_and_nothing_is_written(
    database_url: str, pg_pool: Pool, args: tuple[str, ...], says: str
) -> None:
    """Route add with a bad --digest or --digest-every exits 2 with one line; no route is added."""
    refused = await cli(database_url, "route", "add", "bob", "--mailbox", *args)
    assert refused.returncode == 2, refused.stdout
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert says in refused.stderr
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.routes") == 0


async def test_the_digest_is_set_shown_and_put_back(
    database_url: str, pg_pool: Pool, bob: str
) -> None:
    """Route update --digest-every sets it, route list shows it, 'default' puts daily@08:00 back."""
    changed = await cli(database_url, "route", "update", bob, "--digest-every", "30m")
    assert (changed.returncode, changed.stdout.strip()) == (0, "route bob: digest every 30m")
    row = await pg_pool.fetchrow("SELECT digest_daily, digest_every_s FROM birddog.routes")
    assert row is not None
    assert (row["digest_daily"], row["digest_every_s"]) == (None, 1800)
    listed = await cli(database_url, "route", "list")
    assert listed.stdout.strip().endswith("digest every 30m"), listed.stdout
    as_json = json.loads((await cli(database_url, "route", "list", "--json")).stdout)
    assert as_json[0]["digest"] == {"daily": None, "everyS": 1800}
    back = await cli(database_url, "route", "update", bob, "--digest", "default")
    assert back.stdout.strip() == "route bob: digest daily@08:00 UTC"
    row = await pg_pool.fetchrow("SELECT digest_daily, digest_every_s FROM birddog.routes")
    assert row is not None
    assert (row["digest_daily"], row["digest_every_s"]) == (None, None)
    nobody = await cli(database_url, "route", "update", "nobody", "--digest", "daily@09:00")
    assert nobody.returncode != 0
    assert "no route for agent" in nobody.stderr


async def test_route_help_says_the_digest_is_utc_and_its_default(database_url: str) -> None:
    """Route add --help and update --help name both options, UTC and the default."""
    for command in ("add", "update"):
        shown = await cli(database_url, "route", command, "--help")
        text = " ".join(shown.stdout.split())
        assert "--digest daily@HH:MM" in text
        assert "--digest-every DURATION" in text
        assert "a time of day in UTC" in text
        assert "the default: daily@08:00 UTC" in text
