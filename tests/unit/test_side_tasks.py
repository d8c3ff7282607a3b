"""Side tasks: every() logs, counts and retries with backoff; ProcessTasks runs them per process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import structlog

from birddog.core.errors import InvalidSetting, StoreUnavailable
from birddog.metrics import Metrics
from birddog.processes.sides import ProcessTasks
from birddog.runtime import every
from tests.support import eventually


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


async def test_a_kick_runs_a_side_task_again_at_once() -> None:
    """Setting the kick ends an hour's pause at once, each time; the loop clears it each run."""
    stop = asyncio.Event()
    kick = asyncio.Event()
    runs: list[bool] = []

    async def forward() -> None:
        runs.append(kick.is_set())
        if len(runs) == 3:
            stop.set()

    task = asyncio.ensure_future(every(3600, forward, stop=stop, name="spool_forward", kick=kick))
    with structlog.testing.capture_logs():
        for count in (1, 2):
            await eventually(lambda: len(runs), "the next run", until=count.__eq__)
            kick.set()
        await asyncio.wait_for(task, timeout=10)
    assert runs == [False, False, False]  # cleared before every run


async def test_a_message_never_reaches_the_log() -> None:
    """Only the error's class is logged: its text may quote data."""
    stop = asyncio.Event()

    async def leaky() -> None:
        stop.set()
        raise RuntimeError("content: the secret plan")

    with structlog.testing.capture_logs() as events:
        await every(1, leaky, stop=stop, name="heartbeat")
    assert "secret plan" not in repr(events)


async def test_a_side_task_that_dies_stops_its_process_loudly() -> None:
    """A task run beside the main loop that raises cancels the loop and raises out of it."""
    stop = asyncio.Event()
    loop_cancelled = asyncio.Event()

    async def listener() -> None:
        raise RuntimeError("the listener broke")

    async def main_loop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            loop_cancelled.set()
            raise

    async def process() -> None:
        async with ProcessTasks(stop=stop) as sides:
            sides.run("listener", listener)
            await asyncio.wait_for(main_loop(), timeout=10)

    with structlog.testing.capture_logs() as events, pytest.raises(ExceptionGroup) as caught:
        await process()
    assert caught.group_contains(RuntimeError, match="the listener broke")
    assert loop_cancelled.is_set()
    died = [e for e in events if e["event"] == "side_task_died"]
    assert [(e["task"], e["error"], e["log_level"]) for e in died] == [
        ("listener", "RuntimeError", "error")
    ]


async def test_a_failing_periodic_side_task_is_counted_and_never_ends_its_process() -> None:
    """A periodic task that keeps failing is counted per failure; the main loop runs on."""
    stop = asyncio.Event()
    metrics = Metrics()
    failed_three_times = asyncio.Event()
    failures: list[str] = []

    def counted(name: str) -> None:
        metrics.side_task_failed(name)
        failures.append(name)
        if len(failures) == 3:
            failed_three_times.set()

    async def reap() -> None:
        raise RuntimeError("a bug in the reaper")

    with structlog.testing.capture_logs():
        async with ProcessTasks(stop=stop, on_error=counted) as sides:
            sides.every("reaper", 0.01, reap)
            await asyncio.wait_for(failed_three_times.wait(), timeout=10)
    assert failures[:3] == ["reaper"] * 3
    assert sides.names == ["reaper"]
    assert 'birddog_side_task_errors_total{task="reaper"}' in metrics.exposition().decode()


async def test_side_tasks_end_with_their_process_and_what_was_held_closes_after() -> None:
    """When the main loop ends the tasks are cancelled first, then what was entered closes."""
    stop = asyncio.Event()
    ran = asyncio.Event()
    order: list[str] = []

    async def heartbeat() -> None:
        ran.set()

    @contextlib.asynccontextmanager
    async def listener() -> AsyncIterator[str]:
        order.append("opened")
        try:
            yield "listening"
        finally:
            order.append(f"closed, heartbeat {'done' if beat.done() else 'running'}")

    async with ProcessTasks(stop=stop) as sides:
        held = await sides.enter(listener())
        sides.every("heartbeat", 3600, heartbeat)
        [beat] = [task for task in asyncio.all_tasks() if task.get_name() == "heartbeat"]
        await asyncio.wait_for(ran.wait(), timeout=10)
    assert held == "listening"
    assert beat.cancelled()
    assert order == ["opened", "closed, heartbeat done"]


async def test_an_error_of_the_main_loop_goes_up_as_it_is() -> None:
    """A setting refused in the main loop reaches the caller unwrapped (one line, exit 2)."""
    stop = asyncio.Event()

    async def heartbeat() -> None:
        pass

    async def process() -> None:
        async with ProcessTasks(stop=stop) as sides:
            sides.every("heartbeat", 3600, heartbeat)
            raise InvalidSetting("port taken")

    with pytest.raises(InvalidSetting, match="port taken"):
        await process()


@pytest.mark.parametrize("body_raises", [False, True])
async def test_the_last_word_comes_after_every_side_task_has_ended(body_raises: bool) -> None:
    """An at_end action runs once, after the periodic heartbeat's last beat, even on an error."""
    stop = asyncio.Event()
    said: list[str] = []
    beating = asyncio.Event()

    async def beat() -> None:
        beating.set()
        try:
            await asyncio.sleep(0.05)  # a beat in flight when the body ends
        finally:
            said.append("beat")

    async def last_word() -> None:
        said.append("stopped")

    with contextlib.suppress(RuntimeError):
        async with ProcessTasks(stop=stop) as sides:
            sides.every("heartbeat", 0.001, beat)
            sides.at_end(last_word)
            await asyncio.wait_for(beating.wait(), timeout=5)
            if body_raises:
                raise RuntimeError("the main loop failed")
    assert said[-1] == "stopped"
    assert said.count("stopped") == 1
    assert "beat" in said


async def test_a_beat_in_flight_at_the_stop_is_finished_never_cut_before_the_last_word() -> None:
    """A finish=True task's run in progress completes (not cancelled), then the last word."""
    stop = asyncio.Event()
    said: list[str] = []
    beating = asyncio.Event()
    may_end = asyncio.Event()

    async def beat() -> None:
        beating.set()
        try:
            await may_end.wait()  # the statement still on its way when the body ends
        except asyncio.CancelledError:
            said.append("cut")
            raise
        said.append("beat")

    async def last_word() -> None:
        said.append("stopped")

    async def body() -> None:
        async with ProcessTasks(stop=stop) as sides:
            sides.every("heartbeat", 3600, beat, finish=True)
            sides.at_end(last_word)
            await asyncio.wait_for(beating.wait(), timeout=5)
            stop.set()

    process = asyncio.ensure_future(body())
    await eventually(stop.is_set, "the body to end", within_s=5)
    assert not process.done()  # the process waits for the beat
    may_end.set()
    await asyncio.wait_for(process, timeout=5)
    assert said == ["beat", "stopped"]
