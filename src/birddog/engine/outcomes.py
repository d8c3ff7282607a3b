"""The outcome store: what finished posts decided, stored a claim's worth at a time.

Fates (:class:`~birddog.engine.claims.Decided`) wait here until the loop stores them: each
is decided by the pure :func:`~birddog.core.delivery.decide_delivery` at the time of the store, and
all of them go to the outbox in one ``store`` (one transaction). If the database refuses
the statement as a whole (:class:`~birddog.core.errors.StoreRefused`: one row's stored
fields can make it fail), they are stored apart, one by one, and a row whose own outcome
is refused is buried as ``undecodable`` with the reason. Outcomes a store could not write
(the database is away) stay here for the next store. The store builds the
:class:`DrainReport`; rows given back unposted go through :meth:`OutcomeStore.release`,
and :meth:`OutcomeStore.arm_wake` is the one wake policy.

Where set-based stores of a batch's outcomes would go: :meth:`OutcomeStore.store` already
hands every outcome of the store to one ``Outbox.store`` call; how that call writes them
is the adapter's.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

import structlog

from birddog.core.delivery import (
    Attempt,
    DeadReason,
    DeliveryResult,
    OutboxRow,
    Receipt,
    RowOutcome,
    RowState,
    UndecodableRow,
    attempt_of,
    decide_delivery,
)
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import StoreRefused
from birddog.core.schedule import Random, RetrySchedule
from birddog.core.text import printable
from birddog.engine.claims import Decided, Held, Post, earliest
from birddog.ports import Clock, Outbox, Settled, WakeScheduler

log = structlog.get_logger("birddog.engine")


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What one drain (or one store of finished posts) did.

    Attributes:
        claimed: rows whose outcome was decided (posted, delivered to a mailbox, buried).
        delivered: keys that became receipts.
        retried: keys rescheduled after a failure.
        deferred: keys moved by a deferral, without a strike.
        dead: ``(key, reason)`` of rows that became dead letters.
        skipped: keys whose outcome was not stored because another claim took the row.
        more: the page was full; a wake was scheduled for now to continue after it.
        results: each posted key's delivery result.
        dead_rows: the dead letters themselves (for alerts), in ``dead`` order.
    """

    claimed: int = 0
    delivered: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    dead: list[tuple[str, DeadReason]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    more: bool = False
    results: dict[str, DeliveryResult] = field(default_factory=dict, repr=False)
    dead_rows: list[OutboxRow | UndecodableRow] = field(default_factory=list, repr=False)

    def counts(self) -> Counter[str]:
        """Counts by outcome, for logs and metrics."""
        return Counter(
            delivered=len(self.delivered),
            retried=len(self.retried),
            deferred=len(self.deferred),
            dead=len(self.dead),
            skipped=len(self.skipped),
        )

    def add(self, other: DrainReport) -> DrainReport:
        """This report and ``other`` together (``more`` from either)."""
        return DrainReport(
            claimed=self.claimed + other.claimed,
            delivered=self.delivered + other.delivered,
            retried=self.retried + other.retried,
            deferred=self.deferred + other.deferred,
            dead=self.dead + other.dead,
            skipped=self.skipped + other.skipped,
            more=self.more or other.more,
            results=self.results | other.results,
            dead_rows=self.dead_rows + other.dead_rows,
        )


class Stored(NamedTuple):
    """What one :meth:`OutcomeStore.store` did.

    Attributes:
        report: what was stored.
        rows: the rows it let go of (stored, or left to their lease): the window's to forget.
        retry_at: the earliest retry or deferral it wrote, if any.
    """

    report: DrainReport
    rows: int
    retry_at: datetime | None


class OutcomeStore:
    """Keeps known fates until they are stored; stores, releases and arms the next wake.

    Args:
        outbox: where outcomes are stored and rows released.
        wake: arms wakes.
        clock: the current time (each outcome is decided at the time of its store).
        schedule: the retry schedule and age limit (a route's policy may override the
            age limit and the attempts for its rows).
        rng: the jitter source for retry delays.
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        wake: WakeScheduler,
        clock: Clock,
        schedule: RetrySchedule,
        rng: Random,
    ) -> None:
        self.outbox = outbox
        self.wake = wake
        self.clock = clock
        self.schedule = schedule
        self.rng = rng
        self._unstored: list[Decided] = []

    @property
    def unstored(self) -> int:
        """Fates known and not yet stored (a store under way holds its own)."""
        return len(self._unstored)

    def add(self, fates: Iterable[Decided]) -> None:
        """Keep fates known without a post (buried, delivered to a mailbox, rejected)."""
        self._unstored.extend(fates)

    def add_posted(self, post: Post, results: Sequence[DeliveryResult], *, seconds: float) -> None:
        """Keep the fates of a post that ended: one per row, with its attempt.

        Rows of a batch that share one answer (equal results) share one attempt.
        """
        attempts: dict[DeliveryResult, Attempt] = {}
        for (claim, row), result in zip(post.items, results, strict=True):
            if (attempt := attempts.get(result)) is None:
                attempt = attempts[result] = attempt_of(result, at=post.at, seconds=seconds)
            self._unstored.append(Decided(claim, row, result, attempt))

    async def store(self) -> Stored:
        """Store every known fate: one transaction, or one per row after a refusal.

        Fates that arrive while the store is out wait for the next one.

        Returns:
            What was stored, how many rows that let go of, and the earliest retry written.

        Raises:
            StoreUnavailable: the database is away; every fate is kept for the next store.
        """
        if not self._unstored:
            return Stored(DrainReport(), 0, None)
        pending, self._unstored = self._unstored, []
        try:
            try:
                report, retry_at = await self._store(pending, self.clock.now())
            except StoreRefused:
                # One row's stored fields can make the whole statement fail.
                report, retry_at = await self._store_apart(pending)
        except BaseException:
            # Not stored (the database is away): keep them for the next call.
            self._unstored = pending + self._unstored
            raise
        return Stored(report, len(pending), retry_at)

    async def release(self, items: Sequence[Held], *, wake: bool) -> None:
        """The one release path: rows go back untouched, due as before, their lease ended.

        Never raises: a row not released comes back when its lease ends.

        Args:
            items: the rows and the claims that hold them.
            wake: arm a wake for the earliest of them (another drainer may be asleep).
        """
        if not items:
            return
        with contextlib.suppress(Exception):
            await self.outbox.release_rows([(claim.page.claim, row.key) for claim, row in items])
        if wake:
            with contextlib.suppress(Exception):
                await self.wake.schedule_wake(at=min(row.due_at for _, row in items))

    async def arm_wake(self, *, at: datetime | None, next_due: bool = False) -> None:
        """The wake policy: one wake, for ``at`` or (with ``next_due``) the next owed row.

        Args:
            at: the earliest of what must wake a drainer (retries written, a full page).
            next_due: also consider the outbox's earliest owed row.
        """
        if next_due:
            at = earliest(at, await self.outbox.next_due_at())
        if at is not None:
            await self.wake.schedule_wake(at=at)

    async def _store_apart(self, fates: list[Decided]) -> tuple[DrainReport, datetime | None]:
        """Store outcomes one by one after the database refused them together.

        A row whose own outcome is refused (its stored fields are damaged: a count at
        the integer's limit, say) is buried as ``undecodable`` with the reason, so it
        cannot hold back the others. If even that is refused, the row is left to its
        lease, logged, and comes back after it.

        Raises:
            StoreUnavailable: the database went away; nothing of ``fates`` is lost (the
                ones stored are skipped when they come back: their claim ended).
        """
        report = DrainReport()
        retry_at: datetime | None = None
        for fate in fates:
            now = self.clock.now()
            try:
                stored, when = await self._store([fate], now)
            except StoreRefused as refused:
                buried = Decided(fate.claim, _unstorable(fate.row, refused), None, None)
                try:
                    stored, when = await self._store([buried], now)
                except StoreRefused:
                    stored, when = DrainReport(claimed=1, skipped=[fate.row.key]), None
                    # No traceback: the server's text may quote the row. Class and SQLSTATE.
                    log.error(  # noqa: TRY400
                        "row_unstorable", key=printable(fate.row.key), error=str(refused)
                    )
            report = report.add(stored)
            retry_at = earliest(retry_at, when)
        return report, retry_at

    async def _store(
        self, fates: list[Decided], now: datetime
    ) -> tuple[DrainReport, datetime | None]:
        """Decide and store known outcomes (one transaction); the earliest retry written."""
        settled: list[Settled] = []
        for fate in fates:
            row = fate.row
            outcome: RowOutcome = (
                row
                if isinstance(row, UndecodableRow) or fate.result is None
                else decide_delivery(
                    row,
                    fate.result,
                    now=now,
                    # The route's own age limit and attempts, where it sets them.
                    schedule=fate.claim.page.route(row.agent_id).policy.schedule(self.schedule),
                    rng=self.rng,
                )
            )
            settled.append(Settled(fate.claim.page.claim, outcome, fate.attempt, fate.mailbox))
        stored = set(await self.outbox.store(settled))
        report = DrainReport(claimed=len(fates))
        retry_at: datetime | None = None
        for fate, item in zip(fates, settled, strict=True):
            outcome = item.outcome
            key = outcome.key
            if fate.result is not None:
                report.results[key] = fate.result
            if key not in stored:
                report.skipped.append(key)
            elif isinstance(outcome, Receipt):
                report.delivered.append(key)
            elif outcome.state is RowState.DEAD:
                report.dead.append((key, outcome.dead_reason or DeadReason.REJECTED))
                report.dead_rows.append(outcome)
            else:
                retry_at = earliest(retry_at, outcome.due_at)
                before = fate.row
                if isinstance(before, OutboxRow) and outcome.deferrals > before.deferrals:
                    report.deferred.append(key)
                else:
                    report.retried.append(key)
        return report, retry_at


def _unstorable(row: OutboxRow | UndecodableRow, refused: StoreRefused) -> UndecodableRow:
    """A row whose outcome the database refused, as a row to bury with the reason."""
    error = bounded_diagnostic(f"its outcome could not be stored, the row is damaged: {refused}")
    if isinstance(row, UndecodableRow):
        return replace(row, error=error)
    return UndecodableRow(
        key=row.key,
        agent_id=row.agent_id,
        attempts=row.attempts,
        deferrals=row.deferrals,
        due_at=row.due_at,
        error=error,
    )


__all__ = ["DrainReport", "OutcomeStore", "Stored"]
