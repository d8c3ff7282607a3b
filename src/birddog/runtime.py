"""What every resident process shares: backoff, stop-aware sleeps, periodic tasks, signals.

The drain daemon, the worker and start-up (waiting for the database) use these; none of
them knows about the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from birddog.core.errors import StoreUnavailable

log = structlog.get_logger("birddog.runtime")

DATABASE_ERRORS: tuple[type[BaseException], ...] = (StoreUnavailable,)
"""Errors that mean "the database is away": the daemon backs off and tries again.

Adapters translate every driver error into :class:`StoreUnavailable`, so the app layer
never names the driver's types."""


def database_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean the database is away for now, not that BirdDog is wrong."""
    return DATABASE_ERRORS


class Backoff:
    """Exponential backoff from 0.1 s to ``cap_s``, reset on success."""

    def __init__(self, cap_s: float = 5.0) -> None:
        self.cap_s = cap_s
        self.current = 0.0

    def next(self) -> float:
        """The next wait."""
        self.current = min(self.cap_s, max(0.1, self.current * 2))
        return self.current

    def reset(self) -> None:
        """Forget past failures."""
        self.current = 0.0


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def every(
    seconds: float, action: Callable[[], Awaitable[Any]], *, stop: asyncio.Event, name: str
) -> None:
    """Run ``action`` every ``seconds`` until ``stop``; a failing action is logged, not fatal.

    Database errors are expected while the database restarts; anything else is a bug and
    propagates, stopping the daemon loudly.
    """
    errors = database_errors()
    while not stop.is_set():
        try:
            await action()
        except errors as exc:
            log.warning("side_task_database_error", task=name, error=type(exc).__name__)
        await sleep_unless_stopped(stop, seconds)


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (installed on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _exit_before_started(signum: int, _frame: object) -> None:
    """SIGTERM while still starting up: nothing was claimed yet, so leave quietly (exit 0)."""
    raise SystemExit(0)


def quiet_until_started() -> None:
    """Make SIGTERM exit 0 quietly until :func:`stop_on_signals` takes over.

    A process stopped while it is still importing or connecting has claimed nothing, so a
    traceback would only alarm.
    """
    signal.signal(signal.SIGTERM, _exit_before_started)
