"""The outcome store on its own: one store per call, stores apart, lost claims, release, wakes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest
import structlog

from birddog import Accepted, DeadReason, Deferred, DeliveryResult, Failed, Receipt, Rejected
from birddog.core.delivery import UndecodableRow, attempt_of
from birddog.core.errors import StoreRefused, StoreUnavailable
from birddog.core.policy import RoutePolicy
from birddog.core.schedule import RetrySchedule
from birddog.engine.claims import Claim, Decided, Post
from birddog.engine.outcomes import OutcomeStore
from birddog.ports import RouteHint, Settled
from birddog.testing import FrozenClock, InMemoryOutbox, ManualWake
from tests.support import at, make_row


class RefusingOutbox(InMemoryOutbox):
    """An in-memory outbox whose database refuses some statements, or is away.

    Attributes:
        damaged: keys whose outcome the database refuses (as a value out of range).
        buried_too: also refuse burying the damaged rows.
        away: stores that fail as if the database were away, before any succeeds.
    """

    def __init__(self) -> None:
        super().__init__()
        self.damaged: set[str] = set()
        self.buried_too = False
        self.away = 0
        self.stores: list[list[str]] = []

    async def store(self, items: Sequence[Settled]) -> list[str]:
        """Refuse a statement that writes a damaged row; else store as the fake does."""
        self.stores.append([item.outcome.key for item in items])
        if self.away:
            self.away -= 1
            raise StoreUnavailable("connection lost")
        for item in items:
            burying = isinstance(item.outcome, UndecodableRow)
            if item.outcome.key in self.damaged and (self.buried_too or not burying):
                raise StoreRefused("NumericValueOutOfRangeError (SQLSTATE 22003)")
        return await super().store(items)


class Parts:
    """An outcome store on a refusing in-memory outbox, a manual wake and a frozen clock."""

    def __init__(self) -> None:
        self.outbox = RefusingOutbox()
        self.wake = ManualWake()
        self.clock = FrozenClock()
        self.store = OutcomeStore(
            outbox=self.outbox,
            wake=self.wake,
            clock=self.clock,
            schedule=RetrySchedule(),
            rng=lambda: 0.5,
        )

    async def claim(self, *keys: str) -> Claim:
        """Add rows under ``keys`` (due now) and claim them all."""
        await self.outbox.add([make_row(key) for key in keys])
        page = await self.outbox.claim_page(
            after_key=None, limit=len(keys), now=self.clock.now(), lease_s=60
        )
        assert sorted(row.key for row in page.rows) == sorted(keys)
        return Claim(page=page, taken_at=0.0)

    def answered(self, claim: Claim, *results: DeliveryResult) -> None:
        """Keep the fate of each row of ``claim`` (in key order) as answered by ``results``."""
        now = self.clock.now()
        self.store.add(
            Decided(claim, row, result, attempt_of(result, at=now, seconds=0.0))
            for row, result in zip(claim.page.rows, results, strict=True)
        )


async def test_one_store_writes_every_fate_and_reports_each_kind() -> None:
    """Accepted, failed, deferred and rejected rows go in one store, each reported as such."""
    parts = Parts()
    claim = await parts.claim(
        "outbox:a:reply:0", "outbox:b:reply:0", "outbox:c:reply:0", "outbox:d:reply:0"
    )
    parts.answered(claim, Accepted(), Failed("500"), Deferred(until=at(30)), Rejected("no"))
    assert parts.store.unstored == 4
    stored = await parts.store.store()
    assert parts.outbox.stores == [[row.key for row in claim.page.rows]]
    assert (stored.rows, stored.report.claimed, parts.store.unstored) == (4, 4, 0)
    report = stored.report
    assert report.delivered == ["outbox:a:reply:0"]
    assert report.retried == ["outbox:b:reply:0"]
    assert report.deferred == ["outbox:c:reply:0"]
    assert report.dead == [("outbox:d:reply:0", DeadReason.REJECTED)]
    assert isinstance(parts.outbox.receipts["outbox:a:reply:0"], Receipt)
    retry_at = parts.outbox.rows["outbox:b:reply:0"].due_at
    assert retry_at == parts.clock.now() + timedelta(seconds=1)
    assert stored.retry_at == retry_at
    assert parts.wake.scheduled == []


async def test_nothing_known_stores_nothing() -> None:
    """With no fate waiting, a store writes nothing and lets go of no row."""
    parts = Parts()
    stored = await parts.store.store()
    assert (stored.rows, stored.retry_at, stored.report.claimed) == (0, None, 0)
    assert parts.outbox.stores == []


async def test_a_fate_whose_claim_lost_the_row_is_skipped() -> None:
    """A row another drainer claimed after the lease ended is not stored by the old claim."""
    parts = Parts()
    claim = await parts.claim("outbox:late:reply:0")
    parts.clock.advance(61)
    again = await parts.outbox.claim_page(
        after_key=None, limit=1, now=parts.clock.now(), lease_s=60
    )
    assert len(again.rows) == 1
    parts.answered(claim, Accepted())
    stored = await parts.store.store()
    assert stored.report.skipped == ["outbox:late:reply:0"]
    assert stored.report.delivered == []
    assert parts.outbox.receipts == {}


async def test_a_refused_store_is_stored_apart_and_the_damaged_row_buried() -> None:
    """The database refuses one row's outcome: the others are stored, that row buried."""
    parts = Parts()
    claim = await parts.claim("outbox:1:reply:0", "outbox:2:reply:0", "outbox:3:reply:0")
    parts.outbox.damaged = {"outbox:2:reply:0"}
    parts.answered(claim, Accepted(), Failed("500"), Accepted())
    stored = await parts.store.store()
    assert stored.rows == 3
    assert stored.report.delivered == ["outbox:1:reply:0", "outbox:3:reply:0"]
    assert stored.report.dead == [("outbox:2:reply:0", DeadReason.UNDECODABLE)]
    buried = parts.outbox.buried["outbox:2:reply:0"]
    assert buried.error.startswith("its outcome could not be stored, the row is damaged")
    assert "SQLSTATE 22003" in buried.error
    assert len(parts.outbox.stores) == 1 + 4  # together, then 1, 2 (refused), 2 buried, 3


