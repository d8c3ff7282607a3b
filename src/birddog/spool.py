"""The local spool: mail accepted while the database is away, on disk, forwarded exactly once.

:class:`SpoolFile` keeps one row per mail in a SQLite file (the standard library's
``sqlite3``) in WAL mode with ``synchronous=FULL``: a row is on disk, fsynced, when
:meth:`SpoolFile.put` returns, and only then may a sender say "spooled". Every call
opens its own connection, so any number of processes (four ``birddog send`` at once, a
daemon forwarding) share one spool file; SQLite's lock orders the writers. The file and
its directory are private to the user (mode 0600 and 0700). :class:`SqliteSpool` is the
same spool for asynchronous code: each of its calls runs the file's method in a worker
thread.

The forwarder (:class:`birddog.service.forwarding.SpoolForwarder`) moves the rows into
PostgreSQL; only one forwarder works a spool at a time (:meth:`SqliteSpool.forwarding`:
an ``fcntl`` lock on ``PATH.lock``, released by the kernel if it dies).

Bounded: a spool holding ``max_bytes`` refuses new mail (:class:`~birddog.SpoolFull`)
and never drops old mail; mail older than ``max_age_s`` is quarantined, not sent late.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Concatenate, Final, ParamSpec, TypeVar

import structlog

from birddog.clock import epoch_ms
from birddog.core.errors import InvalidInput, SpoolFailed, SpoolFull
from birddog.core.mail import Mail
from birddog.core.spool import (
    DEFAULT_SPOOL_MAX_AGE_S,
    DEFAULT_SPOOL_MAX_BYTES,
    Outgoing,
    SpoolRow,
    SpoolStatus,
    aged_reason,
    full_message,
    outgoing_from_json,
)
from birddog.ports import Clock

log = structlog.get_logger("birddog.spool")

__all__ = [
    "FORWARD_PAGE",
    "SpoolFile",
    "SpoolRow",
    "SqliteSpool",
    "full_message",
]

SCHEMA_VERSION: Final = 1
"""``PRAGMA user_version`` of a spool this version writes."""

BUSY_TIMEOUT_S: Final = 30.0
"""How long a call waits for another process's write to the spool to end."""

FORWARD_PAGE: Final = 64
"""Rows read from the spool at once while forwarding."""

LOCK_POLL_S: Final = 0.05
"""While waiting for another forwarder, look at its lock this often."""

WAL_LIMIT_BYTES: Final = 4 * 1024 * 1024
"""The write-ahead log is cut back to this after each checkpoint."""

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS mail (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        spooled_at_ms INTEGER NOT NULL,
        mail_key TEXT NOT NULL,
        job_id TEXT NOT NULL,
        sender TEXT NOT NULL,
        session TEXT NOT NULL,
        body TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS mail_lane ON mail (sender, session, id)",
    "CREATE INDEX IF NOT EXISTS mail_key ON mail (mail_key)",
    """CREATE TABLE IF NOT EXISTS quarantine (
        id INTEGER PRIMARY KEY,
        spooled_at_ms INTEGER NOT NULL,
        quarantined_at_ms INTEGER NOT NULL,
        mail_key TEXT,
        reason TEXT NOT NULL,
        body BLOB
    )""",
    "CREATE INDEX IF NOT EXISTS quarantine_key ON quarantine (mail_key)",
    """CREATE TABLE IF NOT EXISTS state (
        name TEXT PRIMARY KEY,
        value TEXT,
        at_ms INTEGER
    )""",
    # What the mail holds, kept by triggers so no write (not even one by hand) skews it.
    "CREATE TABLE IF NOT EXISTS usage (id INTEGER PRIMARY KEY CHECK (id = 1), bytes INTEGER)",
    "INSERT OR IGNORE INTO usage (id, bytes) VALUES (1, 0)",
    *(
        f"""CREATE TRIGGER IF NOT EXISTS {table}_{event} AFTER {event} ON {table} BEGIN
            UPDATE usage SET bytes = bytes {change} WHERE id = 1;
        END"""  # noqa: S608 - our own fixed table and event names, no input
        for table in ("mail", "quarantine")
        for event, change in (
            ("insert", "+ coalesce(length(CAST(NEW.body AS BLOB)), 0)"),
            ("delete", "- coalesce(length(CAST(OLD.body AS BLOB)), 0)"),
            (
                "update",
                "+ coalesce(length(CAST(NEW.body AS BLOB)), 0)"
                " - coalesce(length(CAST(OLD.body AS BLOB)), 0)",
            ),
        )
    ),
)
"""The spool's tables: waiting mail, quarantined mail (with the reason), the last forward,
and the bytes of mail they hold."""


