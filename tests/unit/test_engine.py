"""The drain engine run continuously, on fakes: refills, adaptive limits, admission, giving back."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from birddog import Accepted, AgentAddress, DeadReason, Failed, OutboxRow, Receipt, Reply
from birddog.engine import DeliveryEngine, DrainReport
from birddog.ports import Settled
from birddog.testing import Answer, ManualListener
from tests.support import ALICE, CAROL, Room, eventually, make_row, settled_job

DEADLINE_S = 5.0


async def fan_out(room: Room, count: int, reply_to: list[AgentAddress], prefix: str) -> list[str]:
    keys: list[str] = []
    for i in range(count):
        keys += await room.room.fan_out(
            job=settled_job(key=f"{prefix}{i:03d}", reply_to=reply_to), content="x"
        )
    return keys


class Serving:
    """An engine serving in the background until stopped."""

    def __init__(
        self, engine: DeliveryEngine, *, once: bool = False, listener: ManualListener | None = None
    ) -> None:
        self.engine = engine
        self.stop = asyncio.Event()
        self.reports: list[DrainReport] = []
        self.task = asyncio.create_task(
            engine.serve(
                stop=self.stop,
                listener=listener,
                backstop_s=60,
                on_report=self.reports.append,
                once=once,
            )
        )

    @property
    def delivered(self) -> list[str]:
        """Every key stored as a receipt so far."""
        return [key for report in self.reports for key in report.delivered]

    async def finish(self, grace_s: float = 0.05) -> DrainReport:
        """Stop serving and close the engine; what closing stored."""
        self.stop.set()
        await asyncio.wait_for(self.task, DEADLINE_S)
        return await self.engine.close(grace_s=grace_s)


def gated(room: Room) -> dict[str, asyncio.Event]:
    """Make every post wait for its own event (by reply key); return the events."""
    gates: dict[str, asyncio.Event] = {}

    async def answer(reply: Reply) -> bool:
        await gates.setdefault(reply.key, asyncio.Event()).wait()
        return True

    room.transport.answer = answer
    return gates


def posted(room: Room, agent: AgentAddress) -> list[str]:
    return [reply.key for reply in room.transport.sent if reply.to == agent]


async def test_a_hanging_recipient_does_not_hold_back_the_others(room: Room) -> None:
    """While carol's posts hang, every reply to alice is delivered and stored."""
    release = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        if reply.to == CAROL:
            await release.wait()
        return True

    room.transport.answer = answer
    room.room.post_timeout_s = 30
    keys = await fan_out(room, 40, [ALICE, CAROL], "m")
    serving = Serving(room.room.engine(window_size=64), once=True)
    alice = {key for key in keys if key.endswith(":0")}
    await eventually(lambda: alice <= set(serving.delivered), "alice's receipts")
    # Carol has not answered yet: she keeps the slow start's two posts, no more.
    assert len(posted(room, CAROL)) == 2
    release.set()
    await asyncio.wait_for(serving.task, DEADLINE_S)
    assert set(serving.delivered) == set(keys)


async def test_a_busy_recipient_refills_the_moment_a_post_ends(room: Room) -> None:
    """A recipient at its cap gets its next post as soon as one ends, before any store."""
    stores = asyncio.Event()
    stores.set()

    store = room.outbox.store
    asked: list[str] = []

    async def slow_store(items: Sequence[Settled]) -> list[str]:
        asked.extend(item.outcome.key for item in items)
        await stores.wait()
        return await store(items)

    # The engine stores every outcome through Outbox.store: blocking it blocks them all.
    room.outbox.store = slow_store  # type: ignore[method-assign]
    gates = gated(room)
    keys = sorted(await fan_out(room, 20, [ALICE], "b"))
    serving = Serving(room.room.engine(per_recipient=2), once=True)
    await eventually(lambda: len(room.transport.sent) == 2, "the first two posts")
    gates[keys[0]].set()
    gates[keys[1]].set()
    await eventually(lambda: len(serving.delivered) == 2, "their receipts")
    # Its pace is known now: the engine holds its rows ready. Block every store ...
    stores.clear()
    await eventually(lambda: len(room.transport.sent) == 4, "the next two posts")
    gates[keys[2]].set()
    # ... and a post ending still starts the next one at once, while its outcome waits.
    await eventually(lambda: len(room.transport.sent) == 5, "the post after the third")
    await eventually(lambda: keys[2] in asked, "the third outcome's store")
    assert len(serving.delivered) == 2
    stores.set()
    for key in keys:
        gates.setdefault(key, asyncio.Event()).set()
    await asyncio.wait_for(serving.task, DEADLINE_S)
    assert sorted(serving.delivered) == keys


