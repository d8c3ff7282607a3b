"""The mail room: fan out replies, drain the outbox, tell when the next drain is owed."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from birddog.core.delivery import (
    DeadReason,
    DeliveryResult,
    Failed,
    OutboxRow,
    Receipt,
    RowState,
    as_result,
    decide,
    new_row,
)
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.fanout import replies_for
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, Job
from birddog.core.schedule import Random, RetrySchedule
from birddog.ports import Clock, Outbox, Page, Transport, WakeScheduler

PAGE_SIZE = 64
"""A drain reads at most this many rows."""


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What one drain did.

    Attributes:
        claimed: rows claimed and posted.
        delivered: keys that became receipts.
        retried: keys rescheduled after a failure.
        deferred: keys moved by a deferral, without a strike.
        dead: ``(key, reason)`` of rows that became dead letters.
        skipped: keys whose outcome was not stored because another claim took the row.
        more: the page was full; a wake was scheduled for now to continue after it.
    """

    claimed: int = 0
    delivered: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    dead: list[tuple[str, DeadReason]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    more: bool = False
    results: dict[str, DeliveryResult] = field(default_factory=dict, repr=False)

    def counts(self) -> Counter[str]:
        """Counts by outcome, for logs and metrics."""
        return Counter(
            delivered=len(self.delivered),
            retried=len(self.retried),
            deferred=len(self.deferred),
            dead=len(self.dead),
            skipped=len(self.skipped),
        )


class MailRoom:
    """Fans out replies into the outbox and delivers them through the transport.

    Args:
        outbox: where owed replies, receipts and dead letters live.
        transport: posts one reply.
        wake: arms the timer that runs the next drain.
        clock: the current time.
        schedule: the retry schedule and age limit.
        page_size: rows per drain (default 64).
        lease_s: how long a claimed page is held before another drainer may take it.
        post_timeout_s: a post still running after this is cancelled and counts as a failure;
            None leaves the timeout to a transport that enforces its own (``HttpTransport``).
        max_content_bytes: the largest reply content fan-out accepts.
        rng: the jitter source (default: a private ``random.Random``).
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        transport: Transport,
        wake: WakeScheduler,
        clock: Clock,
        schedule: RetrySchedule | None = None,
        page_size: int = PAGE_SIZE,
        lease_s: float = 60.0,
        post_timeout_s: float | None = 30.0,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        rng: Random | None = None,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.outbox = outbox
        self.transport = transport
        self.wake = wake
        self.clock = clock
        self.schedule = schedule or RetrySchedule()
        self.page_size = page_size
        self.lease_s = lease_s
        self.post_timeout_s = post_timeout_s
        self.max_content_bytes = max_content_bytes
        self.rng = rng or random.Random().random
        self._cursor: str | None = None

    async def fan_out(
        self,
        *,
        job: Job,
        content: str,
        diagnostic: str | None = None,
        meta: Any = None,
    ) -> list[str]:
        """Write one reply per ``replyTo`` address of a settled job, then one wake.

        Replaying the same settlement writes nothing new: a key that already has a row or
        a receipt is left alone.

        Args:
            job: the settled job.
            content: the content owed to correspondents, delivered verbatim.
            diagnostic: the terminal diagnostic (failed, interrupted, outcome_unknown).
            meta: the settlement's meta; accepted for the caller's wrapper, never sent.

        Returns:
            The reply keys written by this call.
        """
        now = self.clock.now()
        replies = replies_for(
            job,
            content=content,
            diagnostic=diagnostic,
            now=now,
            max_content_bytes=self.max_content_bytes,
        )
        if not replies:
            return []
        added = await self.outbox.add([new_row(reply, now=now) for reply in replies])
        if added:
            await self.wake.schedule_wake(at=now)
        return added

    async def drain_outbox(self) -> DrainReport:
        """Post one page of due replies and store every outcome at once.

        Returns:
            What the drain did; ``more`` means a wake for now was scheduled to continue.
        """
        page = await self.outbox.claim_page(
            after_key=self._cursor,
            limit=self.page_size,
            now=self.clock.now(),
            lease_s=self.lease_s,
        )
        if not page.rows and self._cursor is not None:
            self._cursor = None
            page = await self.outbox.claim_page(
                after_key=None, limit=self.page_size, now=self.clock.now(), lease_s=self.lease_s
            )
        try:
            results = await asyncio.gather(*(self.post_one(row) for row in page.rows))
        except asyncio.CancelledError:
            # Stopped mid-page: nothing was decided, so give the rows back at once rather
            # than leave them leased. A post that reached its recipient is posted again
            # later; delivery is at least once and the reply key is the idempotency key.
            await asyncio.shield(self._release(page))
            raise
        now = self.clock.now()
        outcomes = [
            decide(row, result, now=now, schedule=self.schedule, rng=self.rng)
            for row, result in zip(page.rows, results, strict=True)
        ]
        stored = set(await self.outbox.apply(page=page, outcomes=outcomes)) if outcomes else set()
        report = _report(page.rows, results, outcomes, stored, more=page.more)
        if page.more:
            self._cursor = page.last_key
            await self.wake.schedule_wake(at=now)
        else:
            self._cursor = None
            due = await self.outbox.next_due_at()
            if due is not None:
                await self.wake.schedule_wake(at=due)
        return report

    async def next_wake_at(self) -> datetime | None:
        """The earliest owed delivery, future retries included; None when nothing is owed."""
        return await self.outbox.next_due_at()

    async def _release(self, page: Page) -> None:
        try:
            await self.outbox.release_claim(page=page)
        except Exception:
            return

    async def post_one(self, row: OutboxRow) -> DeliveryResult:
        """Post one row's reply; a timeout or a raise is a failure, never a crash."""
        try:
            if self.post_timeout_s is None:
                return as_result(await self.transport.post(row.reply))
            async with asyncio.timeout(self.post_timeout_s):
                return as_result(await self.transport.post(row.reply))
        except TimeoutError:
            return Failed(f"no answer within {self.post_timeout_s or 0:g} s")
        except Exception as exc:
            return Failed(bounded_diagnostic(f"{type(exc).__name__}: {exc}"))


async def has_pending_delivery(outbox: Outbox) -> bool:
    """Whether any reply still awaits a delivery attempt; receipts and dead letters do not."""
    return await outbox.has_pending()


def _report(
    rows: Sequence[OutboxRow],
    results: list[DeliveryResult],
    outcomes: list[OutboxRow | Receipt],
    stored: set[str],
    *,
    more: bool,
) -> DrainReport:
    report = DrainReport(claimed=len(rows), more=more)
    add_outcomes(report, list(zip(rows, results, strict=True)), outcomes, stored)
    return report


def add_outcomes(
    report: DrainReport,
    items: list[tuple[OutboxRow, DeliveryResult]],
    outcomes: list[OutboxRow | Receipt],
    stored: set[str],
) -> None:
    """Count posted rows into a report by what became of them.

    Args:
        report: the report to add to.
        items: each posted row with its delivery result.
        outcomes: the decided next state of each row, in the same order.
        stored: the keys whose outcome the outbox stored (the others lost their claim).
    """
    for (row, result), outcome in zip(items, outcomes, strict=True):
        report.results[row.key] = result
        if row.key not in stored:
            report.skipped.append(row.key)
        elif isinstance(outcome, Receipt):
            report.delivered.append(row.key)
        elif outcome.state is RowState.DEAD:
            report.dead.append((row.key, outcome.dead_reason or DeadReason.REJECTED))
        elif outcome.deferrals > row.deferrals:
            report.deferred.append(row.key)
        else:
            report.retried.append(row.key)