class _SpoolDatabase:
    """The spool's SQLite file itself: its connections and their pragmas, its lock, its status.

    The waiting mail (:class:`SpoolFile`) and the quarantine (:class:`_SpoolQuarantine`)
    are kept on these connections; the arguments are :class:`SpoolFile`'s.
    """

    SYNCHRONOUS: ClassVar[str] = "FULL"
    """The ``PRAGMA synchronous`` every connection sets. Not a setting: only the power-loss
    test lowers it (to ``OFF``, in a subclass of its own) to show that it would catch the
    mail such a spool loses."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        max_age_s: float = DEFAULT_SPOOL_MAX_AGE_S,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.busy_timeout_s = busy_timeout_s

    @property
    def lock_path(self) -> Path:
        """The forwarders' lock file beside the spool."""
        return self.path.with_name(self.path.name + ".lock")

    def exists(self) -> bool:
        """Whether the spool file is there (a spool never written to has none)."""
        return self.path.is_file()

    def status(self) -> SpoolStatus:
        """What the spool holds: counts, bytes, the oldest mail, the last forward's error.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.exists():
            return SpoolStatus(str(self.path), 0, 0, 0, None, None, None, None)
        with self._reading() as db:
            return _status_on(db, self.path)

    def note_forward(self, error: str | None) -> None:
        """Record how a forward ended: cleanly (None) or with ``error`` (``spool status``).

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        if not self.exists():
            return
        now_ms = epoch_ms(self.clock.now())
        with self._writing() as db:
            if error is None:
                db.execute("DELETE FROM state WHERE name = 'last_error'")
                db.execute(
                    "INSERT OR REPLACE INTO state (name, value, at_ms)"
                    " VALUES ('last_forward', NULL, ?)",
                    (now_ms,),
                )
            else:
                db.execute(
                    "INSERT OR REPLACE INTO state (name, value, at_ms) VALUES ('last_error', ?, ?)",
                    (error, now_ms),
                )

    def pragmas(self) -> dict[str, object]:
        """The journal mode and synchronous level the spool's connections run with.

        Returns:
            ``{"journal_mode": "wal", "synchronous": 2}`` (2 is FULL).
        """
        with self._connection(create=True) as db:
            [mode] = db.execute("PRAGMA journal_mode").fetchone()
            [level] = db.execute("PRAGMA synchronous").fetchone()
        return {"journal_mode": str(mode), "synchronous": int(level)}

    def open_lock(self) -> int:
        """Open the forwarders' lock file (made, 0600, if need be), unlocked.

        Returns:
            Its descriptor; closing it releases any lock taken on it.

        Raises:
            SpoolFailed: the lock file cannot be opened.
        """
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise SpoolFailed(
                f"cannot open the spool's lock {self.lock_path}: {exc.strerror or exc}"
            ) from exc

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read on; a read that fails is a SpoolFailed naming the spool."""
        with self._connection() as db:
            try:
                yield db
            except sqlite3.Error as exc:
                raise _failed(self.path, "read", exc) from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` to ``COMMIT``), rolled back on failure.

        Raises:
            SpoolFailed: the write failed (nothing of it is kept).
        """
        with self._connection() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(db)
                raise _failed(self.path, "write", exc) from exc

    @contextlib.contextmanager
    def _connection(self, *, create: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection to the spool with its pragmas set; the file made first if need be."""
        if create:
            _make_file(self.path)
        # mode=rw: a look at a spool whose file is gone never makes an empty one.
        uri = self.path.absolute().as_uri() + "?mode=rw"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise _failed(self.path, "open", exc) from exc
        try:
            try:
                # WAL: readers never wait for the writer; FULL: every commit is fsynced
                # (the log and, on the first sync, its directory) before it returns.
                [mode] = db.execute("PRAGMA journal_mode = WAL").fetchone()
                db.execute(f"PRAGMA synchronous = {self.SYNCHRONOUS}")
                db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
                if str(mode).lower() != "wal":
                    raise SpoolFailed(f"the spool {self.path} cannot run in WAL mode ({mode})")
                _migrate(db, self.path)
            except sqlite3.Error as exc:
                raise _failed(self.path, "open", exc) from exc
            yield db
        finally:
            db.close()


class _SpoolQuarantine(_SpoolDatabase):
    """The spool's quarantine: mail moved aside with the reason, listed, put back."""

    def quarantine(self, row_id: int, reason: str) -> None:
        """Move one row to quarantine with ``reason`` (a no-op if it is gone).

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        now_ms = epoch_ms(self.clock.now())
        with self._writing() as db:
            _move_to_quarantine(db, "id = ?", (row_id,), reason, now_ms)

    def quarantine_aged(self) -> list[str]:
        """Move every row older than ``max_age_s`` to quarantine; returns their keys.

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        if not self.exists():
            return []
        now = self.clock.now()
        cutoff_ms = epoch_ms(now - timedelta(seconds=self.max_age_s))
        reason = aged_reason(self.max_age_s)
        with self._writing() as db:
            keys = [
                str(row[0])
                for row in db.execute(
                    "SELECT mail_key FROM mail WHERE spooled_at_ms < ? ORDER BY id",
                    (cutoff_ms,),
                )
            ]
            if keys:
                _move_to_quarantine(db, "spooled_at_ms < ?", (cutoff_ms,), reason, epoch_ms(now))
        return keys

    def quarantined(self, *, limit: int) -> list[dict[str, object]]:
        """The latest quarantined mails: ``key``, ``reason``, ``spooled_at``, ``quarantined_at``.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.exists():
            return []
        with self._reading() as db:
            rows = db.execute(
                "SELECT mail_key, reason, spooled_at_ms, quarantined_at_ms FROM quarantine"
                " ORDER BY quarantined_at_ms DESC, id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            {"key": key, "reason": reason, "spooled_at": _at(spooled), "quarantined_at": _at(at)}
            for key, reason, spooled, at in rows
        ]

    def requeue(self) -> int:
        """Put every quarantined mail that can be decoded back at the end of the spool.

        For an operator who fixed what the database refused (added the route, say).

        Returns:
            How many mails went back.

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        if not self.exists():
            return 0
        moved = 0
        with self._writing() as db:
            rows = db.execute("SELECT id, body FROM quarantine ORDER BY id").fetchall()
            now_ms = epoch_ms(self.clock.now())
            for row_id, body in rows:
                try:
                    outgoing = outgoing_from_json(body)
                except InvalidInput:
                    continue  # undecodable: it stays where it is, with its reason
                sender, session = outgoing.lane
                db.execute(
                    "INSERT INTO mail (spooled_at_ms, mail_key, job_id, sender, session, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (now_ms, outgoing.mail.key, outgoing.job.job_id, sender, session, body),
                )
                db.execute("DELETE FROM quarantine WHERE id = ?", (row_id,))
                moved += 1
        return moved

    def quarantine_reason(self, key: str) -> str | None:
        """Why mail under ``key`` was quarantined (the latest), or None if it was not.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.exists():
            return None
        with self._reading() as db:
            row = db.execute(
                "SELECT reason FROM quarantine WHERE mail_key = ? ORDER BY id DESC LIMIT 1",
                (key,),
            ).fetchone()
        return None if row is None else str(row[0])


class SpoolFile(_SpoolQuarantine):
    """The spool's SQLite file, synchronously: every call on a connection of its own.

    Its own methods keep the waiting mail (put, read, delete); the quarantine and the
    file's status, lock and connections come from its parts, :class:`_SpoolQuarantine`
    and :class:`_SpoolDatabase`. Every method blocks on the disk (and on another process's
    write, up to ``busy_timeout_s``); :class:`SqliteSpool` runs each in a worker thread.

    Args:
        path: the spool file (``BIRDDOG_SPOOL_PATH``); made, with its directory, on the
            first mail. A spool never written to is empty and leaves no file.
        clock: the time mail is spooled at and aged by.
        max_bytes: refuse new mail once the spool's rows take this much.
        max_age_s: mail spooled longer ago is quarantined by the forwarder.
        busy_timeout_s: how long a call waits while another process writes.
    """

    def put(self, outgoing: Outgoing) -> int:
        """Keep one mail, durably: on disk and fsynced when this returns.

        Args:
            outgoing: the mail and how its write is checked.

        Returns:
            The row's place in spool order.

        Raises:
            SpoolFull: the spool holds ``max_bytes`` already (or the disk is full);
                nothing was written, nothing was dropped.
            SpoolFailed: the spool cannot be written (its file, directory or disk).
        """
        body = outgoing.model_dump_json()
        mail = outgoing.mail
        sender, session = outgoing.lane
        now_ms = epoch_ms(self.clock.now())
        with self._connection(create=True) as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                used = _used_bytes(db)
                if used + len(body.encode("utf-8")) > self.max_bytes:
                    status = _status_on(db, self.path)
                    db.execute("ROLLBACK")
                    raise SpoolFull(
                        full_message(status, max_bytes=self.max_bytes, now=self.clock.now())
                    )
                cursor = db.execute(
                    "INSERT INTO mail (spooled_at_ms, mail_key, job_id, sender, session, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (now_ms, mail.key, outgoing.job.job_id, sender, session, body),
                )
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(db)
                if _disk_full(exc):
                    raise SpoolFull(self._full_disk_message()) from exc
                raise _failed(self.path, "write", exc) from exc
        row_id = cursor.lastrowid
        if row_id is None:  # sqlite3 always sets it after an INSERT
            raise SpoolFailed(f"the spool {self.path} kept no row id")
        return row_id

    def _full_disk_message(self) -> str:
        try:
            with self._connection() as db:
                status = _status_on(db, self.path)
        except (SpoolFailed, SpoolFull, sqlite3.Error):
            return f"spool full: the disk holding {self.path} is full; nothing was written"
        text = full_message(status, max_bytes=self.max_bytes, now=self.clock.now())
        return text.replace("spool full:", f"spool full (the disk holding {self.path} is full):")

    def waiting(
        self, *, after_id: int = 0, limit: int = FORWARD_PAGE, lane: tuple[str, str] | None = None
    ) -> list[SpoolRow]:
        """The waiting rows after ``after_id``, in spool order.

        Args:
            after_id: the last row already seen.
            limit: the most rows returned.
            lane: only this ``(sender, recipient session)``.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.exists():
            return []
        with self._reading() as db:
            if lane is None:
                rows = db.execute(
                    "SELECT id, spooled_at_ms, mail_key, body FROM mail"
                    " WHERE id > ? ORDER BY id LIMIT ?",
                    (after_id, limit),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT id, spooled_at_ms, mail_key, body FROM mail"
                    " WHERE sender = ? AND session = ? AND id > ? ORDER BY id LIMIT ?",
                    (*lane, after_id, limit),
                ).fetchall()
        return [
            SpoolRow(id=int(r[0]), spooled_at=_at(r[1]), key=str(r[2]), body=r[3]) for r in rows
        ]

    def is_waiting(self, key: str) -> bool:
        """Whether mail under ``key`` waits in the spool.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.exists():
            return False
        with self._reading() as db:
            found = db.execute("SELECT 1 FROM mail WHERE mail_key = ? LIMIT 1", (key,)).fetchone()
        return found is not None

    def mail(self, key: str) -> Mail | None:
        """The mail waiting in the spool under ``key`` (the latest), or None.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.exists():
            return None
        with self._reading() as db:
            row = db.execute(
                "SELECT body FROM mail WHERE mail_key = ? ORDER BY id DESC LIMIT 1", (key,)
            ).fetchone()
        if row is None:
            return None
        try:
            return outgoing_from_json(row[0]).mail
        except InvalidInput:
            return None  # the forwarder quarantines it

    def delete(self, ids: Sequence[int]) -> None:
        """Remove forwarded rows (in one transaction).

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        if not ids:
            return
        with self._writing() as db:
            db.executemany("DELETE FROM mail WHERE id = ?", [(i,) for i in ids])


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
    """The local spool in one SQLite file (see the module), for asynchronous code.

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
    ) -> None:
        self.file = self.FILE(
            path,
            clock=clock,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
            busy_timeout_s=busy_timeout_s,
        )

    @property
    def path(self) -> Path:
        """The spool file."""
        return self.file.path

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
        return self.file.max_age_s

    @property
    def busy_timeout_s(self) -> float:
        """How long a call waits while another process writes."""
        return self.file.busy_timeout_s

    @property
    def lock_path(self) -> Path:
        """The forwarders' lock file beside the spool."""
        return self.file.lock_path

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
        fd = await asyncio.to_thread(self.file.open_lock)
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


