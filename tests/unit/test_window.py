"""The delivery window: posts flow on while a slow recipient's posts are still out."""

from __future__ import annotations

import asyncio

from birddog import AgentAddress, OutboxRow, Receipt, Reply, RowState
from birddog.window import DeliveryWindow
from tests.support import ALICE, CAROL, Room, settled_job


async def fan_out(room: Room, count: int, reply_to: list[AgentAddress], prefix: str) -> list[str]:
    keys: list[str] = []
    for i in range(count):
        keys += await room.room.fan_out(
            job=settled_job(key=f"{prefix}{i:03d}", reply_to=reply_to), content="x"
        )
    return keys


async def test_a_hanging_recipient_does_not_hold_back_the_others(room: Room) -> None:
    """While carol's posts hang, every reply to alice is delivered and stored."""
    release = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        if reply.to == CAROL:
            await release.wait()
        return True

    room.transport.answer = answer
    room.room.post_timeout_s = 30
    alice_keys = await fan_out(room, 40, [ALICE, CAROL], "m")
    window = DeliveryWindow(room.room, size=64, per_recipient=8)
    delivered: list[str] = []
    for _ in range(20):
        await window.fill()
        await window.wait(timeout_s=0.01)
        delivered += (await window.collect()).delivered
    assert set(delivered) == {k for k in alice_keys if k.endswith(":0")}
    assert window.in_flight == 8
    release.set()
    await window.wait(timeout_s=1)
    report = await window.close(grace_s=1)
    assert len(report.delivered) == 8


async def test_a_busy_recipient_is_capped_and_its_other_rows_stay_unclaimed(room: Room) -> None:
    """At most per_recipient posts to one agent are out; its other rows stay claimable."""
    gate = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        await gate.wait()
        return True

    room.transport.answer = answer
    keys = await fan_out(room, 10, [CAROL], "c")
    window = DeliveryWindow(room.room, size=64, per_recipient=3)
    await window.fill()
    assert window.in_flight == 3
    other = await room.outbox.claim_page(after_key=None, limit=64, now=room.clock.now(), lease_s=60)
    assert len(other.rows) == 7
    assert {row.key for row in other.rows} <= set(keys)
    gate.set()
    await window.close(grace_s=1)


async def test_close_gives_unfinished_rows_back_untouched(room: Room) -> None:
    """Posts still out at the end of the grace period are cancelled and their rows released."""

    async def hang(reply: Reply) -> bool:
        await asyncio.Event().wait()
        return True

    room.transport.answer = hang
    [key] = await fan_out(room, 1, [ALICE], "h")
    window = DeliveryWindow(room.room)
    await window.fill()
    await window.close(grace_s=0.01)
    row = room.outbox.rows[key]
    assert isinstance(row, OutboxRow)
    assert (row.state, row.attempts) == (RowState.PENDING, 0)
    page = await room.outbox.claim_page(after_key=None, limit=5, now=room.clock.now(), lease_s=60)
    assert [r.key for r in page.rows] == [key]


async def test_failures_are_rescheduled_like_a_drain(room: Room) -> None:
    """A failed post is decided by the same policy: an attempt used, a retry scheduled."""
    room.transport.answer = False
    [key] = await fan_out(room, 1, [ALICE], "f")
    window = DeliveryWindow(room.room)
    await window.fill()
    await window.wait(timeout_s=1)
    report = await window.collect()
    assert report.retried == [key]
    row = room.outbox.rows[key]
    assert isinstance(row, OutboxRow)
    assert row.attempts == 1
    room.transport.answer = True
    room.clock.advance(2)
    await window.fill()
    await window.wait(timeout_s=1)
    assert (await window.collect()).delivered == [key]
    assert isinstance(await room.outbox.get(key), Receipt)


async def test_fill_reports_more_when_the_window_is_full(room: Room) -> None:
    """A full window says more may be due, so the daemon waits for a slot, not a wake."""
    gate = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        await gate.wait()
        return True

    room.transport.answer = answer
    await fan_out(room, 10, [ALICE, CAROL], "w")
    window = DeliveryWindow(room.room, size=4, per_recipient=4)
    assert await window.fill() is True
    assert window.full
    gate.set()
    await window.close(grace_s=1)