async def test_a_row_refused_even_buried_is_left_to_its_lease_and_logged() -> None:
    """When even burying is refused, the row is skipped and the refusal logged, never raised."""
    parts = Parts()
    claim = await parts.claim("outbox:1:reply:0", "outbox:2:reply:0")
    parts.outbox.damaged = {"outbox:1:reply:0"}
    parts.outbox.buried_too = True
    parts.answered(claim, Accepted(), Accepted())
    with structlog.testing.capture_logs() as logs:
        stored = await parts.store.store()
    assert stored.report.skipped == ["outbox:1:reply:0"]
    assert stored.report.delivered == ["outbox:2:reply:0"]
    assert [(log["event"], log["key"]) for log in logs] == [("row_unstorable", "outbox:1:reply:0")]
    assert "outbox:1:reply:0" in parts.outbox.rows


async def test_a_store_that_fails_keeps_every_fate_for_the_next() -> None:
    """The database away: the store raises, nothing is lost, the next store writes it all."""
    parts = Parts()
    claim = await parts.claim("outbox:1:reply:0", "outbox:2:reply:0")
    parts.outbox.away = 1
    parts.answered(claim, Accepted(), Accepted())
    with pytest.raises(StoreUnavailable):
        await parts.store.store()
    assert parts.store.unstored == 2
    stored = await parts.store.store()
    assert (stored.rows, sorted(stored.report.delivered)) == (2, sorted(parts.outbox.receipts))
    assert len(parts.outbox.receipts) == 2


