"""Replay on fakes: a dead letter goes back only once its cause is gone, else nothing does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from birddog import DeadReason, InvalidInput, RowState
from birddog.core.egress import EgressPolicy
from birddog.service.replaying import CheckedReplay
from birddog.testing import FrozenClock, InMemoryOutbox, InMemoryRoutes, ManualWake
from tests.support import T0, make_row


async def dead_outbox(*agents: str) -> tuple[InMemoryOutbox, ManualWake]:
    """An outbox holding one dead letter (unknown recipient) per agent, key ``dead-AGENT``."""
    wake = ManualWake()
    outbox = InMemoryOutbox(clock=FrozenClock(T0), wake=wake)
    rows = [
        replace(
            make_row(f"dead-{agent}", agent=agent),
            state=RowState.DEAD,
            dead_reason=DeadReason.UNKNOWN_RECIPIENT,
        )
        for agent in agents
    ]
    await outbox.add(rows)
    return outbox, wake


async def test_a_dead_letter_whose_recipient_has_no_route_is_not_replayed() -> None:
    """Still no route: the replay is refused saying what to add, and nothing goes back."""
    outbox, _ = await dead_outbox("alice")
    replay = CheckedReplay(outbox, InMemoryRoutes(), EgressPolicy())
    with pytest.raises(InvalidInput, match="still has no route"):
        await replay.replay(key="dead-alice")
    assert outbox.rows["dead-alice"].state is RowState.DEAD


async def test_a_dead_letter_goes_back_once_its_route_is_there() -> None:
    """With a route added, the dead letter is pending again, due now, and a drain is woken."""
    outbox, wake = await dead_outbox("alice")
    routes = InMemoryRoutes()
    await routes.add("alice", kind="mailbox")
    assert await CheckedReplay(outbox, routes, EgressPolicy()).replay(agent_id="alice") == [
        "dead-alice"
    ]
    row = outbox.rows["dead-alice"]
    assert (row.state, row.attempts, row.due_at) == (RowState.PENDING, 0, T0)
    assert wake.scheduled == [T0]


async def test_one_held_recipient_keeps_every_dead_letter_dead() -> None:
    """A held route refuses the replay of all named: none of them is replayed."""
    outbox, _ = await dead_outbox("alice", "bob")
    routes = InMemoryRoutes()
    await routes.add("alice", kind="mailbox")
    await routes.add("bob", kind="mailbox", enabled=False)
    with pytest.raises(InvalidInput, match="held"):
        await CheckedReplay(outbox, routes, EgressPolicy()).replay(key=None, agent_id="bob")
    assert {row.state for row in outbox.rows.values()} == {RowState.DEAD}
