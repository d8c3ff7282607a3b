"""Adaptive per-recipient concurrency: slow start, multiplicative decrease, additive increase."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from birddog.core.flow import FlowControl, Signal

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def answers(flow: FlowControl, *signals: Signal, seconds: float = 0.01, when: float = 0) -> None:
    for signal in signals:
        flow.answered("a", signal, seconds=seconds, now=at(when))


def test_a_recipient_never_heard_from_starts_small() -> None:
    """An unknown recipient may have slow_start posts in flight and holds no more."""
    flow = FlowControl(ceiling=16, initial=2)
    assert flow.limit("a", now=T0) == 2
    assert flow.hold("a", now=T0) == 2


def test_slow_start_doubles_per_acceptance_up_to_the_ceiling() -> None:
    """Each acceptance doubles a fresh recipient's limit until it reaches per_recipient."""
    flow = FlowControl(ceiling=16, initial=2)
    limits = []
    for _ in range(5):
        answers(flow, Signal.OK)
        limits.append(flow.limit("a", now=T0))
    assert limits == [4, 8, 16, 16, 16]


def test_a_failure_drops_to_one_then_each_acceptance_adds_one() -> None:
    """A congestion signal leaves one post in flight; recovery is additive, not doubling."""
    flow = FlowControl(ceiling=6, initial=2)
    answers(flow, Signal.OK, Signal.OK)
    assert flow.limit("a", now=T0) == 6
    answers(flow, Signal.CONGESTED)
    assert flow.limit("a", now=T0) == 1
    limits = []
    for _ in range(6):
        answers(flow, Signal.OK)
        limits.append(flow.limit("a", now=T0))
    assert limits == [2, 3, 4, 5, 6, 6]


def test_a_rejection_changes_nothing() -> None:
    """An answer that says nothing about capacity (410, unknown recipient) keeps the limit."""
    flow = FlowControl(ceiling=16, initial=2)
    answers(flow, Signal.OK)
    answers(flow, Signal.NEUTRAL, Signal.NEUTRAL)
    assert flow.limit("a", now=T0) == 4


def test_a_quiet_recipient_starts_again_with_slow_start() -> None:
    """Not heard from within quiet_s, a recipient is treated as new: back to slow_start."""
    flow = FlowControl(ceiling=16, initial=2, quiet_s=60)
    answers(flow, Signal.OK, Signal.OK, Signal.OK)
    assert flow.limit("a", now=at(59)) == 16
    assert flow.limit("a", now=at(61)) == 2
    answers(flow, Signal.OK, when=61)
    assert flow.limit("a", now=at(61)) == 4


def test_rows_held_ready_follow_the_recipients_pace() -> None:
    """A fast recipient may hold what it takes within the horizon; a slow one hardly more."""
    flow = FlowControl(ceiling=16, initial=2, horizon_s=0.5, hold_max=256)
    flow.answered("fast", Signal.OK, seconds=0.002, now=T0)
    flow.answered("slow", Signal.OK, seconds=5.0, now=T0)
    assert flow.hold("fast", now=T0) == 256
    assert flow.hold("slow", now=T0) == 4
    assert flow.hold("never", now=T0) == 2


def test_a_post_out_longer_than_the_pace_shrinks_what_is_held() -> None:
    """The pace used is at least the age of the oldest post in flight.

    A fast recipient that stops answering holds only its posts' worth, without waiting for
    those posts to end.
    """
    flow = FlowControl(ceiling=16, initial=2, horizon_s=0.5, hold_max=256)
    for _ in range(4):
        flow.answered("a", Signal.OK, seconds=0.002, now=T0)
    assert flow.hold("a", now=T0, waited_s=0.001) == 256
    assert flow.hold("a", now=T0, waited_s=1.0) == 16 + 8
    assert flow.hold("a", now=T0, waited_s=60.0) == 16


def test_forget_quiet_bounds_memory() -> None:
    """Recipients not heard from within quiet_s are forgotten."""
    flow = FlowControl(ceiling=4, quiet_s=10)
    flow.answered("old", Signal.OK, seconds=0.1, now=T0)
    flow.answered("new", Signal.OK, seconds=0.1, now=at(20))
    flow.forget_quiet(now=at(25))
    assert flow.known("old") is None
    assert flow.known("new") is not None


@given(
    st.lists(st.sampled_from(list(Signal)), max_size=60),
    st.integers(min_value=1, max_value=32),
    st.integers(min_value=1, max_value=8),
)
def test_the_limit_stays_between_one_and_the_ceiling(
    signals: list[Signal], ceiling: int, initial: int
) -> None:
    """Whatever the answers, a recipient may have 1 to per_recipient posts in flight."""
    flow = FlowControl(ceiling=ceiling, initial=initial)
    for signal in signals:
        answers(flow, signal)
        assert 1 <= flow.limit("a", now=T0) <= ceiling
        assert flow.hold("a", now=T0) >= flow.limit("a", now=T0)
