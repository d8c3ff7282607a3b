"""The time fakes: a clock that moves only when told, a wake scheduler that only records."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

__all__ = ["FrozenClock", "ManualWake"]


class FrozenClock:
    """A clock that moves only when told.

    Args:
        at: the starting time (default 2026-01-01 UTC).
    """

    def __init__(self, at: datetime | None = None) -> None:
        self.at = at or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The frozen time."""
        return self.at

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward and return the new time."""
        self.at += timedelta(seconds=seconds)
        return self.at


@dataclass
class ManualWake:
    """A wake scheduler that only records what it was asked.

    Attributes:
        scheduled: every requested wake time, in order.
        slept: every time a drainer going to sleep was told to look again, in order.
    """

    scheduled: list[datetime] = field(default_factory=list)

    slept: list[datetime] = field(default_factory=list)

    async def schedule_wake(self, *, at: datetime) -> None:
        """Record the wake."""
        self.scheduled.append(at)

    async def going_to_sleep(self, *, until: datetime, now: datetime) -> datetime:
        """Record a drainer going to sleep; it looks again by ``until`` or an armed wake."""
        armed = [at for at in self.scheduled if now < at < until]
        self.slept.append(min(armed, default=until))
        return self.slept[-1]

    @property
    def earliest(self) -> datetime | None:
        """The earliest wake requested so far."""
        return min(self.scheduled, default=None)
