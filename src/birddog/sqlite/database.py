"""The spool's SQLite file: its schema, its connections and their pragmas, its lock, its status.

Every call opens its own connection in WAL mode with ``synchronous=FULL``: a commit is on
disk, fsynced, when it returns. The file and its directory are private to the user (mode
0600 and 0700); a spool never written to has no file, and a look at it makes none. A
spool written by a newer BirdDog is refused, never changed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from birddog.clock import epoch_ms
from birddog.core.errors import InvalidInput, SpoolFailed, SpoolFull
from birddog.core.spool import (
    DEFAULT_SPOOL_MAX_AGE_S,
    DEFAULT_SPOOL_MAX_BYTES,
    UNRECORDED,
    Destination,
    SpoolStatus,
    outgoing_from_json,
)
from birddog.ports import Clock

__all__ = [
    "BUSY_TIMEOUT_S",
    "SCHEMA_VERSION",
    "SpoolDatabase",
    "disk_full",
    "failed",
    "rollback",
    "status_on",
    "time_of",
    "used_bytes",
]

SCHEMA_VERSION: Final = 2
"""``PRAGMA user_version`` of a spool this version writes (2: each mail's destination)."""

BUSY_TIMEOUT_S: Final = 30.0
"""How long a call waits for another process's write to the spool to end."""

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
        body TEXT NOT NULL,
        destination TEXT,
        server TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS mail_lane ON mail (sender, session, id)",
    "CREATE INDEX IF NOT EXISTS mail_key ON mail (mail_key)",
    "CREATE INDEX IF NOT EXISTS mail_destination ON mail (destination, id)",
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
and the bytes of mail they hold. A mail's ``destination`` is its
:attr:`~birddog.core.spool.Destination.key` and ``server`` the server's identity then
known (both NULL in a row an older BirdDog wrote); ``state`` keeps ``server:<key>``, the
identity a forwarder last found behind each key."""

_TO_VERSION_2: Final = (
    "ALTER TABLE mail ADD COLUMN destination TEXT",
    "ALTER TABLE mail ADD COLUMN server TEXT",
)
"""A version 1 spool (no destinations) brought to version 2: its rows record none."""


class SpoolDatabase:
    """The spool's SQLite file itself: its connections and their pragmas, its lock, its status.

    The waiting mail (:class:`~birddog.sqlite.file.SpoolFile`) and the quarantine
    (:class:`~birddog.sqlite.quarantine.SpoolQuarantine`) are kept on these connections.

    Args:
        path: the spool file; made, with its directory, on the first mail.
        clock: the time mail is spooled at and aged by.
        max_bytes: new mail is refused once the spool's rows take this much.
        max_age_s: mail spooled longer ago is quarantined by the forwarder.
        busy_timeout_s: how long a call waits while another process writes.
        synchronous: the ``PRAGMA synchronous`` every connection sets (``FULL``; only the
            power-loss test lowers it, to show it would catch the mail such a spool loses).
        destination: the database this process sends to (None: not known); mail is
            stamped with it, and only mail meant for it is forwarded from here.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        max_age_s: float = DEFAULT_SPOOL_MAX_AGE_S,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        synchronous: str = "FULL",
        destination: Destination | None = None,
    ) -> None:
        self.path = Path(path)
        self.destination = destination
        self.synchronous = synchronous
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
        with self.reading() as db:
            return replace(status_on(db, self.path), elsewhere=self._elsewhere(db))

    def mine(self, *, adopt: bool = False) -> tuple[str, tuple[str, ...]]:
        """The SQL condition (and its parameters) of the waiting mail meant for this database.

        See :func:`~birddog.core.spool.meant_for`: the same key, and not another server
        than the one last found behind it; with ``adopt``, every row.
        """
        own = self.destination
        if adopt:
            return "1 = 1", ()
        if own is None:
            return "destination IS NULL", ()
        return (
            "destination = ? AND (server IS NULL OR NOT EXISTS (SELECT 1 FROM state s"
            " WHERE s.name = ? AND s.value IS NOT NULL AND s.value <> mail.server))",
            (own.key, _server_state(own.key)),
        )

    def note_server(self, server: str | None) -> None:
        """Remember the identity of the server behind this destination (``None``: unknown).

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        own = self.destination
        if own is None or server is None or not self.exists():
            return
        now_ms = epoch_ms(self.clock.now())
        with self.writing() as db:
            db.execute(
                "INSERT OR REPLACE INTO state (name, value, at_ms) VALUES (?, ?, ?)",
                (_server_state(own.key), server, now_ms),
            )

    def known_server(self, db: sqlite3.Connection) -> str | None:
        """The server last found behind this destination, read on ``db``."""
        if self.destination is None:
            return None
        found = db.execute(
            "SELECT value FROM state WHERE name = ?", (_server_state(self.destination.key),)
        ).fetchone()
        return None if found is None or found[0] is None else str(found[0])

    def _elsewhere(self, db: sqlite3.Connection) -> tuple[tuple[str, int, datetime], ...]:
        """The waiting mail not meant for this database, by destination."""
        where, params = self.mine()
        groups = db.execute(
            "SELECT destination, count(*), min(spooled_at_ms), max(body) FROM mail"  # noqa: S608 - our own fixed conditions
            # coalesce: a row that records no destination makes the condition NULL, not false.
            f" WHERE coalesce(({where}), 0) = 0 GROUP BY destination ORDER BY min(id)",
            params,
        ).fetchall()
        found: list[tuple[str, int, datetime]] = []
        for key, count, oldest, body in groups:
            found.append((_described(key, body), int(count), time_of(oldest)))
        return tuple(found)

    def note_forward(self, error: str | None) -> None:
        """Record how a forward ended: cleanly (None) or with ``error`` (``spool status``).

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        if not self.exists():
            return
        now_ms = epoch_ms(self.clock.now())
        with self.writing() as db:
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
        with self.connection(create=True) as db:
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
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read on; a read that fails is a SpoolFailed naming the spool.

        Raises:
            SpoolFailed: the spool cannot be opened or read.
        """
        with self.connection() as db:
            try:
                yield db
            except sqlite3.Error as exc:
                raise failed(self.path, "read", exc) from exc

    @contextlib.contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` to ``COMMIT``), rolled back on failure.

        Raises:
            SpoolFailed: the write failed (nothing of it is kept).
        """
        with self.connection() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                rollback(db)
                raise failed(self.path, "write", exc) from exc

    @contextlib.contextmanager
    def connection(self, *, create: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection to the spool with its pragmas set; the file made first if need be.

        Raises:
            SpoolFailed: the spool cannot be opened, or runs in no WAL mode.
            SpoolFull: the disk is full (making the file).
        """
        if create:
            _make_file(self.path)
        # mode=rw: a look at a spool whose file is gone never makes an empty one.
        uri = self.path.absolute().as_uri() + "?mode=rw"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise failed(self.path, "open", exc) from exc
        try:
            deadline = time.monotonic() + self.busy_timeout_s
            pause = 0.001
            while True:
                try:
                    self._prepare(db)
                    break
                except sqlite3.Error as exc:
                    # Two processes opening a new spool at once both read it (shared) and
                    # both ask to write to turn on WAL: SQLite answers one of them "locked"
                    # at once, without waiting. Wait and try again, as the busy timeout would.
                    if not _busy(exc) or time.monotonic() + pause > deadline:
                        raise failed(self.path, "open", exc) from exc
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
            yield db
        finally:
            db.close()

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Set a new connection's pragmas and bring the file to this schema.

        Raises:
            SpoolFailed: the spool runs in no WAL mode, or is newer than this BirdDog.
            sqlite3.Error: SQLite refused a step (the caller decides whether to retry).
        """
        # WAL: readers never wait for the writer; FULL: every commit is fsynced
        # (the log and, on the first sync, its directory) before it returns.
        [mode] = db.execute("PRAGMA journal_mode = WAL").fetchone()
        db.execute(f"PRAGMA synchronous = {self.synchronous}")
        db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        if str(mode).lower() != "wal":
            raise SpoolFailed(f"the spool {self.path} cannot run in WAL mode ({mode})")
        _migrate(db, self.path)


def _server_state(key: str) -> str:
    """The ``state`` row that keeps the server found behind destination ``key``."""
    return f"server:{key}"


def _described(key: object, body: str | bytes) -> str:
    """A destination for people, from one of its rows (its key when the row is damaged)."""
    if key is None:
        return UNRECORDED
    try:
        destination = outgoing_from_json(body).destination
    except InvalidInput:
        destination = None
    return destination.describe() if destination is not None else str(key)


def status_on(db: sqlite3.Connection, path: Path) -> SpoolStatus:
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
        bytes=used_bytes(db),
        oldest_at=None if oldest is None else time_of(oldest),
        last_error=None if error is None else str(error),
        last_error_at=None if error_at is None else time_of(error_at),
        last_forward_at=None if forward_at is None else time_of(forward_at),
    )


def used_bytes(db: sqlite3.Connection) -> int:
    """The bytes of mail the spool holds, waiting or quarantined."""
    [used] = db.execute("SELECT bytes FROM usage WHERE id = 1").fetchone()
    return int(used)


def rollback(db: sqlite3.Connection) -> None:
    """Roll back ``db``'s open transaction, if any (a failed rollback changes nothing)."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def _busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's "locked" or "busy": another connection holds the file."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def disk_full(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the disk holding the spool is full."""
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(
        exc
    )


def failed(path: Path, what: str, exc: sqlite3.Error) -> SpoolFailed | SpoolFull:
    """The spool's error for an SQLite failure: full when the disk is, else failed, naming it."""
    if disk_full(exc):
        return SpoolFull(f"spool full: the disk holding {path} is full; nothing was written")
    return SpoolFailed(f"cannot {what} the spool {path}: {exc}")


def time_of(ms: object) -> datetime:
    """A stored time (milliseconds since the epoch) as an aware time."""
    return datetime.fromtimestamp(int(str(ms)) / 1000, tz=UTC)


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
        [version] = db.execute("PRAGMA user_version").fetchone()  # another process's, maybe
        if version == 1:
            for statement in _TO_VERSION_2:
                db.execute(statement)
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
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


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
