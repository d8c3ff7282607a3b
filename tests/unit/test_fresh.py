"""The fresh-rows watcher on its own: arm, claim on a notification, stop after a claim."""

from __future__ import annotations

import asyncio
from typing import Any

from birddog.engine import EngineConfig
from birddog.engine.claims import Decided, Held, Post
from birddog.engine.fresh import FreshRows
from birddog.engine.window import Window
from birddog.testing import ManualListener
from tests.support import ALICE, CAROL, T0, Room, eventually, settled_job


class Watched:
    """A watcher over ``room``'s outbox whose window records each post and starts none."""

    def __init__(self, room: Room, **config: Any) -> None:
        self.room = room
        self.posts: list[Post] = []
        self.decided: list[Decided] = []
        self.config = EngineConfig(**config)
        self.window = Window(config=self.config, start=self._start)
        self.fresh = FreshRows(
            outbox=room.outbox,
            wake=room.wake,
            clock=room.clock,
            config=self.config,
            window=self.window,
            on_decided=self.decided.extend,
        )

    def _start(self, items: list[Held]) -> Post:
        post = Post(items=items, at=T0, started=0.0)
        self.posts.append(post)
        return post

    @property
    def posted(self) -> list[str]:
        """The key of every row a post was started for."""
        return [row.key for post in self.posts for _, row in post.items]


async def add_rows(room: Room, prefix: str, count: int) -> list[str]:
    keys: list[str] = []
    for i in range(count):
        keys += await room.room.fan_out(
            job=settled_job(key=f"{prefix}{i}", reply_to=[ALICE, CAROL]), content="x"
        )
    return keys


async def test_it_arms_the_wake_and_claims_nothing_until_a_notification(room: Room) -> None:
    """Started, the watcher arms a wake ahead and waits; the rows already due stay put."""
    await add_rows(room, "old", 2)
    watched = Watched(room)
    bell = ManualListener()
    watched.fresh.start(bell)
    assert watched.fresh.watching
    await eventually(lambda: bell.waits >= 1, "the watcher waiting on the listener")
    assert room.wake.slept, "no wake armed before waiting"
    assert room.wake.slept[0] > room.clock.now()
    assert watched.fresh.claims == 0
    assert watched.posted == []
    await watched.fresh.stop()
    assert not watched.fresh.watching


async def test_a_notification_claims_the_latest_due_rows_up_to_fresh_rows(room: Room) -> None:
    """On a notification, at most ``fresh_rows`` rows are claimed, the latest due first."""
    await add_rows(room, "old", 3)
    room.clock.advance(5)
    newest = await add_rows(room, "new", 1)
    watched = Watched(room, fresh_rows=2, per_recipient=8)
    bell = ManualListener()
    watched.fresh.start(bell)
    await eventually(lambda: bell.waits >= 1, "the watcher waiting")
    bell.notify()
    await eventually(lambda: watched.fresh.claims == 1, "the fresh claim")
    assert watched.window.held == 2
    assert sorted(watched.posted) == sorted(newest)
    await watched.fresh.stop()


async def test_no_claim_when_the_window_holds_its_size_and_fresh_rows(room: Room) -> None:
    """A window already holding ``window_size + fresh_rows`` rows gets no fresh claim."""
    await add_rows(room, "old", 3)
    watched = Watched(room, window_size=4, fresh_rows=2, per_recipient=8)
    page = await room.outbox.claim_due(limit=6, now=room.clock.now(), lease_s=60)
    assert watched.window.admit(page, whole=False, now=room.clock.now()) == []
    assert watched.window.held == 6
    bell = ManualListener()
    watched.fresh.start(bell)
    await eventually(lambda: bell.waits >= 1, "the watcher waiting")
    bell.notify()
    await eventually(lambda: bell.waits >= 2, "the notification handled")
    assert watched.fresh.claims == 0
    await watched.fresh.stop()


async def test_stop_waits_for_a_claim_under_way_and_its_rows_enter_the_window(
    room: Room,
) -> None:
    """Stopped mid-claim, the watcher finishes the claim: its leased rows are not stranded."""
    keys = await add_rows(room, "new", 1)
    watched = Watched(room, per_recipient=8)
    answered = asyncio.Event()
    claim_due = room.outbox.claim_due

    async def slow_answer(**kwargs: Any) -> Any:
        page = await claim_due(**kwargs)
        await answered.wait()
        return page

    room.outbox.claim_due = slow_answer  # type: ignore[method-assign]
    bell = ManualListener()
    watched.fresh.start(bell)
    await eventually(lambda: bell.waits >= 1, "the watcher waiting")
    bell.notify()
    await eventually(lambda: len(room.wake.slept) >= 2, "the wake armed again, the claim out")
    stopping = asyncio.ensure_future(watched.fresh.stop())
    await asyncio.sleep(0)
    assert not stopping.done(), "stop did not wait for the claim under way"
    answered.set()
    await asyncio.wait_for(stopping, 5)
    assert sorted(watched.posted) == sorted(keys)
