"""Draining: pages in key order, retries, deferrals, receipts, dead letters, wakes."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from birddog import (
    DeadReason,
    Deferred,
    Failed,
    OutboxRow,
    Receipt,
    Rejected,
    Reply,
    RetrySchedule,
    RowState,
    has_pending_delivery,
)
from tests.support import ALICE, CAROL, Room, settled_job


async def fan_out_many(room: Room, count: int) -> list[str]:
    keys: list[str] = []
    for i in range(count):
        keys += await room.room.fan_out(
            job=settled_job(key=f"m{i:04d}", reply_to=[ALICE]), content="x"
        )
    return keys


async def test_pages_of_64_in_key_order_continuing_after_the_last_key() -> None:
    """Each drain posts at most 64 rows in key order and the next continues after them."""
    room = Room()
    keys = await fan_out_many(room, 150)
    room.wake.scheduled.clear()
    first = await room.room.drain_outbox()
    assert first.claimed == 64
    assert first.more
    assert [r.key for r in room.transport.sent] == sorted(keys)[:64]
    assert room.wake.scheduled == [room.clock.now()]
    second = await room.room.drain_outbox()
    third = await room.room.drain_outbox()
    assert (second.claimed, third.claimed, third.more) == (64, 22, False)
    assert [r.key for r in room.transport.sent] == sorted(keys)
    assert len(room.outbox.receipts) == 150


async def test_paging_restarts_from_the_top_once_the_end_is_reached() -> None:
    """After the last page, the next drain starts again from the first due key."""
    room = Room(page_size=2)
    await fan_out_many(room, 3)
    room.transport.answer = False
    for _ in range(2):
        await room.room.drain_outbox()
    room.clock.advance(60)
    room.transport.answer = True
    report = await room.room.drain_outbox()
    assert report.delivered == ["outbox:m0000:reply:0", "outbox:m0001:reply:0"]


async def test_accepted_rows_become_receipts_under_the_same_key(room: Room) -> None:
    """Delivered replies leave the outbox and leave a compact receipt."""
    keys = await room.room.fan_out(job=settled_job(), content="x")
    report = await room.room.drain_outbox()
    assert report.delivered == keys
    assert set(room.outbox.receipts) == set(keys)
    receipt = room.outbox.receipts[keys[0]]
    assert (receipt.attempts, receipt.command_id, receipt.recipient) == (1, "cmd-mail-1", ALICE)


async def test_false_and_raise_reschedule_by_the_schedule(room: Room) -> None:
    """A False answer or a raised error costs an attempt and waits the schedule's delay."""

    def answer(reply: Reply) -> bool:
        if reply.to == CAROL:
            raise ConnectionError("refused")
        return False

    room.transport.answer = answer
    keys = await room.room.fan_out(job=settled_job(), content="x")
    report = await room.room.drain_outbox()
    assert report.retried == keys
    for key in keys:
        row = room.outbox.rows[key]
        assert (row.attempts, row.due_at) == (1, room.clock.now() + timedelta(seconds=1))
    assert "ConnectionError: refused" in (room.outbox.rows[keys[1]].last_error or "")
    assert room.wake.scheduled[-1] == room.clock.now() + timedelta(seconds=1)


async def test_rows_not_due_are_not_posted(room: Room) -> None:
    """A rescheduled row waits until its due time."""
    room.transport.answer = False
    await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    await room.room.drain_outbox()
    report = await room.room.drain_outbox()
    assert report.claimed == 0
    room.clock.advance(1)
    assert (await room.room.drain_outbox()).claimed == 1


async def test_a_row_dies_after_the_last_attempt() -> None:
    """After max_attempts failures the row is a dead letter with its reason."""
    room = Room(schedule=RetrySchedule(max_attempts=3))
    room.transport.answer = False
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    for _ in range(3):
        await room.room.drain_outbox()
        room.clock.advance(3600)
    row = room.outbox.rows[key]
    assert (row.state, row.attempts, row.dead_reason) == (
        RowState.DEAD,
        3,
        DeadReason.ATTEMPTS_EXHAUSTED,
    )
    assert room.outbox.dead_letters == {key: row}
    assert len(room.transport.sent) == 3


async def test_a_row_dies_past_the_maximum_age() -> None:
    """A row older than the maximum age dies at its next failure."""
    room = Room(schedule=RetrySchedule(max_age_s=60))
    room.transport.answer = False
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    room.clock.advance(61)
    report = await room.room.drain_outbox()
    assert report.dead == [(key, DeadReason.MAX_AGE_EXCEEDED)]


async def test_a_deferral_moves_the_row_without_a_strike(room: Room) -> None:
    """A 429-style deferral moves the due time and keeps the attempt count."""
    until = room.clock.now() + timedelta(seconds=300)
    room.transport.answer = Deferred(until, "HTTP 429")
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    report = await room.room.drain_outbox()
    assert report.deferred == [key]
    row = room.outbox.rows[key]
    assert (row.attempts, row.deferrals, row.due_at, row.last_error) == (0, 1, until, "HTTP 429")


