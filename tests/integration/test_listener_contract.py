"""The listener ports' contract, on the fakes and the Postgres LISTEN adapters alike.

A test that drives a worker or a daemon with the manual listener sees what a ``LISTEN``
connection gives: a notification is kept until the next wait, one wait takes it, and a
wait without one times out. The process's notices hear a channel per payload, for as long
as a subscription lasts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from birddog.ports import Listener, Notices
from birddog.postgres.notices import PostgresNotices
from birddog.postgres.pool import Pool
from birddog.postgres.wake import WakeListener
from birddog.testing import ManualListener, ManualNotices
from tests.support.waiting import eventually

WAIT_S = 10.0
"""Long enough for a notification to cross a loaded machine; a wake returns at once."""

PORTS = ("Listener", "Notices")
"""The ports these tests hold their fakes and their Postgres adapters to."""


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


@dataclass
class NoticesBackend:
    """The process's notices under test, how to send a notification, and when it listens."""

    name: str
    notices: Notices
    notify: Callable[[str, str], Awaitable[None]]
    listening: Callable[[], Awaitable[None]]


@pytest.fixture
async def memory_notices() -> NoticesBackend:
    """The manual notices, rung by the test."""
    notices = ManualNotices()

    async def notify(channel: str, payload: str) -> None:
        notices.notify(channel, payload)

    async def listening() -> None:
        return None

    return NoticesBackend("memory", notices, notify, listening)


@pytest.fixture
async def postgres_notices(database_url: str, pg_pool: Pool) -> AsyncIterator[NoticesBackend]:
    """PostgresNotices on its own LISTEN connection, notified with pg_notify."""
    notices = PostgresNotices(database_url)

    async def notify(channel: str, payload: str) -> None:
        await pg_pool.execute("SELECT pg_notify($1, $2)", channel, payload)

    async def listening() -> None:
        await eventually(lambda: notices.connected, "the LISTEN connection open", within_s=WAIT_S)

    try:
        yield NoticesBackend("postgres", notices, notify, listening)
    finally:
        await notices.close()


@pytest.fixture(params=["memory_notices", "postgres_notices"])
def notices_backend(request: pytest.FixtureRequest) -> NoticesBackend:
    """Each notices backend in turn."""
    result: NoticesBackend = request.getfixturevalue(request.param)
    return result


async def test_a_subscription_hears_its_payload_and_sets_the_wake(
    notices_backend: NoticesBackend,
) -> None:
    """A notification with the subscribed payload is heard, and the shared wake is set."""
    notices, wake = notices_backend.notices, asyncio.Event()
    with notices.reconnects(asyncio.Event()):  # opens the connection before the subscription
        await notices_backend.listening()
        with notices.subscribe("birddog_jobs", "s-1", wake=wake) as heard:
            await notices_backend.notify("birddog_jobs", "s-1")
            assert await heard.wait(WAIT_S) is True
            assert wake.is_set()


async def test_a_subscription_ignores_other_payloads(notices_backend: NoticesBackend) -> None:
    """Another session's notification does not wake a subscription to one session."""
    notices = notices_backend.notices
    with notices.reconnects(asyncio.Event()):
        await notices_backend.listening()
        with (
            notices.subscribe("birddog_jobs", "s-1") as mine,
            notices.subscribe("birddog_jobs", "s-2") as theirs,
        ):
            await notices_backend.notify("birddog_jobs", "s-2")
            assert await theirs.wait(WAIT_S) is True
            assert await mine.wait(0.05) is False


async def test_reconnects_is_not_set_without_a_reconnect(notices_backend: NoticesBackend) -> None:
    """Holding the reconnects event on a steady connection leaves it unset."""
    with notices_backend.notices.reconnects(asyncio.Event()) as back:
        await notices_backend.listening()
        with notices_backend.notices.subscribe("birddog_mailbox") as heard:
            await notices_backend.notify("birddog_mailbox", "someone")
            assert await heard.wait(WAIT_S) is True
        assert not back.is_set()
