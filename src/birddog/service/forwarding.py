"""Forwarding the local spool: spooled mail into the database, exactly once and in order.

:class:`SpoolForwarder` moves the rows of a :class:`~birddog.ports.Spool` into the
database through the sender's own write (the same checks and replay rules): write and
commit, then delete the row, so a crash in between is a replay the job id (or mail key)
turns into a no-op. Rows go in spool order, which keeps the order of each (sender,
recipient session). A row the database refuses for what it is (a job id replayed with
other fields, an unknown target) or that cannot be decoded moves to the spool's
quarantine with the reason and never blocks the rest; the database away keeps every row
for the next attempt (:func:`~birddog.core.spool.decide_forward` says which). Only one
forwarder works a spool at a time (the spool's forwarding lock). Mail older than the
spool's age limit is quarantined first, never sent late.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import structlog

from birddog.core.errors import BirdDogError, InvalidInput
from birddog.core.spool import (
    ForwardOutcome,
    Outgoing,
    SpoolRow,
    decide_forward,
    outgoing_from_json,
)
from birddog.ports import Spool

log = structlog.get_logger("birddog.spool")

__all__ = ["FORWARD_PAGE", "ForwardReport", "SpoolForwarder", "Write"]

FORWARD_PAGE: Final = 64
"""Rows read from the spool at once while forwarding."""

Write = Callable[[Outgoing], Awaitable[object]]
"""Writes one spooled mail as its sender would have (checks, replay rules), committing it."""


@dataclass
class ForwardReport:
    """What one forward did.

    Attributes:
        forwarded: keys written to the database (replays included), in order.
        quarantined: key -> the reason, for each row set aside.
        refused: key -> the error, for each row the database refused (those quarantined
            while writing, not for age or damage).
        kept: True when the database was away: every row from the first that failed on
            stays in the spool.
        error: why the forward stopped early (the database away), None otherwise.
        busy: another forwarder held the spool, so this one did nothing.
    """

    forwarded: list[str] = field(default_factory=list)
    quarantined: dict[str, str] = field(default_factory=dict)
    refused: dict[str, BirdDogError] = field(default_factory=dict)
    kept: bool = False
    error: str | None = None
    busy: bool = False

    @property
    def complete(self) -> bool:
        """Whether the forward ran to the end of the spool (nothing kept, not busy)."""
        return not self.kept and not self.busy


class SpoolForwarder:
    """Moves spooled mail into the database, exactly once and in order (see the module).

    Args:
        spool: the spool.
        write: writes one mail as its sender would have, committed when it returns.
        describe: the reason recorded for a write's failure (the server's own words for a
            refused statement); default: the error's message.
        page: rows read at once.
        identify: which server the writes reach (None: not known); told to the spool
            before each forward, so mail recorded for another server stays.
    """

    def __init__(
        self,
        spool: Spool,
        write: Write,
        *,
        describe: Callable[[BaseException], str] = str,
        page: int = FORWARD_PAGE,
        identify: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self.spool = spool
        self.write = write
        self.describe = describe
        self.page = page
        self.identify = identify

    async def forward(
        self, *, lane: tuple[str, str] | None = None, wait_s: float = 0.0, adopt: bool = False
    ) -> ForwardReport:
        """Forward every waiting row meant for this database (of ``lane``), in spool order.

        Then record the result. Mail meant for another database (another login, host,
        port, database or server) stays where it is, listed by ``spool status``.

        Args:
            lane: only this ``(sender, recipient session)``; None: everything.
            wait_s: how long to wait for another forwarder to finish first.
            adopt: every waiting row, whatever database it was meant for.

        Returns:
            What was forwarded, quarantined or kept.

        Raises:
            SpoolFailed: the spool cannot be read or written.
        """
        report = ForwardReport()
        if not self.spool.exists():
            return report
        async with self.spool.forwarding(wait_s=wait_s) as held:
            if not held:
                report.busy = True
                return report
            for key in await self.spool.quarantine_aged():
                report.quarantined[key] = "spooled longer than BIRDDOG_SPOOL_MAX_AGE_S"
                log.error("spool_mail_expired", key=key)
            if self.identify is not None:
                await self.spool.note_server(await self.identify())
            await self._forward_rows(report, lane, adopt=adopt)
            await self.spool.note_forward(report.error)
        if report.forwarded:
            log.info("spool_forwarded", mails=len(report.forwarded), kept=report.kept)
        return report

    async def _forward_rows(
        self, report: ForwardReport, lane: tuple[str, str] | None, *, adopt: bool
    ) -> None:
        after = 0
        while rows := await self.spool.waiting(
            after_id=after, limit=self.page, lane=lane, adopt=adopt
        ):
            done: list[int] = []
            try:
                for row in rows:
                    after = row.id
                    if not await self._forward_row(row, report, done):
                        return
            finally:
                # Written first, deleted after: a crash before this line is a replay.
                await self.spool.delete(done)

    async def _forward_row(self, row: SpoolRow, report: ForwardReport, done: list[int]) -> bool:
        """Forward one row; False when the database is away (stop, keep the rest)."""
        try:
            outgoing = outgoing_from_json(row.body)
        except InvalidInput as exc:
            reason = f"undecodable spool row: {exc}"
            await self.spool.quarantine(row.id, reason)
            report.quarantined[row.key] = reason
            log.error("spool_mail_quarantined", key=row.key, reason="undecodable")  # noqa: TRY400 - a bad row, not a bug: no traceback
            return True
        error: BaseException | None = None
        try:
            await self.write(outgoing)
        except Exception as exc:  # its outcome decides; a bug is raised on below
            error = exc
        outcome = decide_forward(error)
        if outcome is ForwardOutcome.FORWARDED:
            done.append(row.id)
            report.forwarded.append(row.key)
            return True
        if outcome is ForwardOutcome.QUARANTINED and isinstance(error, BirdDogError):
            reason = self.describe(error)
            await self.spool.quarantine(row.id, reason)
            report.quarantined[row.key] = reason
            report.refused[row.key] = error
            log.error("spool_mail_quarantined", key=row.key, error=type(error).__name__)
            return True
        report.kept = True
        report.error = str(error) if error is not None else "stopped"
        if not isinstance(error, BirdDogError):
            raise error if error is not None else RuntimeError("forward stopped")
        return False
