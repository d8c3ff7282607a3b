"""``birddog check`` sees the whole system: replies, jobs, leases, holds and the daemon."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from birddog import AgentWork, agent_job, decode_agent_job
from birddog.clock import SystemClock
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import claim, enqueue, eventually, make_job
from tests.support.cli import Daemon, cli
from tests.support.stacks import Harness, fan_out

RELAXED = {
    "BIRDDOG_CHECK_JOB_QUEUED_S": "999999",
    "BIRDDOG_CHECK_LEASE_OVERDUE_S": "999999",
    "BIRDDOG_CHECK_HOLD_S": "999999",
    "BIRDDOG_CHECK_DAEMON_S": "999999",
}
"""Thresholds no seeded problem reaches."""


async def seed_problems(pool: Pool, harness: Harness) -> None:
    """A job nobody claims, a job whose worker vanished, a long hold, replies with no daemon."""
    now = datetime.now(UTC)
    await enqueue(
        pool, make_job("unserved", session="s-nobody"), created_at=now - timedelta(hours=3)
    )
    await enqueue(pool, make_job("orphan", session="s-orphan"))
    jobs = PostgresJobs(pool, clock=SystemClock())
    await claim(jobs, queues=["s-orphan"], lease_s=1, worker_id="gone:1")
    await pool.execute(
        "UPDATE birddog.jobs SET lease_expires_at = $1 WHERE job_id = 'orphan'",
        now - timedelta(minutes=5),
    )
    routes = PostgresRoutes(pool, cache_s=0, clock=SystemClock())
    await routes.add("frozen", "http://127.0.0.1:9/inbox")
    await routes.hold("frozen")
    await pool.execute(
        "UPDATE birddog.routes SET held_at = $1 WHERE agent_id = 'frozen'", now - timedelta(days=2)
    )
    await fan_out(harness, 2, ["frozen"], prefix="waits")
    await fan_out(harness, 3, ["nobody-drains"], prefix="due")
    await pool.execute(
        "INSERT INTO birddog.daemons (daemon_id, kind, host, pid, seen_at) "
        "VALUES ('drain:old:1', 'drain', 'old', 1, $1)",
        now - timedelta(minutes=10),
    )


async def test_check_names_every_kind_of_problem_one_line_each(
    database_url: str, pg_pool: Pool, harness: Harness
) -> None:
    """Queued too long, past its lease, held too long, due with no daemon: four lines, exit 1."""
    await seed_problems(pg_pool, harness)
    checked = await cli(database_url, "check")
    assert checked.returncode == 1, checked.stderr
    lines = checked.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "job queued too long",
        "job running past its lease",
        "held too long",
        "replies due and no daemon running for 2m 00s",
    ]
    assert "unserved (task) in queue s-nobody" in lines[0]
    assert "orphan in queue s-orphan on gone:1" in lines[1]
    assert "frozen since" in lines[2]
    assert "2 replies waiting" in lines[2]
    assert "3 due" in lines[3]
    assert "the last daemon beat at" in lines[3]
    assert "vanished without stopping" in lines[3]

    as_json = await cli(database_url, "check", "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["ok"] is False
    assert [p["check"] for p in report["problems"]] == [
        "job_queued",
        "job_overdue",
        "hold",
        "no_daemon",
    ]
    assert report["problems"][0]["job_id"] == "unserved"
    assert report["problems"][3]["due"] == 3

    relaxed = await cli(database_url, "check", variables=RELAXED)
    assert (relaxed.returncode, relaxed.stdout.strip()) == (0, "ok"), relaxed.stdout
    flags = await cli(
        database_url, "check", "--job-queued-s", "999999", "--lease-overdue-s", "999999",
        "--hold-s", "999999", "--daemon-s", "999999", "--json",
    )  # fmt: skip
    assert json.loads(flags.stdout) == {"ok": True, "problems": []}


async def test_only_interactive_mail_is_stale(database_url: str, pg_pool: Pool) -> None:
    """A task and an escalation queued past BIRDDOG_STALE_INTERACTIVE_S are flagged; a report or receipt is not."""
    long_ago = datetime.now(UTC) - timedelta(minutes=10)
    await digest_in_twelve_hours(pg_pool, "bob")
    for kind in ("task", "escalation", "report", "receipt"):
        mail = make_job(f"old-{kind}", session=f"s-{kind}")
        job = agent_job(
            AgentWork(job_id=mail.job_id, session_id=f"s-{kind}", command_fact_id=kind),
            decode_agent_job(mail).mail,
            kind=kind,
        )
        await enqueue(pg_pool, job, created_at=long_ago)
    others = {k: v for k, v in RELAXED.items() if k != "BIRDDOG_CHECK_JOB_QUEUED_S"}
    checked = await cli(
        database_url, "check", "--json", variables={**others, "BIRDDOG_STALE_INTERACTIVE_S": "300"}
    )
    flagged = [p["job_id"] for p in json.loads(checked.stdout)["problems"]]
    assert (checked.returncode, flagged) == (1, ["old-escalation", "old-task"])
    relaxed = await cli(
        database_url, "check", variables={**others, "BIRDDOG_STALE_INTERACTIVE_S": "3600"}
    )
    assert relaxed.stdout.strip() == "ok", relaxed.stdout


async def digest_in_twelve_hours(pool: Pool, agent_id: str) -> None:
    """A mailbox route for ``agent_id`` whose daily digest is twelve hours from now."""
    at = (datetime.now(UTC) + timedelta(hours=12)).time().replace(second=0, microsecond=0)
    await pool.execute(
        "INSERT INTO birddog.routes (agent_id, kind, digest_daily) VALUES ($1, 'mailbox', $2)",
        agent_id,
        at,
    )


async def test_informational_mail_is_stale_only_once_its_digest_is_overdue(
    database_url: str, pg_pool: Pool
) -> None:
    """An hour-old report waiting for its digest is ok; past its digest by the threshold, flagged."""
    await digest_in_twelve_hours(pg_pool, "bob")
    mail = make_job("old-report")
    job = agent_job(
        AgentWork(job_id=mail.job_id, session_id="s-bob", command_fact_id="report"),
        decode_agent_job(mail).mail,
        kind="report",
    )
    await enqueue(pg_pool, job, created_at=datetime.now(UTC) - timedelta(hours=1))
    others = {k: v for k, v in RELAXED.items() if k != "BIRDDOG_CHECK_JOB_QUEUED_S"}
    stale = {**others, "BIRDDOG_STALE_INTERACTIVE_S": "300"}
    waiting = await cli(database_url, "check", variables=stale)
    assert (waiting.returncode, waiting.stdout.strip()) == (0, "ok"), waiting.stdout
    await pg_pool.execute("UPDATE birddog.jobs SET digest_at = now() - interval '4 minutes'")
    due = await cli(database_url, "check", variables=stale)
    assert (due.returncode, due.stdout.strip()) == (0, "ok"), due.stdout  # due, not overdue
    await pg_pool.execute("UPDATE birddog.jobs SET digest_at = now() - interval '10 minutes'")
    overdue = await cli(database_url, "check", variables=stale)
    assert overdue.returncode == 1, overdue.stdout
    [line] = overdue.stdout.strip().splitlines()
    assert line.startswith("job queued too long: old-report (report) in queue s-bob"), line
    assert ", its digest due " in line


async def test_a_daemon_that_beat_lately_silences_the_no_daemon_check(
    database_url: str, pg_pool: Pool, harness: Harness
) -> None:
    """Due replies are not a problem while a drain daemon beat within the threshold."""
    await fan_out(harness, 1, ["nobody-drains"], prefix="due")
    alarmed = await cli(database_url, "check")
    assert alarmed.returncode == 1
    assert "no daemon running" in alarmed.stdout
    assert "no daemon ever ran on this database" in alarmed.stdout
    await pg_pool.execute(
        "INSERT INTO birddog.daemons (daemon_id, kind, host, pid) "
        "VALUES ('drain:here:1', 'drain', 'here', 1)"
    )
    quiet = await cli(database_url, "check")
    assert (quiet.returncode, quiet.stdout.strip()) == (0, "ok")


async def test_check_tells_a_daemon_that_stopped_cleanly_from_one_that_vanished(
    database_url: str, pg_pool: Pool, harness: Harness, daemons: Callable[..., Daemon]
) -> None:
    """After SIGTERM the daemon's row says when it stopped; check says so, not "never"."""
    daemon = daemons()
    await eventually(harness.drain_daemons, "the daemon's first beat", until=lambda n: n == 1)
    code, log = daemon.terminate()
    assert code == 0, log[-2000:]
    stopped_at = await pg_pool.fetchval(
        "SELECT stopped_at FROM birddog.daemons WHERE kind = 'drain'"
    )
    assert stopped_at is not None
    await fan_out(harness, 1, ["nobody-drains"], prefix="due")
    checked = await cli(database_url, "check")
    assert checked.returncode == 1
    [line] = checked.stdout.splitlines()
    assert line.startswith("replies due and no daemon running for 2m 00s: 1 due"), line
    assert f"the last daemon stopped at {stopped_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z" in line
    status = await cli(database_url, "status", "--json")
    assert json.loads(status.stdout)["daemons"] == []
