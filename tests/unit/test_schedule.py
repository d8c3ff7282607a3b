"""The retry schedule: doubling delays from 1 s, capped at 1 h, with injected jitter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from birddog import RetrySchedule

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def middle() -> float:
    return 0.5


def test_defaults_match_the_design() -> None:
    """20 attempts, 1 s base, 1 h cap, 24 h maximum age."""
    schedule = RetrySchedule()
    assert schedule.max_attempts == 20
    assert schedule.base_delay_s == 1.0
    assert schedule.max_delay_s == 3600.0
    assert schedule.max_age_s == 86400.0


def test_delays_double_and_cap() -> None:
    """With neutral jitter the delays are 1, 2, 4, ... seconds, never above an hour."""
    schedule = RetrySchedule()
    delays = [schedule.delay_s(attempt, middle) for attempt in range(1, 20)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert max(delays) == 3600.0
    assert delays == sorted(delays)


@pytest.mark.parametrize("r", [0.0, 0.25, 0.999999])
def test_jitter_stays_within_its_spread(r: float) -> None:
    """Jitter moves a delay within +-20% and never past the cap."""
    schedule = RetrySchedule()
    assert 8.0 * 0.8 <= schedule.delay_s(4, lambda: r) <= 8.0 * 1.2
    assert schedule.delay_s(19, lambda: r) <= 3600.0


def test_retry_at_is_pure_in_time_and_rng() -> None:
    """The same attempt, time and random draw give the same time."""
    schedule = RetrySchedule()
    assert schedule.retry_at(attempts=3, now=NOW, rng=middle) == NOW + timedelta(seconds=4)
    assert schedule.retry_at(attempts=3, now=NOW, rng=middle) == schedule.retry_at(
        attempts=3, now=NOW, rng=middle
    )


def test_no_retry_after_the_last_attempt() -> None:
    """After max_attempts failures there is no next time."""
    schedule = RetrySchedule(max_attempts=3)
    assert schedule.retry_at(attempts=2, now=NOW, rng=middle) is not None
    assert schedule.retry_at(attempts=3, now=NOW, rng=middle) is None


def test_deadline_is_creation_plus_max_age() -> None:
    """A row's deadline is its creation time plus the maximum age."""
    assert RetrySchedule().deadline(NOW) == NOW + timedelta(days=1)


@pytest.mark.parametrize(
    "bad",
    [{"max_attempts": 0}, {"base_delay_s": -1}, {"jitter": 1.0}, {"max_age_s": 0}],
)
def test_nonsense_settings_are_refused(bad: dict[str, float]) -> None:
    """A schedule that could never deliver or never end is refused."""
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies by field
        RetrySchedule(**bad)  # type: ignore[arg-type]
