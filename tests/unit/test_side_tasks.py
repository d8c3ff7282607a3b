"""Side tasks cannot kill their process: every() logs, counts and retries with backoff."""

from __future__ import annotations

import asyncio

import structlog

from birddog.core.errors import StoreUnavailable
from birddog.metrics import Metrics
from birddog.runtime import every


async def test_a_failing_side_task_is_logged_counted_and_retried_until_it_succeeds() -> None:
    """Two failures (a bug, the database away) are logged and counted; the third run works."""
    stop = asyncio.Event()
    metrics = Metrics()
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def flaky() -> None:
        runs.append(loop.time())
        if len(runs) == 1:
            raise RuntimeError("a bug in the reaper")
        if len(runs) == 2:
            away = StoreUnavailable("database unavailable during reap")
            away.__cause__ = ConnectionResetError("gone")
            raise away
        stop.set()

    with structlog.testing.capture_logs() as events:
        await asyncio.wait_for(
            every(3600, flaky, stop=stop, name="reaper", on_error=metrics.side_task_failed),
            timeout=10,
        )
    assert len(runs) == 3
    failed = [e for e in events if e["event"] == "side_task_failed"]
    assert [(e["task"], e["error"], e["log_level"]) for e in failed] == [
        ("reaper", "RuntimeError", "error"),
        ("reaper", "StoreUnavailable(ConnectionResetError)", "warning"),
    ]
    assert [e["retry_in_s"] for e in failed] == [0.1, 0.2]
    assert runs[2] - runs[1] >= 0.2  # the backoff grew, far below the hour's interval
    text = metrics.exposition().decode()
    assert 'birddog_side_task_errors_total{task="reaper"} 2.0' in text


async def test_a_side_task_that_always_fails_never_ends_and_stops_on_request() -> None:
    """A task failing every time keeps retrying until stop, and never raises."""
    stop = asyncio.Event()
    runs = 0

    async def broken() -> None:
        nonlocal runs
        runs += 1
        if runs == 4:
            stop.set()
        raise ValueError("always")

    with structlog.testing.capture_logs():
        await asyncio.wait_for(every(0.01, broken, stop=stop, name="gauges"), timeout=10)
    assert runs == 4


async def test_a_message_never_reaches_the_log() -> None:
    """Only the error's class is logged: its text may quote data."""
    stop = asyncio.Event()

    async def leaky() -> None:
        stop.set()
        raise RuntimeError("content: the secret plan")

    with structlog.testing.capture_logs() as events:
        await every(1, leaky, stop=stop, name="heartbeat")
    assert "secret plan" not in repr(events)
