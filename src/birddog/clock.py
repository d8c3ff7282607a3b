"""The wall clock: the one place that reads the system time.

Everything that needs the time takes a :class:`birddog.ports.Clock`; the composition root
(:mod:`birddog.bootstrap`) passes :class:`SystemClock`, tests pass
:class:`birddog.testing.FrozenClock`. Adapters whose clock is optional default to this one.
"""

from __future__ import annotations

from datetime import UTC, datetime


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        return datetime.now(UTC)


def epoch_ms(at: datetime) -> int:
    """``at`` as whole milliseconds since the Unix epoch (a mail's ``createdAt``).

    Args:
        at: a timezone-aware time.

    Returns:
        The milliseconds since 1970-01-01 UTC, rounded down.
    """
    return int(at.timestamp() * 1000)
