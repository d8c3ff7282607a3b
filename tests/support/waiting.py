"""Waiting on work in another task or process: one poll with a deadline that fails loudly."""

from __future__ import annotations

import asyncio
import inspect
import reprlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

FIRST_PAUSE_S = 0.001
"""The first pause between two looks; it doubles up to ``every_s``."""

_shown = reprlib.Repr()  # what a failure shows of the last value: enough, never megabytes
_shown.maxstring = _shown.maxother = 300
_shown.maxlist = _shown.maxdict = _shown.maxset = 12


@overload
async def eventually(
    probe: Callable[[], Awaitable[T]],
    what: str = ...,
    *,
    until: Callable[[T], object] = ...,
    within_s: float = ...,
    every_s: float = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], Awaitable[T] | T],
    what: str = ...,
    *,
    until: Callable[[T], object] = ...,
    within_s: float = ...,
    every_s: float = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
) -> T: ...


async def eventually(
    probe: Callable[[], Any],
    what: str = "",
    *,
    until: Callable[[Any], object] = bool,
    within_s: float = 10.0,
    every_s: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """Look at ``probe()`` until ``until`` holds for what it returns; return that value.

    The probe may be a plain function or a coroutine function. The first looks come fast
    (1 ms apart, doubling) and then every ``every_s``, so a condition that holds at once
    costs nothing and a long wait does not busy the machine. When ``within_s`` runs out
    the test fails with ``what`` and the last value seen (or the last error ignored), so
    a timeout says where things stood instead of falling through.

    Args:
        probe: what to look at, e.g. ``lambda: job_row(pool, "j1")``.
        what: what the test waits for, for the failure message.
        until: when the value is the awaited one; by default, when it is truthy.
        within_s: how long to keep looking.
        every_s: the longest pause between two looks.
        ignoring: errors the probe may raise meanwhile (a database restarting): looked
            at again, and shown as the last thing seen if time runs out.

    Returns:
        The first value for which ``until`` held.

    Raises:
        AssertionError: ``until`` never held within ``within_s``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    pause_s = min(FIRST_PAUSE_S, every_s)
    last: object = "nothing (the probe never answered)"
    while True:
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            last = exc
        else:
            if until(value):
                return value
            last = value
        if loop.time() >= deadline:
            waited = f" waiting for {what}" if what else ""
            raise AssertionError(
                f"timed out after {within_s:g} s{waited}; last saw {_shown.repr(last)}"
            )
        await asyncio.sleep(min(pause_s, max(0.0, deadline - loop.time())))
        pause_s = min(pause_s * 2, every_s)
