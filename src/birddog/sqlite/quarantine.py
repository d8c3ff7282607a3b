"""The spool's quarantine: mail set aside with the reason, never forwarded, put back on request.

A row the database refuses for what it is, one that cannot be decoded, and one older than
the spool's age limit move here with the reason (one transaction per move), so they never
block the rest; an operator who fixed the cause puts them back at the end of the spool.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from birddog.clock import epoch_ms
from birddog.core.errors import InvalidInput
from birddog.core.spool import aged_reason, outgoing_from_json
from birddog.sqlite.database import SpoolDatabase, time_of

__all__ = ["SpoolQuarantine"]


class SpoolQuarantine:
    """The spool's quarantine: mail moved aside with the reason, listed, put back.

    Args:
        database: the spool's file, whose ``quarantine`` table this keeps.
    """

    def __init__(self, database: SpoolDatabase) -> None:
        self.database = database

    def quarantine(self, row_id: int, reason: str) -> None:
        """Move one row to quarantine with ``reason`` (a no-op if it is gone).

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        now_ms = epoch_ms(self.database.clock.now())
        with self.database.writing() as db:
            _move_to_quarantine(db, "id = ?", (row_id,), reason, now_ms)

    def quarantine_aged(self) -> list[str]:
        """Move every row older than ``max_age_s`` to quarantine; returns their keys.

        Raises:
            SpoolFailed: the spool cannot be written.
        """
        if not self.database.exists():
            return []
        now = self.database.clock.now()
        cutoff_ms = epoch_ms(now - timedelta(seconds=self.database.max_age_s))
        reason = aged_reason(self.database.max_age_s)
        with self.database.writing() as db:
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
        if not self.database.exists():
            return []
        with self.database.reading() as db:
            rows = db.execute(
                "SELECT mail_key, reason, spooled_at_ms, quarantined_at_ms FROM quarantine"
                " ORDER BY quarantined_at_ms DESC, id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            {
                "key": key,
                "reason": reason,
                "spooled_at": time_of(spooled),
                "quarantined_at": time_of(at),
            }
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
        if not self.database.exists():
            return 0
        moved = 0
        with self.database.writing() as db:
            rows = db.execute("SELECT id, body FROM quarantine ORDER BY id").fetchall()
            now_ms = epoch_ms(self.database.clock.now())
            for row_id, body in rows:
                try:
                    outgoing = outgoing_from_json(body)
                except InvalidInput:
                    continue  # undecodable: it stays where it is, with its reason
                sender, session = outgoing.lane
                where = outgoing.destination
                db.execute(
                    "INSERT INTO mail (spooled_at_ms, mail_key, job_id, sender, session, body,"
                    " destination, server) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        now_ms,
                        outgoing.mail.key,
                        outgoing.job.job_id,
                        sender,
                        session,
                        body,
                        None if where is None else where.key,
                        None if where is None else where.server,
                    ),
                )
                db.execute("DELETE FROM quarantine WHERE id = ?", (row_id,))
                moved += 1
        return moved

    def quarantine_reason(self, key: str) -> str | None:
        """Why mail under ``key`` was quarantined (the latest), or None if it was not.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if not self.database.exists():
            return None
        with self.database.reading() as db:
            row = db.execute(
                "SELECT reason FROM quarantine WHERE mail_key = ? ORDER BY id DESC LIMIT 1",
                (key,),
            ).fetchone()
        return None if row is None else str(row[0])


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
