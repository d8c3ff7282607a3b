"""A loop stopped by cancelling it always stops, even when its event is set in that moment.

On Python 3.11, ``asyncio.wait_for(event.wait(), t)`` returns normally when the event was
set just as its task was cancelled: the cancellation is lost, the loop goes round again
and whoever waits for it to end waits for ever (a ``birddog ask`` that printed its answer
and never exited). :func:`wait_event` never loses one, and :func:`stop_task` ends even a
task that does.
"""

from __future__ import annotations

import asyncio

import pytest

from birddog.runtime import stop_task, wait_event


async def _set_as_cancelled(event: asyncio.Event, task: asyncio.Task[None]) -> None:
    """Set ``event``, let its waiter finish, then cancel ``task`` before it runs again."""
    event.set()
    for _ in range(2):
        await asyncio.sleep(0)
    task.cancel()
    event.set()


async def test_a_loop_on_wait_event_ends_when_cancelled_as_its_event_is_set() -> None:
    event = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            await wait_event(event, 10)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await _set_as_cancelled(event, task)
    done, _ = await asyncio.wait({task}, timeout=2)
    assert task in done, f"still running after {rounds} rounds"
    assert task.cancelled()


async def test_a_loop_that_loses_a_cancellation_is_stopped_all_the_same() -> None:
    """The very race wait_for loses on 3.11 (its cancellation swallowed), stopped by stop_task."""
    event = asyncio.Event()
    swallowed = 0

    async def loop() -> None:
        nonlocal swallowed
        while True:
            try:
                await event.wait()
            except asyncio.CancelledError:
                swallowed += 1  # what wait_for does in the race: the loop goes on
                if swallowed > 1:
                    raise
            event.clear()
            await asyncio.sleep(0.01)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await stop_task(task)
    assert task.done()
    assert swallowed == 2


async def test_a_task_that_cleans_up_is_not_cut_short_when_not_insisted() -> None:
    cleaned = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.3)  # longer than stop_task's recheck
            cleaned.set()

    task = asyncio.create_task(work())
    await asyncio.sleep(0)
    await stop_task(task, insist=False)
    assert cleaned.is_set()


async def test_wait_event_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0) is True
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await wait_event(asyncio.Event(), None)  # None: for ever
