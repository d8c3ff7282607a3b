"""A stop is the last word: a worker or daemon that stopped never reads as running again.

Each run is the process's own code (:func:`~birddog.processes.worker.run_worker`,
:func:`~birddog.processes.daemon.run_daemon`) in this test's loop, over the test database,
stopped by SIGTERM as soon as its row is there, that is, while its first heartbeat is most
likely still on its way. (That a beat in flight is finished, never cut, before the mark is
shown deterministically by ``tests/unit/test_side_tasks.py``; this is the same rule on the
real processes and database, a hundred times each.) After each stop the test waits until no statement on
``birddog.daemons`` is still running on the server (a statement whose caller was cancelled
may still commit), then looks for a row that reads as running.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from birddog.core.jobs import AgentJobPayload
from birddog.postgres.pool import Pool
from birddog.processes.daemon import run_daemon
from birddog.processes.worker import run_worker
from birddog.settings import Settings
from tests.support import eventually

STOPS = 100
"""Stops of each kind of process."""


async def _never_called(payload: AgentJobPayload) -> str:
    raise AssertionError(f"no job is queued for this worker: {payload}")


def _settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        spool_path=tmp_path / "spool.db",
        metrics_port=0,
        worker_metrics_port=0,
    )


async def _running(pool: Pool, kind: str) -> list[str]:
    """This process's rows of ``kind`` that read as running (``birddog status``, health)."""
    rows = await pool.fetch(
        "SELECT daemon_id FROM birddog.daemons WHERE kind = $1 AND pid = $2 AND stopped_at IS NULL",
        kind,
        os.getpid(),
    )
    return [row["daemon_id"] for row in rows]


async def _statements_on_daemons(pool: Pool) -> int:
    """Statements on birddog.daemons still running on the server, but this one."""
    count: int = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        " AND state = 'active' AND query ILIKE '%birddog.daemons%'"
    )
    return count


@pytest.mark.parametrize("kind", ["worker", "drain"])
async def test_a_hundred_stops_in_a_row_never_leave_one_running(
    kind: str, database_url: str, pg_pool: Pool, tmp_path: Path
) -> None:
    """Stopped a hundred times in a row right after its first beat, it never reads as running."""
    settings = _settings(database_url, tmp_path)
    start: Callable[[], Awaitable[object]]
    if kind == "worker":

        def start() -> Awaitable[object]:
            return run_worker(settings, _never_called, queues=["s-stopped"])
    else:

        def start() -> Awaitable[object]:
            return run_daemon(settings)

    for stop in range(STOPS):
        running = asyncio.ensure_future(start())
        await eventually(
            lambda: _running(pg_pool, kind), f"stop {stop}: the {kind}'s row", within_s=30
        )
        assert not running.done()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(running, timeout=30)
        await eventually(
            lambda: _statements_on_daemons(pg_pool),
            f"stop {stop}: no statement on birddog.daemons still running",
            until=lambda count: count == 0,
            within_s=10,
        )
        assert await _running(pg_pool, kind) == [], f"stop {stop}: the {kind} reads as running"
