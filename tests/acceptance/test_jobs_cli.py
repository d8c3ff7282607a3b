"""``birddog jobs``, ``birddog show KEY`` and ``birddog console`` as people and scripts use them."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import tempfile
from datetime import UTC, datetime

import aiohttp

from birddog.postgres.pool import Pool
from tests.support import eventually, job_row
from tests.support.cli import BIRDDOG, cli, cli_env
from tests.support.console import HOSTILE_ERROR, HOSTILE_JOB, seed


def assert_inert(text: str) -> None:
    """No escape sequence, bidi override or other control reaches the terminal."""
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert all(ch in "\n" or ch.isprintable() for ch in text), repr(text)


async def test_jobs_list_as_a_table_and_as_json(database_url: str, pg_pool: Pool) -> None:
    """Jobs list prints an aligned table (filters work) and --json the rows and cursor."""
    seeded = await seed(pg_pool, now=datetime.now(UTC))
    table = await cli(database_url, "jobs", "list")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:5] == ["job", "queue", "state", "kind", "outcome"]
    assert [line.split()[0] for line in lines[1:]] == [
        seeded.running_job,
        seeded.queued_job,
        HOSTILE_JOB.split()[0],
        "job-1",
    ]
    assert_inert(table.stdout)

    page = await cli(database_url, "jobs", "list", "--state", "settled", "--limit", "1", "--json")
    assert page.returncode == 0, page.stderr
    first = json.loads(page.stdout)
    assert [row["job_id"] for row in first["jobs"]] == [HOSTILE_JOB]
    rest = await cli(
        database_url,
        "jobs",
        "list",
        "--state",
        "settled",
        "--after",
        first["next_cursor"],
        "--json",
    )
    assert [row["job_id"] for row in json.loads(rest.stdout)["jobs"]] == ["job-1"]

    bad = await cli(database_url, "jobs", "list", "--after", "garbage")
    assert bad.returncode == 1
    assert "cursor" in bad.stderr
    assert "Traceback" not in bad.stderr


async def test_jobs_show_and_cancel(database_url: str, pg_pool: Pool) -> None:
    """Jobs show prints one job; cancel settles a queued one, records a running one, refuses a settled one."""
    seeded = await seed(pg_pool, now=datetime.now(UTC))
    shown = await cli(database_url, "jobs", "show", "job-1")
    assert shown.returncode == 0, shown.stderr
    assert "mail key: mail-job-1" in shown.stdout
    assert "reply to: alice:s-alice, carol:s-carol" in shown.stdout
    as_json = json.loads((await cli(database_url, "jobs", "show", "job-1", "--json")).stdout)
    assert (as_json["state"], as_json["outcome"]) == ("settled", "completed")
    missing = await cli(database_url, "jobs", "show", "nope")
    assert missing.returncode == 1
    assert "no job has id 'nope'" in missing.stderr

    queued = await cli(database_url, "jobs", "cancel", seeded.queued_job, "--reason", "not needed")
    assert queued.returncode == 0, queued.stderr
    assert "settled cancelled" in queued.stdout
    row = await job_row(pg_pool, seeded.queued_job)
    assert (row["state"], row["outcome"], row["cancel_content"]) == (
        "settled",
        "cancelled",
        "not needed",
    )

    running = await cli(database_url, "jobs", "cancel", seeded.running_job, "--json")
    assert json.loads(running.stdout) == {
        "job_id": seeded.running_job,
        "state": "running",
        "outcome": None,
    }
    assert (await job_row(pg_pool, seeded.running_job))["cancel_requested_at"] is not None

    settled = await cli(database_url, "jobs", "cancel", "job-1")
    assert settled.returncode == 1
    assert "already settled completed" in settled.stdout


async def test_show_tells_one_mails_story_inertly(database_url: str, pg_pool: Pool) -> None:
    """Show KEY prints the job, the replies and their attempts; hostile text stays printable."""
    seeded = await seed(pg_pool, now=datetime.now(UTC))
    story = await cli(database_url, "show", seeded.delivered_key)
    assert story.returncode == 0, story.stderr
    assert "job: job-1" in story.stdout
    assert seeded.held_key in story.stdout
    assert "delivered" in story.stdout
    assert f"attempts of {seeded.delivered_key}" in story.stdout
    assert "HTTP 503 retry after 2s" in story.stdout

    hostile = await cli(database_url, "show", HOSTILE_JOB)
    assert hostile.returncode == 0, hostile.stderr
    assert_inert(hostile.stdout)
    assert "\\x1b[2J\\u202eevil" in hostile.stdout

    as_json = json.loads((await cli(database_url, "show", HOSTILE_JOB, "--json")).stdout)
    assert as_json["replies"][0]["last_error"] == HOSTILE_ERROR
    assert [job["job_id"] for job in as_json["jobs"]] == [HOSTILE_JOB]

    nothing = await cli(database_url, "show", "no-such-key")
    assert nothing.returncode == 1
    assert "nothing found for no-such-key" in nothing.stdout


async def test_console_command_prints_its_url_serves_and_stops(database_url: str) -> None:
    """The console command prints a URL with its token once, serves it, stops on SIGTERM."""
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = await asyncio.create_subprocess_exec(
            BIRDDOG,
            "console",
            "--port",
            "0",
            env=cli_env(database_url),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            found: list[str] = []

            async def announced() -> bool:
                log.seek(0)
                pattern = r"BirdDog console: (http://127\.0\.0\.1:\d+/\?token=\S+)"
                found[:] = re.findall(pattern, log.read())
                return bool(found)

            await eventually(announced, "the console's URL", within_s=60)
            jar = aiohttp.CookieJar(unsafe=True)
            async with aiohttp.ClientSession(cookie_jar=jar) as http, http.get(found[0]) as page:
                assert page.status == 200
                assert "<h1>Overview</h1>" in await page.text()
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        log.seek(0)
        output = log.read()
    token = found[0].rsplit("=", 1)[1]
    assert output.count(token) == 1
    assert "Traceback" not in output
