"""Durations as people write them, and what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from birddog import InvalidInput
from birddog.core.duration import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * 86400.0),
        ("7d", 7 * 86400.0),
        ("12h", 43200.0),
        ("1.5h", 5400.0),
        ("90m", 5400.0),
        ("90min", 5400.0),
        ("45s", 45.0),
        ("2w", 2 * 604800.0),
        ("3600", 3600.0),
        (" 24H ", 86400.0),
        (0, 0.0),
        (2.5, 2.5),
    ],
)
def test_durations_read_as_people_write_them(text: str | float, seconds: float) -> None:
    """Days, hours, minutes, seconds, weeks and plain seconds all read."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "d", "30x", "-1d", "1e400", "nan", "inf", "30 days ago", "1d2h", "101y"]
)
def test_what_is_not_a_duration_is_refused_naming_the_field(text: str) -> None:
    """A value that is not a duration raises InvalidInput naming the field."""
    with pytest.raises(InvalidInput) as caught:
        parse_duration(text, field="--receipts-older-than")
    assert caught.value.field == "--receipts-older-than"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, True, 1e12])
def test_numbers_must_be_finite_and_not_negative(value: float) -> None:
    """NaN, infinity, negatives, booleans and absurd sizes are refused."""
    with pytest.raises(InvalidInput):
        parse_duration(value)


@given(st.text(max_size=20))
def test_any_text_is_a_duration_or_invalid_input(text: str) -> None:
    """Whatever the text, the answer is a finite duration or InvalidInput, never a crash."""
    try:
        seconds = parse_duration(text)
    except InvalidInput:
        return
    assert 0 <= seconds <= 100 * 365 * 86400


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity", "1e400"])
@pytest.mark.parametrize("name", ["BIRDDOG_LEASE_S", "BIRDDOG_KILL_GRACE_S", "BIRDDOG_JITTER"])
def test_a_setting_of_nan_or_inf_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """A duration (or ratio) setting of nan or inf is refused like any bad value, named."""
    from birddog.settings import Settings  # noqa: PLC0415

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        Settings()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400", "soon"])
def test_a_wait_of_nan_or_inf_is_refused_and_zero_is_no_wait(value: str) -> None:
    """The --timeout of ask parses as every duration does; 0 (do not wait) is the one extra."""
    from birddog.cli import wait_duration  # noqa: PLC0415

    with pytest.raises(ValueError, match="duration"):
        wait_duration(value)
    assert wait_duration("0") == 0.0
    assert wait_duration("4m") == 240.0