def _status_on(db: sqlite3.Connection, path: Path) -> SpoolStatus:
    """The spool's status, read on ``db`` (inside the caller's transaction, if any)."""
    mails, oldest = db.execute("SELECT count(*), min(spooled_at_ms) FROM mail").fetchone()
    [quarantined] = db.execute("SELECT count(*) FROM quarantine").fetchone()
    state = {
        str(name): (value, at_ms)
        for name, value, at_ms in db.execute("SELECT name, value, at_ms FROM state")
    }
    error, error_at = state.get("last_error", (None, None))
    _, forward_at = state.get("last_forward", (None, None))
    return SpoolStatus(
        path=str(path),
        mails=int(mails),
        quarantined=int(quarantined),
        bytes=_used_bytes(db),
        oldest_at=None if oldest is None else _at(oldest),
        last_error=None if error is None else str(error),
        last_error_at=None if error_at is None else _at(error_at),
        last_forward_at=None if forward_at is None else _at(forward_at),
    )


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the spool at ``path`` to :data:`SCHEMA_VERSION`; refuse a newer one."""
    [version] = db.execute("PRAGMA user_version").fetchone()
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise SpoolFailed(
            f"the spool {path} was written by a newer BirdDog (version {version}); "
            "forward it with that version"
        )
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def _make_file(path: Path) -> None:
    """Create the spool file (0600) and its directory (0700), and make both durable."""
    if path.is_file():
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return  # another process made it first
        os.close(fd)
        # The new name must survive a power cut as well as the rows written under it.
        _fsync_directory(path.parent)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise SpoolFull(
                f"spool full: the disk holding {path} is full; nothing was written"
            ) from exc
        raise SpoolFailed(f"cannot create the spool {path}: {exc.strerror or exc}") from exc


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _move_to_quarantine(
    db: sqlite3.Connection, where: str, args: tuple[object, ...], reason: str, now_ms: int
) -> None:
    # ``where`` is one of two fixed conditions written in this module, never input.
    db.execute(
        "INSERT OR REPLACE INTO quarantine"  # noqa: S608 - fixed conditions only
        " (id, spooled_at_ms, quarantined_at_ms, mail_key, reason, body)"
        f" SELECT id, spooled_at_ms, ?, mail_key, ?, body FROM mail WHERE {where}",
        (now_ms, reason, *args),
    )
    db.execute(f"DELETE FROM mail WHERE {where}", args)  # noqa: S608 - fixed conditions only


def _used_bytes(db: sqlite3.Connection) -> int:
    """The bytes of mail the spool holds, waiting or quarantined."""
    [used] = db.execute("SELECT bytes FROM usage WHERE id = 1").fetchone()
    return int(used)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rollback(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def _disk_full(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(
        exc
    )


def _failed(path: Path, what: str, exc: sqlite3.Error) -> SpoolFailed | SpoolFull:
    if _disk_full(exc):
        return SpoolFull(f"spool full: the disk holding {path} is full; nothing was written")
    return SpoolFailed(f"cannot {what} the spool {path}: {exc}")


def _at(ms: object) -> datetime:
    return datetime.fromtimestamp(int(str(ms)) / 1000, tz=UTC)