async def test_rejected_dies_at_once(room: Room) -> None:
    """A rejected reply (410, unknown recipient) is a dead letter after one attempt."""
    room.transport.answer = Rejected("no route", DeadReason.UNKNOWN_RECIPIENT)
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    report = await room.room.drain_outbox()
    assert report.dead == [(key, DeadReason.UNKNOWN_RECIPIENT)]


async def test_a_hanging_post_times_out_as_a_failure() -> None:
    """A post that never answers is cancelled at the timeout and counts as a failure."""
    room = Room()
    cancelled = asyncio.Event()

    async def hang(reply: Reply) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    room.transport.answer = hang
    room.room.post_timeout_s = 0.05
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    report = await room.room.drain_outbox()
    assert report.retried == [key]
    assert cancelled.is_set()
    assert "no answer within" in (room.outbox.rows[key].last_error or "")


async def test_has_pending_delivery_ignores_receipts_and_dead_letters(room: Room) -> None:
    """Only owed replies count as pending; receipts and dead letters do not."""
    assert not await has_pending_delivery(room.outbox)

    def answer(reply: Reply) -> bool | Rejected:
        return True if reply.to == ALICE else Rejected("gone", DeadReason.GONE)

    room.transport.answer = answer
    await room.room.fan_out(job=settled_job(), content="x")
    assert await has_pending_delivery(room.outbox)
    await room.room.drain_outbox()
    assert len(room.outbox.receipts) == 1
    assert len(room.outbox.dead_letters) == 1
    assert not await has_pending_delivery(room.outbox)


async def test_next_wake_at_is_the_earliest_owed_delivery_retries_included(room: Room) -> None:
    """next_wake_at is the earliest due row, a future retry included, None when all done."""
    assert await room.room.next_wake_at() is None
    room.transport.answer = Failed("503")
    await room.room.fan_out(job=settled_job(key="a", reply_to=[ALICE]), content="x")
    await room.room.drain_outbox()
    retry_at = room.clock.now() + timedelta(seconds=1)
    assert await room.room.next_wake_at() == retry_at
    room.clock.advance(0.5)
    await room.room.fan_out(job=settled_job(key="b", reply_to=[ALICE]), content="x")
    assert await room.room.next_wake_at() == room.clock.now()
    room.transport.answer = True
    room.clock.advance(1)
    await room.room.drain_outbox()
    assert await room.room.next_wake_at() is None


async def test_held_recipients_are_untouched_until_released(room: Room) -> None:
    """A held recipient's rows are not posted or aged for strikes, and flow once released."""
    room.outbox.hold("carol")
    await room.room.fan_out(job=settled_job(), content="x")
    await room.room.drain_outbox()
    assert [r.to for r in room.transport.sent] == [ALICE]
    carol_row = room.outbox.rows["outbox:mail-1:reply:1"]
    assert isinstance(carol_row, OutboxRow)
    assert carol_row.attempts == 0
    assert await has_pending_delivery(room.outbox)
    room.outbox.release("carol")
    await room.room.drain_outbox()
    assert isinstance(await room.outbox.get("outbox:mail-1:reply:1"), Receipt)


async def test_stale_claims_store_nothing(room: Room) -> None:
    """When another drainer took the rows after the lease expired, the first stores nothing."""
    slow_started = asyncio.Event()
    go = asyncio.Event()

    async def slow(reply: Reply) -> bool:
        slow_started.set()
        await go.wait()
        return True

    room.transport.answer = slow
    room.room.lease_s = 10
    room.room.post_timeout_s = 5
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    first = asyncio.create_task(room.room.drain_outbox())
    await slow_started.wait()
    room.clock.advance(11)
    other = Room()
    other.outbox = room.outbox
    other.room.outbox = room.outbox
    other.room.clock = room.clock
    other.transport.answer = False
    await other.room.drain_outbox()
    go.set()
    report = await first
    assert report.skipped == [key]
    assert report.delivered == []
    row = room.outbox.rows[key]
    assert isinstance(row, OutboxRow)
    assert row.attempts == 1


async def test_a_drain_cancelled_mid_page_gives_its_rows_back(room: Room) -> None:
    """Cancelling a drain (shutdown) releases its claim: the rows are claimable at once."""
    started = asyncio.Event()

    async def hang(reply: Reply) -> bool:
        started.set()
        await asyncio.Event().wait()
        return True

    room.transport.answer = hang
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    drain = asyncio.create_task(room.room.drain_outbox())
    await started.wait()
    drain.cancel()
    with pytest.raises(asyncio.CancelledError):
        await drain
    row = room.outbox.rows[key]
    assert isinstance(row, OutboxRow)
    assert (row.attempts, row.state) == (0, RowState.PENDING)
    room.transport.answer = True
    report = await room.room.drain_outbox()
    assert report.delivered == [key]


async def test_in_memory_release_gives_rows_the_age_they_had_at_the_hold() -> None:
    """The reference outbox pauses a held recipient's age clock like the Postgres one."""
    room = Room()
    [key] = await room.room.fan_out(job=settled_job(key="m-held", reply_to=[ALICE]), content="x")
    room.clock.advance(60)
    room.outbox.hold(ALICE.agent_id, now=room.clock.now())
    room.clock.advance(7200)
    room.outbox.release(ALICE.agent_id, now=room.clock.now())
    assert room.clock.now() - room.outbox.rows[key].created_at == timedelta(seconds=60)
