"""The worker's /metrics and /healthz over real PostgreSQL: counts, handler times, queue gauges."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest
from asyncpg import Pool
from prometheus_client.parser import text_string_to_metric_families

from birddog import AgentJobPayload
from birddog.clock import SystemClock
from birddog.core.errors import StoreUnavailable
from birddog.metrics import WorkerMetrics, start_server
from birddog.postgres.jobs import PostgresJobs
from birddog.processes.worker import observe_queues
from birddog.testing import FrozenClock, ManualListener
from birddog.worker import Worker
from tests.support import T0, enqueue, eventually, make_job


async def handler(payload: AgentJobPayload) -> str:
    """Answer, fail or hang, as the command id says."""
    if "fail" in payload.command_fact_id:
        raise RuntimeError("no")
    if "hang" in payload.command_fact_id:
        await asyncio.Event().wait()
    return "done"


@pytest.fixture
async def served() -> AsyncIterator[tuple[WorkerMetrics, str]]:
    """Worker metrics served on a free port of 127.0.0.1, /healthz reading their health."""
    metrics = WorkerMetrics()
    runner = await start_server(metrics, host="127.0.0.1", port=0, healthy=lambda: metrics.healthy)
    try:
        yield metrics, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, by name and labels."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as resp:
        text = await resp.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def health(base: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/healthz") as resp:
        return resp.status


async def test_counts_move_as_jobs_settle_and_the_histogram_observes_each_run(
    pg_pool: Pool, served: tuple[WorkerMetrics, str]
) -> None:
    """Claims, settlements by outcome, a requeue and every handler run show in /metrics."""
    metrics, base = served
    before = await scrape(base)
    assert before[("birddog_jobs_claimed_total", ())] == 0
    assert before[("birddog_handler_seconds_count", ())] == 0
    await enqueue(
        pg_pool,
        *(make_job(job_id, session=f"q-{job_id}") for job_id in ("ok-1", "ok-2", "fail-1")),
        make_job("hang-1", session="q-hang", max_recoveries=1),
    )
    worker = Worker(
        jobs=PostgresJobs(pg_pool, clock=SystemClock()),
        handler=handler,
        listener=ManualListener(max_wait_s=0.05),
        lease_s=5,
        handler_timeout_s=0.2,
        metrics=metrics,
    )
    await worker.run(once=True)
    after = await scrape(base)
    # The hanging job timed out twice: given back once (its budget), then interrupted.
    assert after[("birddog_jobs_claimed_total", ())] == 5
    assert after[("birddog_jobs_requeued_total", ())] == 1
    settled = {
        dict(labels)["outcome"]: value
        for (name, labels), value in after.items()
        if name == "birddog_jobs_settled_total"
    }
    assert settled == {"completed": 2, "failed": 1, "interrupted": 1}
    assert after[("birddog_handler_seconds_count", ())] == 5
    assert after[("birddog_handler_seconds_sum", ())] >= 2 * 0.2
    assert after[("birddog_database_up", ())] == 1
    assert await health(base) == 200


async def test_the_gauges_read_the_queues_the_worker_serves(
    pg_pool: Pool, served: tuple[WorkerMetrics, str]
) -> None:
    """Queued jobs and the oldest one's age count only the served queues, never the reserved."""
    metrics, base = served
    clock = FrozenClock(T0)
    await enqueue(pg_pool, make_job("a-1", session="a"), created_at=T0 - timedelta(seconds=120))
    await enqueue(pg_pool, make_job("a-2", session="a"), created_at=T0 - timedelta(seconds=30))
    await enqueue(pg_pool, make_job("b-1", session="b"), created_at=T0 - timedelta(seconds=600))
    await enqueue(
        pg_pool, make_job("probe", session="birddog:probe:x"), created_at=T0 - timedelta(days=1)
    )
    jobs = PostgresJobs(pg_pool, clock=clock)

    await observe_queues(jobs, metrics, queues=["a"], clock=clock)
    shown = await scrape(base)
    assert shown[("birddog_jobs_queued", ())] == 2
    assert shown[("birddog_oldest_queued_job_age_seconds", ())] == 120

    await observe_queues(jobs, metrics, queues=None, clock=clock)
    shown = await scrape(base)
    assert shown[("birddog_jobs_queued", ())] == 3
    assert shown[("birddog_oldest_queued_job_age_seconds", ())] == 600

    claimed = await jobs.claim(queues=["b"])
    assert claimed is not None
    await observe_queues(jobs, metrics, queues=["b", "nobody"], clock=clock)
    shown = await scrape(base)
    assert shown[("birddog_jobs_queued", ())] == 0
    assert shown[("birddog_oldest_queued_job_age_seconds", ())] == 0


async def _cut(server_dsn: str, database: str, *, allow: bool) -> None:
    """Refuse (and drop) or allow again every connection to ``database``."""
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                database,
            )
    finally:
        await conn.close()


async def test_healthz_is_503_while_the_database_is_away(
    pg_pool: Pool,
    database_url: str,
    postgres_server_dsn: str,
    served: tuple[WorkerMetrics, str],
) -> None:
    """A running worker's /healthz and database gauge go down with the database and come back."""
    metrics, base = served
    database = urlsplit(database_url).path.lstrip("/")
    stop = asyncio.Event()
    worker = Worker(
        jobs=PostgresJobs(pg_pool, clock=SystemClock()),
        handler=handler,
        listener=ManualListener(max_wait_s=0.05),
        metrics=metrics,
        stop=stop,
    )
    running = asyncio.create_task(worker.run())
    statuses: list[int] = []
    try:
        await eventually(
            lambda: metrics.registry.get_sample_value("birddog_database_up") == 1,
            "the first claim",
        )
        assert await health(base) == 200
        await _cut(postgres_server_dsn, database, allow=False)
        try:
            await eventually(lambda: not metrics.healthy, "the worker to see the database go")
            statuses.append(await health(base))
            assert (await scrape(base))[("birddog_database_up", ())] == 0
            with pytest.raises(StoreUnavailable):
                await observe_queues(
                    PostgresJobs(pg_pool, clock=SystemClock()),
                    metrics,
                    queues=None,
                    clock=FrozenClock(T0),
                )
        finally:
            await _cut(postgres_server_dsn, database, allow=True)
        await eventually(lambda: metrics.healthy, "the worker to see it back", within_s=20)
        statuses.append(await health(base))
    finally:
        stop.set()
        await running
    assert statuses == [503, 200]
