"""The in-memory spool: mail accepted while the database is away, kept in lists, not a file.

The same rules as the SQLite spool (:class:`birddog.sqlite.SqliteSpool`): rows in spool
order, a bound on the bytes held (waiting and quarantined mail both count), mail older
than the age limit quarantined, one forwarder at a time. It is "on disk" as soon as
:meth:`InMemorySpool.put` returns; set ``failing`` to make writes fail as a broken disk
would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from birddog.core.errors import InvalidInput, SpoolFailed, SpoolFull
from birddog.core.mail import Mail
from birddog.core.spool import (
    DEFAULT_SPOOL_MAX_AGE_S,
    DEFAULT_SPOOL_MAX_BYTES,
    UNRECORDED,
    Destination,
    Outgoing,
    SpoolRow,
    SpoolStatus,
    aged_reason,
    full_message,
    meant_for,
    outgoing_from_json,
)
from birddog.ports import Clock
from birddog.testing.clock import FrozenClock

__all__ = ["InMemorySpool"]


@dataclass(frozen=True, slots=True)
class _Set:
    """A quarantined row: the row, when and why."""

    row: SpoolRow
    at: datetime
    reason: str


class InMemorySpool:
    """A spool in memory (a :class:`~birddog.ports.Spool`).

    Args:
        clock: the time mail is spooled at and aged by.
        max_bytes: refuse new mail once the rows take this much.
        max_age_s: mail spooled longer ago is quarantined by the forwarder.
        path: what :meth:`status` names as the spool.
        destination: the database this spool's process sends to (None: not known).

    Attributes:
        rows: the waiting rows, in spool order.
        failing: set it to a message to make every :meth:`put` raise
            :class:`~birddog.SpoolFailed`, as a spool whose disk refuses writes.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        max_age_s: float = DEFAULT_SPOOL_MAX_AGE_S,
        path: str = "memory",
        destination: Destination | None = None,
    ) -> None:
        self.destination = destination
        self.servers: dict[str, str] = {}
        self.clock: Clock = clock or FrozenClock()
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.path = path
        self.rows: list[SpoolRow] = []
        self.failing: str | None = None
        self.aside = _Quarantine(self.clock)
        self._next_id = 1
        self._lock = asyncio.Lock()
        self._used = False
        self._last_error: tuple[str, datetime] | None = None
        self._last_forward: datetime | None = None

    def exists(self) -> bool:
        """Whether anything was ever spooled here."""
        return self._used

    async def put(self, outgoing: Outgoing) -> int:
        """Keep one mail; its place in spool order.

        Raises:
            SpoolFull: the rows take ``max_bytes`` already; nothing was written.
            SpoolFailed: ``failing`` is set.
        """
        if self.failing is not None:
            raise SpoolFailed(f"cannot write the spool {self.path}: {self.failing}")
        own = self.destination
        if own is not None:
            own = own.model_copy(update={"server": self.servers.get(own.key)})
            outgoing = outgoing.model_copy(update={"destination": own})
        body = outgoing.model_dump_json()
        if self._bytes() + len(body.encode("utf-8")) > self.max_bytes:
            status = await self.status()
            raise SpoolFull(full_message(status, max_bytes=self.max_bytes, now=self.clock.now()))
        self._used = True
        row = SpoolRow(self._next_id, self.clock.now(), outgoing.mail.key, body)
        self._next_id += 1
        self.rows.append(row)
        return row.id

    async def has_waiting(self, lane: tuple[str, str] | None = None) -> bool:
        """Whether any mail (of ``lane``) waits."""
        return bool(await self.waiting(limit=1, lane=lane))

    async def is_waiting(self, key: str) -> bool:
        """Whether mail under ``key`` waits."""
        return any(row.key == key for row in self.rows)

    async def mail(self, key: str) -> Mail | None:
        """The mail waiting under ``key`` (the latest), or None (also for an undecodable one)."""
        for row in reversed(self.rows):
            if row.key == key:
                try:
                    return outgoing_from_json(row.body).mail
                except InvalidInput:
                    return None
        return None

    async def waiting(
        self,
        *,
        after_id: int = 0,
        limit: int = 64,
        lane: tuple[str, str] | None = None,
        adopt: bool = False,
    ) -> list[SpoolRow]:
        """The waiting rows meant for this database after ``after_id`` (of ``lane``)."""
        rows = [
            row
            for row in self.rows
            if row.id > after_id and _in_lane(row, lane) and (adopt or self._mine(row))
        ]
        return rows[:limit]

    async def note_server(self, server: str | None) -> None:
        """Remember the server behind this spool's destination."""
        if self.destination is not None and server is not None:
            self.servers[self.destination.key] = server

    def _mine(self, row: SpoolRow) -> bool:
        own = self.destination
        server = None if own is None else self.servers.get(own.key)
        return meant_for(_destination(row), own, server)

    def _elsewhere(self) -> tuple[tuple[str, int, datetime], ...]:
        groups: dict[str, list[SpoolRow]] = {}
        for row in self.rows:
            if not self._mine(row):
                where = _destination(row)
                groups.setdefault(UNRECORDED if where is None else where.describe(), []).append(row)
        return tuple(
            (name, len(rows), min(row.spooled_at for row in rows)) for name, rows in groups.items()
        )

    async def delete(self, ids: Sequence[int]) -> None:
        """Remove forwarded rows."""
        gone = set(ids)
        self.rows = [row for row in self.rows if row.id not in gone]

    async def quarantine(self, row_id: int, reason: str) -> None:
        """Move one row aside with ``reason`` (a no-op if it is gone)."""
        self.aside.take(self._take(lambda row: row.id == row_id), reason)

    async def quarantine_aged(self) -> list[str]:
        """Move every row older than ``max_age_s`` aside; their keys, in spool order."""
        cutoff = self.clock.now() - timedelta(seconds=self.max_age_s)
        aged = self._take(lambda row: row.spooled_at < cutoff)
        return self.aside.take(aged, aged_reason(self.max_age_s))

    async def quarantined(self, *, limit: int) -> list[dict[str, object]]:
        """The latest quarantined mails, newest first."""
        return self.aside.latest(limit)

    async def quarantine_reason(self, key: str) -> str | None:
        """Why mail under ``key`` was quarantined (the latest), or None."""
        return self.aside.reason(key)

    async def requeue(self) -> int:
        """Put every decodable quarantined mail back at the end; how many went."""
        return self._append(self.aside.give_back(self.clock.now()))

    async def note_forward(self, error: str | None) -> None:
        """Record how a forward ended."""
        if not self._used:
            return
        if error is None:
            self._last_error, self._last_forward = None, self.clock.now()
        else:
            self._last_error = (error, self.clock.now())

    async def status(self) -> SpoolStatus:
        """What the spool holds."""
        oldest = min((row.spooled_at for row in self.rows), default=None)
        error, error_at = self._last_error if self._last_error is not None else (None, None)
        return SpoolStatus(
            path=self.path,
            mails=len(self.rows),
            quarantined=len(self.aside.rows()),
            bytes=self._bytes(),
            oldest_at=oldest,
            last_error=error,
            last_error_at=error_at,
            last_forward_at=self._last_forward,
            elsewhere=self._elsewhere(),
        )

    @contextlib.asynccontextmanager
    async def forwarding(self, *, wait_s: float = 0.0) -> AsyncIterator[bool]:
        """Hold the one forwarder lock for the block, if it can be had within ``wait_s``."""
        if self._lock.locked():
            if wait_s <= 0:
                yield False
                return
            try:
                await asyncio.wait_for(self._lock.acquire(), timeout=wait_s)
            except TimeoutError:
                yield False
                return
        else:
            await self._lock.acquire()
        try:
            yield True
        finally:
            self._lock.release()

    def _take(self, chosen: Callable[[SpoolRow], bool]) -> list[SpoolRow]:
        """Remove the waiting rows ``chosen`` picks; them, in spool order."""
        taken = [row for row in self.rows if chosen(row)]
        self.rows = [row for row in self.rows if not chosen(row)]
        return taken

    def _append(self, rows: list[SpoolRow]) -> int:
        """Put rows back at the end of the spool, each with a new place; how many."""
        for row in rows:
            self.rows.append(replace(row, id=self._next_id))
            self._next_id += 1
        return len(rows)

    def _bytes(self) -> int:
        rows = [*self.rows, *self.aside.rows()]
        return sum(len(_encoded(row.body)) for row in rows)


