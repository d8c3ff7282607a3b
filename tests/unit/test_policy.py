"""A route's policy: what it overrides of the daemon's defaults, checked before it is stored."""

from __future__ import annotations

import math

import pytest

from birddog.core.errors import InvalidInput
from birddog.core.policy import NO_POLICY, RoutePolicy
from birddog.core.schedule import RetrySchedule


def test_overrides_replace_the_defaults_and_nothing_else() -> None:
    """The schedule keeps the daemon's delays; only age and attempts the route sets change."""
    default = RetrySchedule(max_attempts=20, max_age_s=86400, base_delay_s=3)
    assert NO_POLICY.schedule(default) is default
    strict = RoutePolicy(max_age_s=600).schedule(default)
    assert (strict.max_age_s, strict.max_attempts, strict.base_delay_s) == (600, 20, 3)
    assert RoutePolicy(post_timeout_s=2).post_timeout(30) == 2
    assert NO_POLICY.post_timeout(30) == 30


def test_merged_sets_keeps_and_puts_back() -> None:
    """A change sets its fields, keeps the rest, and a cleared field goes back to the default."""
    current = RoutePolicy(post_timeout_s=5, max_age_s=3600)
    merged = current.merged(RoutePolicy(max_attempts=7), cleared=frozenset({"max_age_s"}))
    assert merged == RoutePolicy(post_timeout_s=5, max_attempts=7)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"post_timeout_s": 0}, "post_timeout_s"),
        ({"post_timeout_s": math.inf}, "post_timeout_s"),
        ({"max_age_s": -1}, "max_age_s"),
        ({"max_age_s": math.nan}, "max_age_s"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 100_001}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
    ],
)
def test_a_value_no_daemon_could_apply_is_refused_naming_its_field(
    fields: dict[str, float], field: str
) -> None:
    """Zero, negative, infinite and out-of-range values fail before anything is stored."""
    with pytest.raises(InvalidInput) as raised:
        RoutePolicy(**fields)  # type: ignore[arg-type]
    assert raised.value.field == field
