"""The waiting mail of the spool's SQLite file: put, read in spool order, deleted once sent.

A row is on disk, fsynced, when :meth:`SpoolFile.put` returns, and only then may a sender
say "spooled". Every call opens its own connection, so any number of processes (four
``birddog send`` at once, a daemon forwarding) share one spool file; SQLite's lock orders
the writers. A spool holding ``max_bytes`` refuses new mail and never drops old mail.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Final

from birddog.clock import epoch_ms
from birddog.core.errors import InvalidInput, SpoolFailed, SpoolFull
from birddog.core.mail import Mail
from birddog.core.spool import (
    DEFAULT_SPOOL_MAX_AGE_S,
    DEFAULT_SPOOL_MAX_BYTES,
    Destination,
    Outgoing,
    SpoolRow,
    SpoolStatus,
    full_message,
    outgoing_from_json,
)
from birddog.ports import Clock
from birddog.sqlite.database import (
    BUSY_TIMEOUT_S,
    SpoolDatabase,
    disk_full,
    failed,
    rollback,
    status_on,
    time_of,
    used_bytes,
)
from birddog.sqlite.quarantine import SpoolQuarantine

__all__ = ["PAGE", "SpoolFile", "destination_columns"]

PAGE: Final = 64
"""Waiting rows read at once, unless the caller asks for another number."""


class SpoolFile:
    """The spool's SQLite file, synchronously: every call on a connection of its own.

    Its own methods keep the waiting mail (put, read, delete); it is made of two parts it
    hands the rest to: the file itself (:attr:`database`: its connections, lock and
    status) and the quarantine (:attr:`aside`). Every method blocks on the disk (and on
    another process's write, up to ``busy_timeout_s``);
    :class:`~birddog.sqlite.spool.SqliteSpool` runs each in a worker thread.

    Args:
        path: the spool file (``BIRDDOG_SPOOL_PATH``); made, with its directory, on the
            first mail. A spool never written to is empty and leaves no file.
        clock: the time mail is spooled at and aged by.
        max_bytes: refuse new mail once the spool's rows take this much.
        max_age_s: mail spooled longer ago is quarantined by the forwarder.
        busy_timeout_s: how long a call waits while another process writes.
        destination: the database this process sends to (None: not known): each mail is
            stamped with it, and only mail meant for it is read back for forwarding.

    Attributes:
        database: the file, its connections and lock.
        aside: the quarantine.
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
        destination: Destination | None = None,
    ) -> None:
        self.database = SpoolDatabase(
            path,
            clock=clock,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
            busy_timeout_s=busy_timeout_s,
            synchronous=self.SYNCHRONOUS,
            destination=destination,
        )
        self.aside = SpoolQuarantine(self.database)

    @property
    def path(self) -> Path:
        """The spool file."""
        return self.database.path

    @property
    def clock(self) -> Clock:
        """The time mail is spooled at and aged by."""
        return self.database.clock

    @property
    def max_bytes(self) -> int:
        """New mail is refused once the spool's rows take this much."""
        return self.database.max_bytes

    def exists(self) -> bool:
        """Whether the spool file is there (a spool never written to has none)."""
        return self.database.exists()

    def status(self) -> SpoolStatus:
        """What the spool holds (see :meth:`SpoolDatabase.status`)."""
        return self.database.status()

    def note_forward(self, error: str | None) -> None:
        """Record how a forward ended (see :meth:`SpoolDatabase.note_forward`)."""
        self.database.note_forward(error)

    def note_server(self, server: str | None) -> None:
        """Remember the server found behind this destination (see :class:`SpoolDatabase`)."""
        self.database.note_server(server)

    def pragmas(self) -> dict[str, object]:
        """The journal mode and synchronous level the spool's connections run with."""
        return self.database.pragmas()

    def quarantine(self, row_id: int, reason: str) -> None:
        """Move one row to quarantine with ``reason`` (see :class:`SpoolQuarantine`)."""
        self.aside.quarantine(row_id, reason)

    def quarantine_aged(self) -> list[str]:
        """Move every row older than ``max_age_s`` to quarantine; returns their keys."""
        return self.aside.quarantine_aged()

    def quarantined(self, *, limit: int) -> list[dict[str, object]]:
        """The latest quarantined mails: ``key``, ``reason``, ``spooled_at``, ``quarantined_at``."""
        return self.aside.quarantined(limit=limit)

    def requeue(self) -> int:
        """Put every quarantined mail that can be decoded back at the end of the spool."""
        return self.aside.requeue()

    def quarantine_reason(self, key: str) -> str | None:
        """Why mail under ``key`` was quarantined (the latest), or None if it was not."""
        return self.aside.quarantine_reason(key)

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
        mail = outgoing.mail
        sender, session = outgoing.lane
        now_ms = epoch_ms(self.clock.now())
        own = self.database.destination
        with self.database.connection(create=True) as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                if own is not None:  # the mail records where it was meant to go
                    own = own.model_copy(update={"server": self.database.known_server(db)})
                    outgoing = outgoing.model_copy(update={"destination": own})
                body = outgoing.model_dump_json()
                used = used_bytes(db)
                if used + len(body.encode("utf-8")) > self.max_bytes:
                    status = status_on(db, self.path)
                    db.execute("ROLLBACK")
                    raise SpoolFull(
                        full_message(status, max_bytes=self.max_bytes, now=self.clock.now())
                    )
                cursor = db.execute(
                    "INSERT INTO mail (spooled_at_ms, mail_key, job_id, sender, session, body,"
                    " destination, server) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        now_ms,
                        mail.key,
                        outgoing.job.job_id,
                        sender,
                        session,
                        body,
                        *destination_columns(outgoing),
                    ),
                )
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                rollback(db)
                if disk_full(exc):
                    raise SpoolFull(self._full_disk_message()) from exc
                raise failed(self.path, "write", exc) from exc
        row_id = cursor.lastrowid
        if row_id is None:  # sqlite3 always sets it after an INSERT
            raise SpoolFailed(f"the spool {self.path} kept no row id")
        return row_id

    def _full_disk_message(self) -> str:
        try:
            with self.database.connection() as db:
                status = status_on(db, self.path)
        except (SpoolFailed, SpoolFull, sqlite3.Error):
            return f"spool full: the disk holding {self.path} is full; nothing was written"
        text = full_message(status, max_bytes=self.max_bytes, now=self.clock.now())
        return text.replace("spool full:", f"spool full (the disk holding {self.path} is full):")

    def waiting(
        self,
        *,
        after_id: int = 0,
        limit: int = PAGE,
        lane: tuple[str, str] | None = None,
        adopt: bool = False,
    ) -> list[SpoolRow]:
        """The waiting rows meant for this database after ``after_id``, in spool order.

        Args:
            after_id: the last row already seen.
            limit: the most rows returned.
            lane: only this ``(sender, recipient session)``.
            adopt: every waiting row, whatever database it was meant for.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.database.exists():
            return []
        mine, params = self.database.mine(adopt=adopt)
        with self.database.reading() as db:
            if lane is None:
                rows = db.execute(
                    "SELECT id, spooled_at_ms, mail_key, body FROM mail"  # noqa: S608 - fixed conditions
                    f" WHERE ({mine}) AND id > ? ORDER BY id LIMIT ?",
                    (*params, after_id, limit),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT id, spooled_at_ms, mail_key, body FROM mail"  # noqa: S608 - fixed conditions
                    f" WHERE ({mine}) AND sender = ? AND session = ? AND id > ?"
                    " ORDER BY id LIMIT ?",
                    (*params, *lane, after_id, limit),
                ).fetchall()
        return [
            SpoolRow(id=int(r[0]), spooled_at=time_of(r[1]), key=str(r[2]), body=r[3]) for r in rows
        ]

    def is_waiting(self, key: str) -> bool:
        """Whether mail under ``key`` waits in the spool.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.database.exists():
            return False
        with self.database.reading() as db:
            found = db.execute("SELECT 1 FROM mail WHERE mail_key = ? LIMIT 1", (key,)).fetchone()
        return found is not None

    def mail(self, key: str) -> Mail | None:
        """The mail waiting in the spool under ``key`` (the latest), or None.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.database.exists():
            return None
        with self.database.reading() as db:
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
        with self.database.writing() as db:
            db.executemany("DELETE FROM mail WHERE id = ?", [(i,) for i in ids])


def destination_columns(outgoing: Outgoing) -> tuple[str | None, str | None]:
    """The ``destination`` and ``server`` columns of a mail's row (NULL: it records none)."""
    where = outgoing.destination
    return (None, None) if where is None else (where.key, where.server)
