"""The listener port's contract, run against ManualListener and the Postgres WakeListener.

A test that drives a worker or a daemon with the manual listener sees what a ``LISTEN``
connection gives: a notification is kept until the next wait, one wait takes it, and a
wait without one times out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from birddog.ports import Listener
from birddog.postgres.pool import Pool
from birddog.postgres.wake import WakeListener
from birddog.testing import ManualListener

WAIT_S = 10.0
"""Long enough for a notification to cross a loaded machine; a wake returns at once."""


@dataclass
class Backend:
    """A listener under test and how to notify it."""

    name: str
    listener: Listener
    notify: Callable[[], Awaitable[None]]


@pytest.fixture
async def memory_backend() -> Backend:
    """The manual listener, notified by the test."""
    listener = ManualListener()

    async def notify() -> None:
        listener.notify()

    return Backend("memory", listener, notify)


@pytest.fixture
async def postgres_backend(database_url: str, pg_pool: Pool) -> AsyncIterator[Backend]:
    """LISTEN birddog_wake on a dedicated connection, notified with pg_notify."""

    async def notify() -> None:
        await pg_pool.execute("SELECT pg_notify('birddog_wake', '')")

    async with WakeListener(database_url) as listener:
        yield Backend("postgres", listener, notify)


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    result: Backend = request.getfixturevalue(request.param)
    return result


async def test_a_wait_without_a_notification_times_out(backend: Backend) -> None:
    """Nothing notified: the wait returns False once its time has passed."""
    assert await backend.listener.wait(0.05) is False


async def test_a_notification_before_the_wait_is_kept_and_taken_once(backend: Backend) -> None:
    """A notification sent while nobody waits wakes the next wait, and only that one."""
    await backend.notify()
    assert await backend.listener.wait(WAIT_S) is True
    assert await backend.listener.wait(0.05) is False