class _Quarantine:
    """The spool's quarantine: rows set aside with the reason, listed, given back.

    Args:
        clock: when rows are set aside.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._set: list[_Set] = []

    def take(self, rows: list[SpoolRow], reason: str) -> list[str]:
        """Set ``rows`` aside with ``reason``; their keys."""
        now = self.clock.now()
        self._set.extend(_Set(row, now, reason) for row in rows)
        return [row.key for row in rows]

    def rows(self) -> list[SpoolRow]:
        """Every row set aside."""
        return [aside.row for aside in self._set]

    def latest(self, limit: int) -> list[dict[str, object]]:
        """The latest ``limit`` rows set aside, newest first, as ``quarantined`` lists them."""
        latest = sorted(self._set, key=lambda s: (s.at, s.row.id), reverse=True)
        return [
            {
                "key": aside.row.key,
                "reason": aside.reason,
                "spooled_at": aside.row.spooled_at,
                "quarantined_at": aside.at,
            }
            for aside in latest[:limit]
        ]

    def reason(self, key: str) -> str | None:
        """Why mail under ``key`` was set aside (the latest), or None."""
        found = [aside for aside in self._set if aside.row.key == key]
        return max(found, key=lambda s: s.row.id).reason if found else None

    def give_back(self, now: datetime) -> list[SpoolRow]:
        """Take every decodable row out, spooled again ``now``; undecodable ones stay."""
        back: list[SpoolRow] = []
        kept: list[_Set] = []
        for aside in sorted(self._set, key=lambda s: s.row.id):
            try:
                outgoing_from_json(aside.row.body)
            except InvalidInput:
                kept.append(aside)  # undecodable: it stays, with its reason
                continue
            back.append(replace(aside.row, spooled_at=now))
        self._set = kept
        return back


def _destination(row: SpoolRow) -> Destination | None:
    try:
        return outgoing_from_json(row.body).destination
    except InvalidInput:
        return None


def _in_lane(row: SpoolRow, lane: tuple[str, str] | None) -> bool:
    if lane is None:
        return True
    try:
        return outgoing_from_json(row.body).lane == lane
    except InvalidInput:
        return False


def _encoded(body: str | bytes) -> bytes:
    return body if isinstance(body, bytes) else body.encode("utf-8")
