"""What every resident process shares: backoff, stop-aware sleeps, periodic tasks, signals.

The drain daemon, the worker and start-up (waiting for the database) use these; none of
them knows about the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import structlog

from birddog.core.errors import InvalidSetting, StoreUnavailable

log = structlog.get_logger("birddog.runtime")

DATABASE_ERRORS: tuple[type[BaseException], ...] = (StoreUnavailable,)
"""Errors that mean "the database is away": the daemon backs off and tries again.

Adapters translate every driver error into :class:`StoreUnavailable`, so the app layer
never names the driver's types."""


def database_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean the database is away for now, not that BirdDog is wrong."""
    return DATABASE_ERRORS


def cause_name(exc: BaseException) -> str:
    """The class name of what went wrong beneath a BirdDog error (the driver's, if any)."""
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__


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


STOP_RECHECK_S = 0.1
"""How long :func:`stop_task` waits for a cancelled task before cancelling it again."""


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait up to ``timeout_s`` (None: for ever) for ``event``; True when it is set.

    Use this, never ``asyncio.wait_for(event.wait(), ...)``, in a loop that is stopped
    by cancelling it: on Python 3.11, ``wait_for`` returns normally when the event is set
    in the same moment the task is cancelled, so the cancellation is lost and the loop
    runs on (a process that never exits). ``asyncio.timeout`` never loses one.
    """
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(None if timeout_s is None else max(timeout_s, 0.0)):
            await event.wait()
    return event.is_set()


async def stop_task(task: asyncio.Future[Any] | None, *, insist: bool = True) -> None:
    """Cancel a background task (if any) and wait until it has ended, whatever it did.

    A task may swallow a cancellation (its own ``except BaseException``, or a library's
    ``wait_for`` on Python 3.11); it is then cancelled again every
    :data:`STOP_RECHECK_S` until it ends, so stopping never hangs on it. What it raised
    is dropped: it is being stopped.

    Args:
        task: the task or future (None: nothing to stop).
        insist: False cancels once and waits for as long as the task takes: for work
            whose clean-up must not be cut short (a handler stopping the process group
            it started, within its grace).
    """
    if task is None:
        return
    task.cancel()
    while not task.done():
        await asyncio.wait({task}, timeout=STOP_RECHECK_S if insist else None)
        if not task.done():
            task.cancel()
    if not task.cancelled():
        task.exception()  # retrieved: a task being stopped has nothing left to report


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    await wait_event(stop, seconds)


async def every(
    seconds: float,
    action: Callable[[], Awaitable[Any]],
    *,
    stop: asyncio.Event,
    name: str,
    on_error: Callable[[str], None] | None = None,
    kick: asyncio.Event | None = None,
) -> None:
    """Run ``action`` every ``seconds`` until ``stop``; no failure ends the loop.

    A side task (reaper, heartbeat, gauges) must never take its process down: a failure
    is logged as ``side_task_failed`` with the task and the error class (a warning while
    the database is away, an error otherwise), counted through ``on_error``, and retried
    after a backoff that starts at 0.1 s and doubles up to ``max(seconds, 60)``; the first
    success goes back to the normal interval. Setting ``kick`` ends the pause (a normal
    one or a backoff) at once: the next run starts now.

    Args:
        seconds: the pause between runs.
        action: one run of the task.
        stop: set to end the loop.
        name: the task's name, for logs and metrics.
        on_error: told the task's name after each failure (a metrics counter).
        kick: set (by anyone) to run ``action`` again now; cleared before each run.
    """
    backoff = Backoff(cap_s=max(seconds, SIDE_TASK_BACKOFF_CAP_S))
    while not stop.is_set():
        if kick is not None:
            kick.clear()
        try:
            await action()
        except Exception as exc:  # a side task's failure is logged and retried, never fatal
            wait = backoff.next()
            report = log.warning if isinstance(exc, StoreUnavailable) else log.error
            report("side_task_failed", task=name, error=error_class(exc), retry_in_s=wait)
            if on_error is not None:
                on_error(name)
            await _pause(stop, kick, wait)
            continue
        backoff.reset()
        await _pause(stop, kick, seconds)


async def _pause(stop: asyncio.Event, kick: asyncio.Event | None, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` or ``kick`` is set meanwhile."""
    if kick is None:
        await sleep_unless_stopped(stop, seconds)
        return
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(kick.wait())]
    try:
        # asyncio.wait never swallows a cancellation of this task (unlike wait_for on 3.11).
        await asyncio.wait(waits, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            await stop_task(waiting)


SIDE_TASK_BACKOFF_CAP_S = 60.0
"""A side task failing again and again is retried at least this often."""


def error_class(exc: BaseException) -> str:
    """An error's class for a log line: ``RuntimeError``, ``StoreUnavailable(OSError)``.

    Never the message, which may quote data; a translated driver error names its cause.
    """
    cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else None
    return type(exc).__name__ if cause is None else f"{type(exc).__name__}({type(cause).__name__})"


STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""The signals that ask a process to stop."""


@contextlib.contextmanager
def stop_on_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGTERM or SIGINT while inside; the previous handlers come back after.

    The handlers go on the running loop; on exit each signal gets back the handler it had
    before (:func:`quiet_until_started`'s, Python's default, or a caller's own), so a
    library caller or a test that runs a process in its own loop keeps its handlers.

    Yields:
        The event the signals set.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            # None: a handler not set from Python, which cannot be put back; the default is.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _exit_before_started(signum: int, _frame: object) -> None:
    """SIGTERM while still starting up: nothing was claimed yet, so leave quietly (exit 0)."""
    raise SystemExit(0)


def quiet_until_started() -> None:
    """Make SIGTERM exit 0 quietly until :func:`stop_on_signals` takes over (and after it).

    A process stopped while it is still importing or connecting has claimed nothing, so a
    traceback would only alarm.
    """
    signal.signal(signal.SIGTERM, _exit_before_started)


EventLoopFactory = Callable[[], asyncio.AbstractEventLoop]


def event_loop_factory(choice: str = "auto") -> EventLoopFactory | None:
    """The event loop the drain daemon runs on.

    uvloop's loop runs aiohttp's and asyncpg's socket work in C; the drain daemon spends
    most of its time there (the CPU per delivered reply with each loop: docs/performance.md,
    "CPU per reply: each lever, measured on its own").

    Args:
        choice: ``auto`` (uvloop when it is installed), ``uvloop`` or ``asyncio``.

    Returns:
        A loop factory for :class:`asyncio.Runner`; None for the standard library's loop.

    Raises:
        InvalidSetting: ``uvloop`` was asked for and is not installed.
    """
    if choice == "asyncio":
        return None
    try:
        import uvloop  # noqa: PLC0415 - optional: not on every platform
    except ImportError:
        if choice == "uvloop":
            raise InvalidSetting(
                "BIRDDOG_EVENT_LOOP=uvloop, but uvloop is not installed "
                "(pip install uvloop, or set BIRDDOG_EVENT_LOOP=asyncio)"
            ) from None
        return None
    factory: EventLoopFactory = uvloop.new_event_loop
    return factory
