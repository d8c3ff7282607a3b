"""Turns, mails per turn and spawns in numbers: by kind and by how the turn ran.

A ``worker --live`` counts its turns and spawns as ``live`` on its own ``/metrics``; the
drain daemon's ``/metrics`` carries every runner's last hour (an MCP server's live
session has no port of its own), and ``birddog status`` shows the same groups with their
spawns.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from birddog.clock import SystemClock
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import Outcome
from birddog.core.turns import Turn
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from tests.support import enqueue, eventually, free_port, make_job
from tests.support.cli import Daemon, cli

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


async def scrape(url: str) -> str:
    """The text of ``url`` ('' while nothing answers there)."""
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            return await resp.text()
    except aiohttp.ClientError:
        return ""


async def test_a_live_workers_turns_and_spawns_count_as_live(
    database_url: str, pg_pool: Pool, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    """Worker --live bob:s-bob --command: birddog_turns and birddog_spawns say how=live, status too."""
    spawns = tmp_path / "spawns"
    port = free_port()
    daemons(
        "--command",
        f"sh -c 'echo $$ >> {spawns}; rev'",
        "--live",
        "bob:s-bob",
        command="worker",
        BIRDDOG_WORKER_METRICS_PORT=str(port),
    )
    url = f"http://127.0.0.1:{port}/metrics"
    await eventually(lambda: scrape(url), "the live worker's /metrics", within_s=30)
    await enqueue(pg_pool, make_job("m-1"), make_job("m-2", kind="report"))
    spawned = [
        f'birddog_spawns_total{{how="live",kind="{kind}"}} 1.0' for kind in ("task", "report")
    ]
    shown = await eventually(
        lambda: scrape(url),
        "two live turns' spawns counted",
        until=lambda text: all(line in text for line in spawned),
        within_s=30,
    )
    assert 'birddog_turns_total{how="live",kind="task"} 1.0' in shown
    assert 'birddog_turns_total{how="live",kind="report"} 1.0' in shown
    assert 'how="worker"' not in shown
    assert len(spawns.read_text().splitlines()) == 2

    async def settled_turns() -> dict[tuple[str, str], dict[str, int]]:
        status = await cli(database_url, "status", "--json")
        assert status.returncode == 0, status.stderr
        return {(row["kind"], row["how"]): row for row in json.loads(status.stdout)["turns"]}

    turns = await eventually(
        settled_turns, "both turns settled", until=lambda found: len(found) == 2, within_s=30
    )
    assert set(turns) == {("report", "live"), ("task", "live")}
    assert [(row["turns"], row["mails"], row["spawns"]) for row in turns.values()] == [
        (1, 1, 1)
    ] * 2


async def test_the_daemon_exports_every_runners_last_hour_of_turns(
    database_url: str, pg_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """A live session's turn (no spawn) and a worker's batched turn (one spawn), on the daemon's /metrics."""
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    await enqueue(pg_pool, make_job("j-1"), make_job("j-2"), make_job("j-3", session="s-3"))
    batch = await jobs.claim_many(queues=["s-bob"], worker_id="h:1", batch=2, lease_s=30)
    live = await jobs.claim(queues=["s-3"], worker_id="mcp:h:2", lease_s=30)
    assert live is not None
    turn = Turn(host="h", boot_id="b", pid=1, start_ticks=1)
    for claimed in batch:
        await jobs.record_turn(
            job_id=claimed.job.job_id, claim_token=claimed.claim_token, turn=turn
        )
    for claimed in [*batch, live]:
        await jobs.finish(
            job_id=claimed.job.job_id,
            claim_token=claimed.claim_token,
            event=SettleRequested(Outcome.COMPLETED, "done", None),
        )
    port = free_port()
    daemons(BIRDDOG_METRICS_PORT=str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    shown = await eventually(
        lambda: scrape(url),
        "the daemon's turn gauges",
        until=lambda text: "birddog_turns_last_hour{" in text,
        within_s=30,
    )
    assert 'birddog_turns_last_hour{how="live",kind="task"} 1.0' in shown
    assert 'birddog_turn_mails_last_hour{how="live",kind="task"} 1.0' in shown
    assert 'birddog_spawns_last_hour{how="live",kind="task"} 0.0' in shown
    assert 'birddog_turns_last_hour{how="worker",kind="task"} 1.0' in shown
    assert 'birddog_turn_mails_last_hour{how="worker",kind="task"} 2.0' in shown
    assert 'birddog_spawns_last_hour{how="worker",kind="task"} 1.0' in shown
    table = await cli(database_url, "status")
    assert "mails per turn  spawns" in table.stdout, table.stdout
