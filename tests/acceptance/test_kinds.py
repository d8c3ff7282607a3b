"""Kinds from the command line: ``send --kind``, ``ask --kind``, and where the kind shows."""

from __future__ import annotations

import json
from pathlib import Path

from birddog import Job
from birddog.postgres.jobs import enqueue_accepted_job
from birddog.postgres.pool import Pool
from tests.support.cli import cli

TYPESCRIPT_JOB = Path(__file__).resolve().parents[1] / "fixtures" / "typescript" / "agent-job.json"
SEND = ["send", "--allow-unknown", "--to", "bob:s-bob", "--from", "alice:s-alice"]


async def test_send_kind_is_stored_beside_the_mail_and_shown(
    database_url: str, pg_pool: Pool
) -> None:
    """A send with --kind report keeps the kind in the job, not the mail; jobs list and show name it."""
    sent = await cli(database_url, *SEND, "--key", "k-report", "--kind", "report", "--content", "x")
    assert sent.returncode == 0, sent.stderr
    plain = await cli(database_url, *SEND, "--key", "k-task", "--content", "y")
    assert plain.returncode == 0, plain.stderr
    rows = await pg_pool.fetch(
        "SELECT payload #>> '{mail,key}' AS key, kind, payload -> 'mail' ? 'kind' AS in_mail "
        "FROM birddog.jobs ORDER BY key"
    )
    assert [(r["key"], r["kind"], r["in_mail"]) for r in rows] == [
        ("k-report", "report", False),
        ("k-task", "task", False),
    ]
    listed = await cli(database_url, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    kinds = {row["mail_key"]: row["kind"] for row in json.loads(listed.stdout)["jobs"]}
    assert kinds == {"k-report": "report", "k-task": "task"}
    story = await cli(database_url, "show", "k-report")
    assert story.returncode == 0, story.stderr
    assert any(line.split() == ["kind:", "report"] for line in story.stdout.splitlines()), (
        story.stdout
    )


async def test_an_unknown_kind_is_a_one_line_error_and_nothing_is_written(
    database_url: str, pg_pool: Pool
) -> None:
    """Send --kind urgent exits 2 with one line naming the four kinds; no job is stored."""
    refused = await cli(database_url, *SEND, "--kind", "urgent", "--content", "x")
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "task, escalation, report, receipt" in refused.stderr
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 0


async def test_ask_with_an_informational_kind_is_refused_before_anything_is_written(
    database_url: str, pg_pool: Pool
) -> None:
    """Ask --kind report exits 3 (nothing asked) saying an ask is task or escalation."""
    refused = await cli(
        database_url, "ask", "--to", "bob:s-bob", "--from", "alice:s-alice", "--kind", "report", "q"
    )
    assert refused.returncode == 3
    assert "task or escalation" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 0


async def test_a_typescript_job_is_a_task_and_its_payload_is_kept_as_sent(pg_pool: Pool) -> None:
    """The TypeScript BirdDog's job (no kind anywhere) is stored as a task, its payload unchanged."""
    data = json.loads(TYPESCRIPT_JOB.read_text(encoding="utf-8"))
    async with pg_pool.acquire() as conn:
        assert await enqueue_accepted_job(conn, Job.model_validate(data))
    row = await pg_pool.fetchrow("SELECT kind, payload::text AS payload FROM birddog.jobs")
    assert row is not None
    assert row["kind"] == "task"
    assert json.loads(row["payload"]) == data["payload"]


async def test_the_same_key_with_another_kind_is_a_conflict(database_url: str) -> None:
    """A mail sent again under its key with another kind is refused as a conflict."""
    first = await cli(database_url, *SEND, "--key", "k-1", "--kind", "report", "--content", "x")
    assert first.returncode == 0, first.stderr
    again = await cli(database_url, *SEND, "--key", "k-1", "--kind", "report", "--content", "x")
    assert again.stdout.startswith("already sent"), again.stderr
    other = await cli(database_url, *SEND, "--key", "k-1", "--kind", "task", "--content", "x")
    assert other.returncode == 1
    assert "already exists with a different" in other.stderr
