"""A running ``birddog worker`` serves /metrics and /healthz on its own port, like the daemon."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from birddog.postgres.pool import Pool
from tests.support import enqueue, eventually, free_port, make_job
from tests.support.cli import Daemon, cli


async def test_a_worker_serves_its_metrics_and_health_and_a_taken_port_is_one_line(
    database_url: str, pg_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """/metrics counts the worker's settlements, health --worker asks its /healthz, a taken port exits 2."""
    port = free_port()
    worker = daemons(
        "--handler",
        "tests.acceptance.handlers:echo",
        command="worker",
        BIRDDOG_WORKER_METRICS_PORT=str(port),
    )
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:

        async def metrics() -> str:
            try:
                async with session.get(f"{base}/metrics") as resp:
                    return await resp.text()
            except aiohttp.ClientError:
                return ""

        async def serving() -> bool:
            return "birddog_jobs_claimed_total 0.0" in await metrics()

        await eventually(serving, "the worker's /metrics", within_s=30)
        await enqueue(pg_pool, make_job("m-1"), make_job("m-2", session="s-other"))

        async def counted() -> bool:
            return 'birddog_jobs_settled_total{outcome="completed"} 2.0' in await metrics()

        await eventually(counted, "two settlements counted", within_s=30)
        shown = await metrics()
        assert "birddog_jobs_claimed_total 2.0" in shown
        assert "birddog_handler_seconds_count 2.0" in shown
        assert "birddog_database_up 1.0" in shown
        async with session.get(f"{base}/healthz") as resp:
            assert resp.status == 200
            assert await resp.json() == {"ok": True}

    healthy = await cli(database_url, "health", "--worker", BIRDDOG_WORKER_METRICS_PORT=str(port))
    assert healthy.returncode == 0, healthy.stderr
    assert healthy.stdout.strip() == "worker healthy"

    taken = await cli(
        database_url,
        "worker",
        "--handler",
        "tests.acceptance.handlers:echo",
        BIRDDOG_WORKER_METRICS_PORT=str(port),
    )
    assert taken.returncode == 2, taken.stderr
    assert "Traceback" not in taken.stderr
    [error] = [row for row in taken.stderr.splitlines() if row.startswith("Error: ")]
    assert f"127.0.0.1:{port} is already in use" in error
    assert "BIRDDOG_WORKER_METRICS_PORT" in error
    code, log = worker.terminate()
    assert code == 0, log[-2000:]

    gone = await cli(database_url, "health", "--worker", BIRDDOG_WORKER_METRICS_PORT=str(port))
    assert gone.returncode == 1
    assert f"no worker answers at {base}/healthz" in gone.stderr


async def test_a_worker_cannot_bind_an_address_it_does_not_have(database_url: str) -> None:
    """An unusable metrics host stops the worker at start-up, naming the worker's settings."""
    done = await cli(
        database_url,
        "worker",
        "--handler",
        "tests.acceptance.handlers:echo",
        BIRDDOG_WORKER_METRICS_HOST="192.0.2.1",  # TEST-NET-1: never this host's
        BIRDDOG_WORKER_METRICS_PORT=str(free_port()),
    )
    assert done.returncode == 2, done.stderr
    [error] = [row for row in done.stderr.splitlines() if row.startswith("Error: ")]
    assert "BIRDDOG_WORKER_METRICS_HOST" in error
