"""The live announcer on the fake: holds counted per session, beats, leaves, failures logged."""

from __future__ import annotations

import pytest

from birddog import AgentAddress
from birddog.core.errors import StoreRefused, StoreUnavailable
from birddog.core.live import clamp_ttl
from birddog.service.live import LiveAnnouncer
from birddog.testing import FrozenClock, InMemoryLiveSessions

BOB = AgentAddress(agent_id="bob", session_id="s-bob")
CAROL = AgentAddress(agent_id="carol", session_id="s-carol")


def live_sessions() -> tuple[InMemoryLiveSessions, FrozenClock]:
    """The fake live sessions on a clock the test moves."""
    clock = FrozenClock()
    return InMemoryLiveSessions(clock=clock), clock


async def test_the_first_hold_beats_and_the_last_release_leaves() -> None:
    """Two holds of one session: live from the first, still live after one release, gone after both."""
    store, _ = live_sessions()
    announcer = LiveAnnouncer(store, holder="mcp:h:1")
    await announcer.hold(BOB)
    await announcer.hold(BOB)
    assert store.beats == 1
    assert [(s.agent_id, s.holder) for s in await store.live()] == [("bob", "mcp:h:1")]
    await announcer.release(BOB)
    assert len(await store.live()) == 1
    await announcer.release(BOB)
    await announcer.release(BOB)  # one release too many: nothing happens
    assert await store.live() == []


async def test_beats_keep_every_held_session_live_past_its_ttl() -> None:
    """Each beat renews every held session; without beats the TTL ends them."""
    store, clock = live_sessions()
    announcer = LiveAnnouncer(store, holder="w", ttl_s=5, every_s=1.5)
    await announcer.hold(BOB)
    await announcer.hold(CAROL)
    for _ in range(5):
        clock.advance(1.5)
        await announcer.beat()
    assert {s.agent_id for s in await store.live()} == {"bob", "carol"}
    clock.advance(5)
    assert await store.live() == []


async def test_leave_all_ends_every_session() -> None:
    """The process's last word leaves whatever it still holds."""
    store, _ = live_sessions()
    announcer = LiveAnnouncer(store, holder="w")
    await announcer.hold(BOB)
    await announcer.hold(CAROL)
    await announcer.leave_all()
    assert await store.live() == []
    assert not announcer.held


async def test_a_failed_beat_is_no_crash() -> None:
    """A store that fails a beat or a leave leaves the announcer running, counting no beat."""

    class Away(InMemoryLiveSessions):
        async def beat(self, *, agent_id: str, session: str, holder: str, ttl_s: float) -> float:
            raise StoreUnavailable("database unavailable during live heartbeat")

        async def leave(self, *, agent_id: str, session: str, holder: str) -> bool:
            raise StoreUnavailable("database unavailable during live leave")

    announcer = LiveAnnouncer(Away(), holder="w")
    await announcer.hold(BOB)
    await announcer.beat()
    await announcer.release(BOB)
    assert announcer.beats == 0


async def test_a_refused_session_is_asked_once_and_the_others_still_beat() -> None:
    """A login that may not announce carol's session: one try, no leave; bob's goes on."""

    class OnlyBob(InMemoryLiveSessions):
        tries: int = 0

        async def beat(self, *, agent_id: str, session: str, holder: str, ttl_s: float) -> float:
            if agent_id != "bob":
                self.tries += 1
                raise StoreRefused("database refused live heartbeat: InsufficientPrivilegeError")
            return await super().beat(
                agent_id=agent_id, session=session, holder=holder, ttl_s=ttl_s
            )

        async def leave(self, *, agent_id: str, session: str, holder: str) -> bool:
            assert agent_id == "bob", "a refused session is never left"
            return await super().leave(agent_id=agent_id, session=session, holder=holder)

    store = OnlyBob()
    announcer = LiveAnnouncer(store, holder="w")
    await announcer.hold(CAROL)
    await announcer.hold(BOB)
    for _ in range(3):
        await announcer.beat()
    assert (store.tries, announcer.beats) == (1, 4)
    assert [s.agent_id for s in await store.live()] == ["bob"]
    await announcer.release(CAROL)
    await announcer.leave_all()
    assert await store.live() == []
    assert announcer.refused == set()


def test_a_beat_must_come_before_the_ttl_ends() -> None:
    """An announcer beating less often than its TTL is refused; the TTL bounds are the database's."""
    with pytest.raises(ValueError, match="more often"):
        LiveAnnouncer(InMemoryLiveSessions(), holder="w", ttl_s=1, every_s=2)
    assert (clamp_ttl(0), clamp_ttl(5), clamp_ttl(60)) == (1, 5, 15)