async def test_posts_ending_during_an_empty_claim_do_not_strand_given_back_rows(
    room: Room,
) -> None:
    """Rows given back as surplus are claimed again once their recipient has room.

    The claim that finds nothing (alice was left out of it: she held all she may) is
    slow; her posts end while it is out. The engine must still know that alice was left
    out of that claim, and claim her given-back rows when it stores those posts, rather
    than sleep until its backstop.
    """
    opened = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        await opened.wait()
        return True

    room.transport.answer = answer
    keys = await fan_out(room, 5, [ALICE], "g")
    engine = room.room.engine()
    claim = room.outbox.claim_due
    claims = 0

    async def slow_claim(**kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        page = await claim(**kwargs)
        if claims == 2:
            opened.set()
            await eventually(lambda: engine.in_flight == 0, "alice's posts ending")
        return page

    room.outbox.claim_due = slow_claim  # type: ignore[method-assign]
    serving = Serving(engine)
    await eventually(lambda: sorted(serving.delivered) == sorted(keys), "every receipt")
    await serving.finish()


async def test_a_recipient_that_slows_down_gives_its_ready_rows_back(room: Room) -> None:
    """A fast recipient that stops answering does not keep the window from the others.

    Carol was fast, so the engine holds many of her rows ready; when she stops answering,
    those rows go back within moments and alice's replies flow through the window.
    """
    hang = asyncio.Event()
    hang.set()
    never = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        if reply.to == CAROL and not hang.is_set():
            await never.wait()
        return True

    room.transport.answer = answer
    room.room.post_timeout_s = 30
    engine = room.room.engine(window_size=64, per_recipient=4)
    bell = ManualListener()
    warm = await fan_out(room, 40, [CAROL], "w")
    serving = Serving(engine, listener=bell)
    await eventually(lambda: set(warm) <= set(serving.delivered), "carol's first receipts")
    hang.clear()
    await fan_out(room, 200, [CAROL], "c")
    bell.notify()
    await eventually(lambda: len(posted(room, CAROL)) >= 44, "carol's hanging posts")
    alice = await fan_out(room, 100, [ALICE], "a")
    bell.notify()
    await eventually(lambda: set(alice) <= set(serving.delivered), "alice's receipts")
    assert len(posted(room, CAROL)) == 44
    never.set()
    await serving.finish()


async def test_silent_recipients_cannot_take_the_window(room: Room) -> None:
    """Hanging recipients get slow start's two slots each; the rest of the window flows."""
    hanging = [AgentAddress(agent_id=f"h{i}", session_id="s") for i in range(3)]
    never = asyncio.Event()

    async def answer(reply: Reply) -> bool:
        if reply.to in hanging:
            await never.wait()
        return True

    room.transport.answer = answer
    room.room.post_timeout_s = 30
    keys = await fan_out(room, 30, [*hanging, ALICE], "s")
    serving = Serving(room.room.engine(window_size=12, per_recipient=12), once=True)
    alice = {key for key in keys if key.endswith(":3")}
    await eventually(lambda: alice <= set(serving.delivered), "alice's receipts")
    assert all(len(posted(room, agent)) == 2 for agent in hanging)
    report = await serving.finish()
    assert report.delivered == []
    assert sum(isinstance(row, OutboxRow) for row in room.outbox.rows.values()) == 90


async def test_a_timeout_leaves_a_recipient_one_post_in_flight(room: Room) -> None:
    """After its posts time out, a recipient has one post in flight until it answers."""
    flying: list[int] = []
    out = 0

    async def answer(reply: Reply) -> bool:
        nonlocal out
        out += 1
        flying.append(out)
        try:
            await asyncio.Event().wait()
        finally:
            out -= 1
        return True

    room.transport.answer = answer
    room.room.post_timeout_s = 0.02
    await fan_out(room, 12, [CAROL], "t")
    engine = room.room.engine()
    serving = Serving(engine, once=False)
    await eventually(lambda: len(flying) >= 8, "eight posts")
    await serving.finish()
    # Slow start's two posts, both time out; then one at a time.
    assert flying[:2] == [1, 2]
    assert max(flying[2:]) == 1


async def test_mailbox_rows_are_delivered_without_a_post(room: Room) -> None:
    """A recipient with a mailbox route gets its reply written, receipted, never posted."""
    room.outbox.mailboxes.add(CAROL.agent_id)
    alice_key, carol_key = await room.room.fan_out(job=settled_job(), content="x")
    report = await room.room.drain_outbox()
    assert sorted(report.delivered) == [alice_key, carol_key]
    assert [reply.to for reply in room.transport.sent] == [ALICE]
    assert isinstance(room.outbox.receipts[carol_key], Receipt)
    assert room.outbox.mailbox[carol_key].content == "x"
    assert alice_key not in room.outbox.mailbox


async def test_a_reply_that_cannot_travel_as_a_header_dies_unsendable(room: Room) -> None:
    """A key with surrounding whitespace is buried at once as unsendable; the rest is sent."""
    await room.outbox.add([make_row(" outbox:m:reply:0"), make_row("outbox:ok:reply:0")])
    report = await room.room.drain_outbox()
    assert report.delivered == ["outbox:ok:reply:0"]
    assert report.dead == [(" outbox:m:reply:0", DeadReason.UNSENDABLE)]
    assert [reply.key for reply in room.transport.sent] == ["outbox:ok:reply:0"]


async def test_every_attempt_is_logged_with_status_and_duration(room: Room) -> None:
    """A failure and then an acceptance leave two attempt log entries for the receipt."""
    answers: list[Answer] = [
        Failed("HTTP 500 Internal Server Error", status=500),
        Accepted(status=200),
    ]
    room.transport.answer = lambda reply: answers.pop(0)
    [key] = await room.room.fan_out(job=settled_job(reply_to=[ALICE]), content="x")
    await room.room.drain_outbox()
    room.clock.advance(2)
    await room.room.drain_outbox()
    assert isinstance(room.outbox.receipts[key], Receipt)
    log = room.outbox.attempt_logs[key]
    assert [(entry.result, entry.status, entry.error) for entry in log] == [
        ("failed", 500, "HTTP 500 Internal Server Error"),
        ("accepted", 200, None),
    ]
    assert all(entry.ms >= 0 for entry in log)
    assert log[1].at == room.clock.now()


async def test_a_stored_retry_arms_one_wake_for_its_time(room: Room) -> None:
    """After storing a failure the engine arms the wake for the retry it wrote."""
    room.transport.answer = False
    [key] = await fan_out(room, 1, [ALICE], "r")
    room.wake.scheduled.clear()
    serving = Serving(room.room.engine(), once=True)
    await asyncio.wait_for(serving.task, DEADLINE_S)
    retry_at = room.outbox.rows[key].due_at
    assert retry_at == room.clock.now() + timedelta(seconds=1)
    assert room.wake.scheduled == [retry_at]


async def test_going_to_sleep_names_the_next_claimable_row(room: Room) -> None:
    """With nothing due, the engine sleeps on the wake board until the next row falls due."""
    await fan_out(room, 1, [ALICE], "z")
    [key] = list(room.outbox.rows)
    row = room.outbox.rows[key]
    room.outbox.rows[key] = replace(row, due_at=room.clock.now() + timedelta(seconds=5))
    serving = Serving(room.room.engine())
    await eventually(lambda: bool(room.wake.slept), "the engine going to sleep")
    await serving.finish()
    assert room.wake.slept == [room.clock.now() + timedelta(seconds=5)]
    assert room.transport.sent == []


async def test_close_gives_unfinished_rows_back_untouched(room: Room) -> None:
    """Posts still out at the end of the grace period are cancelled, their rows released."""
    gated(room)
    keys = await fan_out(room, 6, [ALICE], "h")
    serving = Serving(room.room.engine(per_recipient=2))
    await eventually(lambda: len(room.transport.sent) == 2, "two posts")
    await serving.finish()
    page = await room.outbox.claim_page(after_key=None, limit=64, now=room.clock.now(), lease_s=60)
    assert sorted(row.key for row in page.rows) == sorted(keys)
    assert all(row.attempts == 0 for row in page.rows)
    assert room.wake.scheduled[-1] == room.clock.now()


async def test_a_page_cancelled_mid_post_gives_every_row_back(room: Room) -> None:
    """Cancelling a page drain releases its whole claim at once."""
    gated(room)
    keys = await fan_out(room, 3, [ALICE], "p")
    drain = asyncio.create_task(room.room.drain_outbox())
    await eventually(lambda: len(room.transport.sent) == 3, "the page's posts")
    drain.cancel()
    await asyncio.gather(drain, return_exceptions=True)
    page = await room.outbox.claim_page(after_key=None, limit=64, now=room.clock.now(), lease_s=60)
    assert sorted(row.key for row in page.rows) == sorted(keys)


async def backlog_that_hangs(room: Room) -> tuple[asyncio.Event, set[AgentAddress]]:
    """Rows to eight recipients whose posts hang until the event: a window-filling backlog."""
    never = asyncio.Event()
    hanging = {AgentAddress(agent_id=f"h{i}", session_id="s") for i in range(8)}

    async def answer(reply: Reply) -> bool:
        if reply.to in hanging:
            await never.wait()
        return True

    room.transport.answer = answer
    room.room.post_timeout_s = 30
    await fan_out(room, 20, sorted(hanging, key=lambda a: a.agent_id), "b")
    return never, hanging


async def test_a_notification_during_a_backlog_posts_the_fresh_row_at_once(room: Room) -> None:
    """With the window full of a backlog, a new row is claimed on its notification and posted."""
    never, _ = await backlog_that_hangs(room)
    bell = ManualListener()
    engine = room.room.engine(window_size=8, per_recipient=4)
    serving = Serving(engine, listener=bell)
    await eventually(lambda: engine.full, "a full window")
    room.clock.advance(1)
    [fresh] = await fan_out(room, 1, [CAROL], "f")
    bell.notify()
    await eventually(lambda: fresh in serving.delivered, "the fresh reply's receipt")
    assert engine.fresh_claims >= 1
    # The backlog's posts are all still out: the fresh claim came on top of the window.
    assert engine.in_flight >= 8
    assert len(room.transport.sent) <= 8 + engine.config.fresh_rows
    never.set()
    await serving.finish()


async def test_a_notification_arms_the_wake_again_before_its_fresh_claim(room: Room) -> None:
    """The watcher arms the wake, then claims: a row settled during the claim announces itself.

    Claiming first left every row settled while that claim was out unannounced (the wake
    it had used up was not armed again yet), to wait for the window's own claims.
    """
    never, _ = await backlog_that_hangs(room)
    bell = ManualListener()
    engine = room.room.engine(window_size=8, per_recipient=4)
    arms_at_fresh_claims: list[int] = []
    claim_due = room.outbox.claim_due

    async def watched(**kwargs: Any) -> Any:
        if kwargs.get("newest"):
            arms_at_fresh_claims.append(len(room.wake.slept))
        return await claim_due(**kwargs)

    room.outbox.claim_due = watched  # type: ignore[method-assign]
    serving = Serving(engine, listener=bell)
    await eventually(lambda: engine.full, "a full window")
    await eventually(lambda: bell.waits >= 1, "the watcher waiting")
    armed_before = len(room.wake.slept)
    room.clock.advance(1)
    [fresh] = await fan_out(room, 1, [CAROL], "f")
    bell.notify()
    await eventually(lambda: fresh in serving.delivered, "the fresh reply's receipt")
    assert arms_at_fresh_claims, "no fresh claim"
    assert arms_at_fresh_claims[-1] > armed_before, (armed_before, arms_at_fresh_claims)
    never.set()
    await serving.finish()


async def test_a_fresh_claim_under_way_when_the_backlog_ends_still_posts_its_rows(
    room: Room,
) -> None:
    """The backlog ending stops the watcher after its claim, never in the middle of it.

    Cancelled while the claim's answer was on its way, the rows the database had leased
    waited out their lease unposted (a fresh reply 71 s late behind a backlog).
    """
    never, _ = await backlog_that_hangs(room)
    bell = ManualListener()
    engine = room.room.engine(window_size=8, per_recipient=4)
    answered = asyncio.Event()
    claim_due = room.outbox.claim_due
    fresh_keys: set[str] = set()

    async def slow_answer(**kwargs: Any) -> Any:
        page = await claim_due(**kwargs)  # leased, as a committed claim is
        if {row.key for row in page.rows} & fresh_keys:
            await answered.wait()  # ...and its answer still on the way
        return page

    room.outbox.claim_due = slow_answer  # type: ignore[method-assign]
    serving = Serving(engine, listener=bell)
    await eventually(lambda: engine.full, "a full window")
    await eventually(lambda: bell.waits >= 1, "the watcher waiting")
    room.clock.advance(1)
    [fresh] = await fan_out(room, 1, [CAROL], "f")
    fresh_keys.add(fresh)
    waits = bell.waits
    bell.notify()
    # The watcher took the notification and has not waited again: its claim is out.
    await eventually(lambda: engine.fresh_claims == 0 and room.wake.slept, "the claim out")
    assert bell.waits == waits
    never.set()  # the backlog ends while the fresh claim's answer is out
    await eventually(lambda: not engine.full, "the backlog's posts answered")
    answered.set()
    await eventually(lambda: fresh in serving.delivered, "the fresh reply's receipt")
    await serving.finish()


async def test_a_storm_of_notifications_holds_at_most_fresh_rows_beyond_the_window(
    room: Room,
) -> None:
    """However often the bell rings, the window holds at most fresh_rows more than its size."""
    never, _ = await backlog_that_hangs(room)
    bell = ManualListener()
    engine = room.room.engine(window_size=8, per_recipient=4, fresh_rows=3)
    serving = Serving(engine, listener=bell)
    await eventually(lambda: engine.full, "a full window")
    room.clock.advance(1)
    # Fresh rows to recipients that hang as well: each fresh claim stays held.
    storm = [AgentAddress(agent_id=f"s{i}", session_id="s") for i in range(4)]
    answer = room.transport.answer
    assert callable(answer), "backlog_that_hangs answers with a coroutine function"

    async def hang_storm(reply: Reply) -> Answer:
        if reply.to in storm:
            await never.wait()
            return True
        answered = answer(reply)
        return await answered if inspect.isawaitable(answered) else answered

    room.transport.answer = hang_storm
    await fan_out(room, 10, storm, "f")
    held: list[int] = []
    for _ in range(20):
        waits = bell.waits
        bell.notify()
        # The watcher waits again only once it has claimed for this notification.
        await eventually(lambda: bell.waits, "the notification handled", until=waits.__lt__)
        held.append(engine.held)
    await eventually(lambda: engine.held == 8 + 3, "the fresh rows held")
    assert max(held) <= 8 + 3
    assert engine.fresh_claims >= 1
    # Beyond the window's own eight posts, at most the three fresh rows went out.
    assert len(room.transport.sent) == 8 + 3
    never.set()
    await serving.finish()


async def test_without_a_backlog_a_notification_only_wakes_the_loop(room: Room) -> None:
    """An idle engine woken by the bell claims through its own loop, not a fresh claim."""
    bell = ManualListener()
    engine = room.room.engine(window_size=8)
    serving = Serving(engine, listener=bell)
    await eventually(lambda: room.wake.slept, "the engine asleep")
    [key] = await fan_out(room, 1, [ALICE], "i")
    bell.notify()
    await eventually(lambda: key in serving.delivered, "the reply's receipt")
    assert engine.fresh_claims == 0
    await serving.finish()
