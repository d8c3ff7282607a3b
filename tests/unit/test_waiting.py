"""The tests' one poll, ``eventually``: it returns what it waited for or fails saying what it saw."""

from __future__ import annotations

import itertools

import pytest

from tests.support import eventually


async def test_it_returns_the_first_value_that_holds_from_a_plain_or_async_probe() -> None:
    """Both probe kinds are looked at until ``until`` holds, and that value is returned."""
    counter = itertools.count()
    assert await eventually(lambda: next(counter), until=lambda n: n >= 3) == 3

    async def fetch() -> str:
        return "settled"

    assert await eventually(fetch, "the state", until=lambda s: s == "settled") == "settled"


async def test_a_timeout_fails_naming_the_wait_and_the_last_value_seen() -> None:
    """When time runs out the assertion says what was awaited and the last value, bounded."""
    with pytest.raises(AssertionError) as failed:
        await eventually(lambda: "x" * 10_000, "the job settled", until=lambda s: False, within_s=0)
    message = str(failed.value)
    assert "waiting for the job settled" in message
    assert "last saw 'xxx" in message
    assert len(message) < 500

    with pytest.raises(AssertionError, match=r"last saw \{'state': 'running'\}"):
        await eventually(lambda: {"state": "running"}, until=lambda row: False, within_s=0.02)


async def test_errors_it_is_told_to_ignore_are_looked_past_and_shown_last() -> None:
    """An ignored error means "not yet"; other errors propagate at once."""
    attempts = itertools.count()

    def flaky() -> int:
        attempt = next(attempts)
        if attempt < 2:
            raise OSError("server restarting")
        return attempt

    assert await eventually(flaky, ignoring=(OSError,)) == 2

    def away() -> int:
        raise OSError("still away")

    with pytest.raises(AssertionError, match="still away"):
        await eventually(away, "the database", within_s=0.02, ignoring=(OSError,))
    with pytest.raises(OSError, match="still away"):
        await eventually(away, "the database", within_s=5)
