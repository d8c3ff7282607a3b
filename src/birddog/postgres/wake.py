"""Wakes in PostgreSQL: a singleton row that says when a drainer looks again, and NOTIFY.

The wake row holds the time the last drainer to go to sleep will look again on its own.

- A **settlement** (any writer that owes a drain, at time ``t``), inside its own
  transaction, takes the wake lock *shared*, then: if the row says later than ``t``, moves
  it to ``t`` and sends ``NOTIFY birddog_wake`` (delivered at commit, so never before the
  rows that caused it are visible); otherwise does nothing, because some drainer is awake
  or looks again by ``t``. Most settlements therefore neither write the row nor notify,
  and do not serialise on either.
- A **drainer going to sleep** until ``T`` takes the wake lock *exclusive* (which waits for
  the settlements in flight to commit), writes ``T``, commits, and only then looks for due
  rows once more before it sleeps. A settlement that committed before the lock was
  granted is visible to that look; a later one sees ``T`` and notifies when it is earlier.

A drainer that dies while awake leaves a wake in the past behind: settlements then stay
quiet, and the other drainers find the work at their own next look (a due row, a
notification, or the backstop timer, ``BIRDDOG_BACKSTOP_S``): late, but bounded.

:class:`WakeListener` holds a dedicated connection doing ``LISTEN``: a notification is a
hint, the drain always re-queries.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import asyncpg
import structlog

from birddog.postgres.pool import Connection, Pool, store_errors
from birddog.postgres.sql import queries
from birddog.runtime import wait_event

__all__ = ["WAKE_CHANNEL", "PostgresWake", "WakeListener", "schedule_wake_on"]

WAKE_CHANNEL = "birddog_wake"
"""The channel a drain listens on."""

log = structlog.get_logger("birddog.wake")


async def schedule_wake_on(conn: Connection, at: datetime) -> None:
    """Make sure a drainer looks by ``at``, inside the caller's transaction.

    The settlement side of the wake protocol: inside a transaction, takes the wake lock
    shared (held until the transaction ends, so call this last in it), then moves the wake
    earlier and notifies only when the last drainer to sleep would look later than
    ``at``. (:func:`birddog.postgres.outbox.insert_rows` does both for a fan-out.)

    Args:
        conn: an asyncpg connection, normally inside the transaction that wrote the rows
            (outside one, the rows must already be committed).
        at: when a drain is owed.
    """
    with store_errors("schedule wake"):
        if conn.is_in_transaction():
            # Outside a transaction the rows are committed already: any drainer that
            # goes to sleep from now on sees them at its last look, so no lock is needed.
            await conn.execute(queries["wake_guard"])
        await conn.execute(queries["wake_schedule"], at, [])


class PostgresWake:
    """The wake scheduler port over an asyncpg pool.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def schedule_wake(self, *, at: datetime) -> None:
        """Make sure a drain runs at ``at`` or earlier (NOTIFY only when it moves earlier).

        For rows already committed (a drainer's retries, a replay, a release).
        """
        with store_errors("schedule wake"):
            async with self.pool.acquire() as conn:
                await schedule_wake_on(conn, at)

    async def going_to_sleep(self, *, until: datetime, now: datetime) -> datetime:
        """The drainer side of the wake protocol: record when it looks again.

        Waits for settlements in flight to commit (the exclusive wake lock), writes
        ``until`` (or an armed wake between ``now`` and it), and commits. The caller must
        then look for due rows once more before it sleeps.

        Args:
            until: when the drainer would look again on its own.
            now: the drainer's clock.

        Returns:
            When to look again.
        """
        with store_errors("going to sleep"):
            at: datetime = await self.pool.fetchval(queries["wake_sleep"], until, now)
        return at

    async def wake_at(self) -> datetime | None:
        """The armed wake time, or None when no drain is owed by a wake."""
        with store_errors("read wake"):
            at: datetime | None = await self.pool.fetchval(queries["wake_get"])
        return at

    async def clear(self, upto: datetime) -> None:
        """Disarm the wake if it is due by ``upto``; a later wake stays armed.

        A drain clears before it reads, so a wake armed while it drains survives.

        Args:
            upto: the time the drain is running for.
        """
        with store_errors("clear wake"):
            await self.pool.execute(queries["wake_clear"], upto)


