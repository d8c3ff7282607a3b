"""The local spool for asynchronous code: each call runs the file's method in a worker thread.

:class:`SqliteSpool` is the :class:`~birddog.ports.Spool` (and
:class:`~birddog.ports.SpoolAdmin`) the composition root gives the mail service and the
commands. The event loop never waits on the disk; only one forwarder works a spool at a
time (:meth:`SqliteSpool.forwarding`: an ``fcntl`` lock on ``PATH.lock``, released by the
kernel if its holder dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar, Concatenate, Final, ParamSpec, TypeVar

from birddog.core.spool import DEFAULT_SPOOL_MAX_AGE_S, DEFAULT_SPOOL_MAX_BYTES, Destination
from birddog.ports import Clock
from birddog.sqlite.database import BUSY_TIMEOUT_S
from birddog.sqlite.file import SpoolFile

__all__ = ["LOCK_POLL_S", "SqliteSpool"]

LOCK_POLL_S: Final = 0.05
"""While waiting for another forwarder, look at its lock this often."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _in_thread(
    method: Callable[Concatenate[SpoolFile, _P], _R],
) -> Callable[Concatenate[SqliteSpool, _P], Coroutine[Any, Any, _R]]:
    """``method`` of the spool's file as a method of the spool: run in a worker thread.

    The result keeps ``method``'s parameters, result type, name and docstring, so the
    spool's API is typed and documented once, on :class:`SpoolFile`; its type is the one an
    ``async def`` of that signature has.
    """

    async def call(spool: SqliteSpool, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(method, spool.file, *args, **kwargs)

    functools.update_wrapper(call, method)
    call.__qualname__ = f"SqliteSpool.{method.__name__}"
    return call


class SqliteSpool:
    """The local spool in one SQLite file (see :mod:`birddog.sqlite`), for asynchronous code.

    Every call runs the :class:`SpoolFile` method of the same name in a worker thread, on
    a connection of its own, so the event loop never waits on the disk; the forwarders'
    lock is polled from the loop.

    Args:
        path: the spool file (``BIRDDOG_SPOOL_PATH``); made, with its directory, on the
            first mail. A spool never written to is empty and leaves no file.
        clock: the time mail is spooled at and aged by.
        max_bytes: refuse new mail once the spool's rows take this much.
        max_age_s: mail spooled longer ago is quarantined by the forwarder.
        busy_timeout_s: how long a call waits while another process writes.
        destination: the database this process sends to (None: not known): each mail is
            stamped with it; only mail meant for it is forwarded from here.
    """

    FILE: ClassVar[type[SpoolFile]] = SpoolFile
    """The file class the spool works on (the power-loss test gives it one of its own)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        max_age_s: float = DEFAULT_SPOOL_MAX_AGE_S,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        destination: Destination | None = None,
    ) -> None:
        self.file = self.FILE(
            path,
            clock=clock,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
            busy_timeout_s=busy_timeout_s,
            destination=destination,
        )

    @property
    def path(self) -> Path:
        """The spool file."""
        return self.file.path

    @property
    def destination(self) -> Destination | None:
        """The database this process sends to (None: not known)."""
        return self.file.database.destination

    @property
    def clock(self) -> Clock:
        """The time mail is spooled at and aged by."""
        return self.file.clock

    @property
    def max_bytes(self) -> int:
        """New mail is refused once the spool's rows take this much."""
        return self.file.max_bytes

    @property
    def max_age_s(self) -> float:
        """Mail spooled longer ago is quarantined by the forwarder."""
        return self.file.database.max_age_s

    @property
    def busy_timeout_s(self) -> float:
        """How long a call waits while another process writes."""
        return self.file.database.busy_timeout_s

    @property
    def lock_path(self) -> Path:
        """The forwarders' lock file beside the spool."""
        return self.file.database.lock_path

    def exists(self) -> bool:
        """Whether the spool file is there (a spool never written to has none)."""
        return self.file.exists()

    put = _in_thread(SpoolFile.put)
    waiting = _in_thread(SpoolFile.waiting)
    is_waiting = _in_thread(SpoolFile.is_waiting)
    mail = _in_thread(SpoolFile.mail)
    quarantine_reason = _in_thread(SpoolFile.quarantine_reason)
    delete = _in_thread(SpoolFile.delete)
    quarantine = _in_thread(SpoolFile.quarantine)
    quarantine_aged = _in_thread(SpoolFile.quarantine_aged)
    quarantined = _in_thread(SpoolFile.quarantined)
    requeue = _in_thread(SpoolFile.requeue)
    note_forward = _in_thread(SpoolFile.note_forward)
    note_server = _in_thread(SpoolFile.note_server)
    status = _in_thread(SpoolFile.status)
    pragmas = _in_thread(SpoolFile.pragmas)

    async def has_waiting(self, lane: tuple[str, str] | None = None) -> bool:
        """Whether any mail (of ``lane``) waits; a spool without a file has none.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        return bool(await self.waiting(limit=1, lane=lane))

    @contextlib.asynccontextmanager
    async def forwarding(self, *, wait_s: float = 0.0) -> AsyncIterator[bool]:
        """Hold the spool's forwarder lock for the block, if it can be had within ``wait_s``.

        Args:
            wait_s: how long to wait for another forwarder to finish.

        Yields:
            True when this process holds the lock; False when another one kept it.

        Raises:
            SpoolFailed: the lock file cannot be opened.
        """
        fd = await asyncio.to_thread(self.file.database.open_lock)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_s
            while not _try_lock(fd):
                if loop.time() >= deadline:
                    yield False
                    return
                await asyncio.sleep(LOCK_POLL_S)
            yield True
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