async def test_a_posts_fates_carry_its_attempt_time_and_duration() -> None:
    """Each row of a post is logged as attempted when the post started, for as long as it took."""
    parts = Parts()
    claim = await parts.claim("outbox:1:reply:0", "outbox:2:reply:0")
    items = [(claim, row) for row in claim.page.rows]
    post = Post(items=items, at=parts.clock.now(), started=0.0)
    parts.clock.advance(5)
    parts.store.add_posted(post, [Accepted(status=200), Failed("503", status=503)], seconds=0.25)
    await parts.store.store()
    logs = parts.outbox.attempt_logs
    assert [(entry.at, entry.ms, entry.status) for entry in logs["outbox:1:reply:0"]] == [
        (post.at, 250, 200)
    ]
    assert [entry.result for entry in logs["outbox:2:reply:0"]] == ["failed"]


async def test_release_gives_rows_back_untouched_and_wakes_for_the_earliest() -> None:
    """Released rows are claimable at once, unchanged, and a wake is armed for the earliest."""
    parts = Parts()
    claim = await parts.claim("outbox:1:reply:0", "outbox:2:reply:0")
    items = [(claim, row) for row in claim.page.rows]
    await parts.store.release(items, wake=True)
    page = await parts.outbox.claim_page(after_key=None, limit=9, now=parts.clock.now(), lease_s=60)
    assert list(page.rows) == list(claim.page.rows)
    assert parts.wake.scheduled == [min(row.due_at for row in claim.page.rows)]
    await parts.store.release(items, wake=False)
    await parts.store.release([], wake=True)
    assert len(parts.wake.scheduled) == 1


async def test_the_wake_policy_arms_one_wake_for_the_earliest_owed() -> None:
    """One wake: for the time given, or the next owed row when asked, whichever is earlier."""
    parts = Parts()
    await parts.outbox.add([make_row("outbox:later:reply:0", due=30)])
    await parts.store.arm_wake(at=None)
    assert parts.wake.scheduled == []
    await parts.store.arm_wake(at=at(60), next_due=True)
    await parts.store.arm_wake(at=at(10), next_due=True)
    assert parts.wake.scheduled == [at(30), at(10)]


async def claim_with_policy(parts: Parts, policy: RoutePolicy) -> Claim:
    """Claim a row of alice's, whose route has ``policy``, and one of bob's, with none."""
    await parts.outbox.add(
        [make_row("outbox:a:reply:0", agent="alice"), make_row("outbox:b:reply:0", agent="bob")]
    )
    page = await parts.outbox.claim_page(after_key=None, limit=2, now=parts.clock.now(), lease_s=60)
    return Claim(page=replace(page, routes={"alice": RouteHint(policy=policy)}), taken_at=0.0)


async def test_a_routes_own_age_limit_ends_its_rows_where_the_default_would_retry() -> None:
    """Two hours old, alice's row dies past her route's 1 h; bob's, under the default day, waits."""
    parts = Parts()
    claim = await claim_with_policy(parts, RoutePolicy(max_age_s=3600))
    parts.clock.advance(2 * 3600)
    parts.answered(claim, Failed("500"), Failed("500"))
    report = (await parts.store.store()).report
    assert report.dead == [("outbox:a:reply:0", DeadReason.MAX_AGE_EXCEEDED)]
    assert report.retried == ["outbox:b:reply:0"]


async def test_a_routes_own_attempts_end_its_rows_where_the_default_would_retry() -> None:
    """With max attempts 1, alice's row dies at its first failure; bob's is retried."""
    parts = Parts()
    claim = await claim_with_policy(parts, RoutePolicy(max_attempts=1))
    parts.answered(claim, Failed("500"), Failed("500"))
    report = (await parts.store.store()).report
    assert report.dead == [("outbox:a:reply:0", DeadReason.ATTEMPTS_EXHAUSTED)]
    assert report.retried == ["outbox:b:reply:0"]