class WakeListener:
    """A dedicated connection that LISTENs for wakes and survives losing it.

    Use as an async context manager; :meth:`wait` reports a wake. The connection is never
    taken from a pool (a pooled connection would be reset and lose its LISTEN). It is
    checked with a query after every idle timeout, and a connection that died (killed by
    ``pg_terminate_backend``, a server restart, a network cut) is replaced with backoff;
    the first ``wait`` after reconnecting reports a wake, since a notification may have
    been missed meanwhile. :meth:`wait` never raises because the connection is lost.

    Args:
        dsn: the database (``postgresql://...``).
        channel: the channel to LISTEN on, or several.
        check_timeout_s: how long the idle health check may take.
        max_backoff_s: the longest pause between reconnection attempts.
        on_notify: also told each notification's channel and payload (for a process
            that routes hints to many waiters).
        on_reconnect: also told each time the connection is open again after it was lost
            or could not be opened (the database is back: a process forwards its spool).
    """

    def __init__(
        self,
        dsn: str,
        channel: str | Sequence[str] = WAKE_CHANNEL,
        *,
        check_timeout_s: float = 5.0,
        max_backoff_s: float = 5.0,
        on_notify: Callable[[str, str], None] | None = None,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.channels = [channel] if isinstance(channel, str) else list(channel)
        self.channel = ",".join(self.channels)
        self.on_notify = on_notify
        self.on_reconnect = on_reconnect
        self.check_timeout_s = check_timeout_s
        self.max_backoff_s = max_backoff_s
        self.reconnects = 0
        self._conn: Connection | None = None
        self._event = asyncio.Event()
        self._lost = False
        self._backoff_s = 0.0
        self._retry_at = 0.0

    @property
    def connected(self) -> bool:
        """Whether the listening connection is open."""
        return self._conn is not None and not self._conn.is_closed() and not self._lost

    async def __aenter__(self) -> Self:
        if not await self._connect():
            log.warning("wake_listener_unavailable", channel=self.channel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening and close the connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close_quietly(conn)

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a wake.

        Args:
            timeout_s: the longest wait.

        Returns:
            True on a notification, or after reconnecting (one may have been missed);
            False when the time passed without either.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        if not self.connected:
            return await self._reconnect_until(deadline)
        if await wait_event(self._event, deadline - loop.time()):
            self._event.clear()
            if self._lost:
                # Woken by the termination callback, not a notification.
                await self._reconnect_until(deadline)
            return True
        if await self._healthy():
            return False
        return await self._reconnect_until(deadline)

    async def _healthy(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed() or self._lost:
            return False
        try:
            await conn.execute("SELECT 1", timeout=self.check_timeout_s)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            log.warning("wake_listener_lost", channel=self.channel, error=type(exc).__name__)
            return False
        return True

    async def _reconnect_until(self, deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        while True:
            pause = self._retry_at - loop.time()
            if pause > 0:
                if loop.time() + pause > deadline:
                    await asyncio.sleep(max(deadline - loop.time(), 0.0))
                    return False
                await asyncio.sleep(pause)
            if await self._connect():
                self.reconnects += 1
                log.info("wake_listener_reconnected", channel=self.channel)
                if self.on_reconnect is not None:
                    self.on_reconnect()
                return True
            self._backoff_s = min(max(self._backoff_s * 2, 0.1), self.max_backoff_s)
            self._retry_at = loop.time() + self._backoff_s
            if loop.time() >= deadline:
                return False

    async def _connect(self) -> bool:
        old, self._conn = self._conn, None
        if old is not None:
            await _close_quietly(old)
        self._lost = False
        try:
            conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(
                self.dsn, timeout=self.check_timeout_s
            )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            log.warning(
                "wake_listener_connect_failed", channel=self.channel, error=type(exc).__name__
            )
            return False
        try:
            conn.add_termination_listener(self._on_terminated)
            for channel in self.channels:
                await conn.add_listener(channel, self._on_notify)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            conn.terminate()
            log.warning(
                "wake_listener_connect_failed", channel=self.channel, error=type(exc).__name__
            )
            return False
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        # Whatever set the event before (a termination) is covered by the wake a
        # reconnect reports.
        self._event.clear()
        self._backoff_s = 0.0
        self._retry_at = 0.0
        return True

    def _on_notify(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        self._event.set()
        if self.on_notify is not None:
            self.on_notify(channel, str(payload))

    def _on_terminated(self, conn: Any) -> None:
        if conn is self._conn:
            self._lost = True
            self._event.set()


async def _close_quietly(conn: Connection) -> None:
    if conn.is_closed():
        return
    try:
        await asyncio.wait_for(conn.close(), timeout=2.0)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
        conn.terminate()
