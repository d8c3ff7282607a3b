"""A failing side task never takes the daemon down: it is logged, counted and retried."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import aiohttp

from birddog.postgres.pool import Pool
from tests.support import eventually, free_port
from tests.support.cli import Daemon
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness, fan_out

REAPER_ERRORS = re.compile(r'^birddog_side_task_errors_total\{task="reaper"\} (\d+)', re.M)


async def test_the_daemon_outlives_a_reaper_that_keeps_failing(
    daemons: Callable[..., Daemon], harness: Harness, inbox: TestInbox, pg_pool: Pool
) -> None:
    """With the jobs table gone the reaper fails and retries; delivery goes on; exit 0."""
    port = free_port()
    daemon = daemons(BIRDDOG_METRICS_PORT=str(port), BIRDDOG_JOB_LEASE_S="2")

    async def ready() -> bool:
        return await harness.drain_daemons() == 1

    await eventually(ready, "the daemon", within_s=60)
    await pg_pool.execute("ALTER TABLE birddog.jobs RENAME TO jobs_elsewhere")
    try:

        async def reaper_failed_twice() -> bool:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/metrics") as resp,
            ):
                found = REAPER_ERRORS.search(await resp.text())
            return found is not None and int(found.group(1)) >= 2

        await eventually(reaper_failed_twice, "two reaper failures", within_s=60)
    finally:
        await pg_pool.execute("ALTER TABLE birddog.jobs_elsewhere RENAME TO jobs")
    await harness.add_agent("alice")
    keys = await fan_out(harness, 1, ["alice"])

    async def delivered() -> bool:
        return await harness.receipts() == len(keys)

    await eventually(delivered, "the reply delivered", within_s=60)
    assert daemon.proc.poll() is None
    code, text = daemon.terminate()
    assert code == 0, text[-2000:]
    failures = [
        event
        for event in (json.loads(line) for line in text.splitlines() if line.startswith("{"))
        if event["event"] == "side_task_failed"
    ]
    assert failures
    assert {(e["task"], e["error"]) for e in failures} >= {("reaper", "SchemaMissing")}
