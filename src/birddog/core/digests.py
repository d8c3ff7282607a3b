"""Digests: when informational mail with no live session to take it goes as one turn.

The bus this project follows flushes informational mail (``report``, ``receipt``) as one
batched turn per target per day. Each agent's route says when (``route add/update
--digest daily@HH:MM`` or ``--digest-every DURATION``; :data:`DEFAULT_DIGEST`, once a
day at 08:00 UTC, when it says nothing). An informational job gets its digest time when
it is enqueued: the first time of its route's schedule at or after the mail was sent
(``birddog.jobs.digest_at``). Until then no worker takes it (a live session of its
session does, at once); from then on a worker takes every such job of the session in one
batched turn. A daily digest is at HH:MM UTC; a digest every DURATION is at each
multiple of DURATION since 1970-01-01 00:00 UTC (every 30m: on the hour and half past).

Pure: the standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Final

from birddog.core.errors import InvalidInput

__all__ = [
    "DEFAULT_DIGEST",
    "DIGEST_EVERY_MAX_S",
    "DIGEST_EVERY_MIN_S",
    "DigestSchedule",
    "DigestWait",
    "check_every",
    "digest_time_text",
    "next_digest",
    "parse_daily",
    "shown_state",
    "waiting_text",
]

DIGEST_EVERY_MIN_S: Final = 60.0
"""The shortest ``--digest-every``: a minute."""

DIGEST_EVERY_MAX_S: Final = 7 * 86400.0
"""The longest ``--digest-every``: a week."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_DAY: Final = timedelta(days=1)
_DAILY = re.compile(r"^daily@([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True, slots=True)
class DigestSchedule:
    """When an agent's informational mail goes: once a day at a time, or every so long.

    Attributes:
        daily: the time of day (UTC, to the minute) of a daily digest; None with ``every_s``.
        every_s: the seconds between digests (aligned on 1970-01-01 00:00 UTC); None with
            ``daily``.
    """

    daily: time | None = None
    every_s: float | None = None

    def __post_init__(self) -> None:
        if (self.daily is None) == (self.every_s is None):
            raise InvalidInput("a digest is daily or every so long, one of them", field="digest")
        if self.every_s is not None:
            check_every(self.every_s)

    def __str__(self) -> str:
        """``daily@08:00 UTC`` or ``every 30m``, as ``route list`` shows it."""
        if self.daily is not None:
            return f"daily@{self.daily.strftime('%H:%M')} UTC"
        return f"every {_every_text(self.every_s or 0.0)}"


DEFAULT_DIGEST: Final = DigestSchedule(daily=time(8, 0))
"""A route's digest when it names none: once a day at 08:00 UTC."""


@dataclass(frozen=True, slots=True)
class DigestWait:
    """Informational jobs waiting for their digest (no worker takes them before it).

    Attributes:
        jobs: how many are queued and not yet due.
        next_at: the earliest digest time among them (None: none waits).
    """

    jobs: int = 0
    next_at: datetime | None = None


def parse_daily(text: str) -> DigestSchedule:
    """``--digest daily@HH:MM`` (UTC) as a schedule.

    Raises:
        InvalidInput: not ``daily@`` and a time from 00:00 to 23:59.
    """
    found = _DAILY.match(text.strip())
    if found is None:
        raise InvalidInput(
            f"--digest must be daily@HH:MM (UTC, e.g. daily@08:00), not {text.strip()[:40]!r}",
            field="digest",
        )
    return DigestSchedule(daily=time(int(found[1]), int(found[2])))


def check_every(every_s: float) -> float:
    """``every_s`` if a route may have its digest that often.

    Raises:
        InvalidInput: not a finite time from a minute to a week.
    """
    if not (math.isfinite(every_s) and DIGEST_EVERY_MIN_S <= every_s <= DIGEST_EVERY_MAX_S):
        raise InvalidInput("--digest-every must be a time from 1m to 7d", field="digest_every_s")
    return every_s


def next_digest(schedule: DigestSchedule, at: datetime) -> datetime:
    """The first digest time of ``schedule`` at or after ``at`` (what ``birddog._digest_at`` says).

    Args:
        schedule: the route's schedule.
        at: when the mail was sent (timezone-aware).

    Returns:
        The digest time, in UTC.
    """
    if schedule.every_s is not None:
        origin, stride = _EPOCH, timedelta(seconds=schedule.every_s)
    else:
        assert schedule.daily is not None  # noqa: S101 - one of the two, by construction
        origin = datetime.combine(_EPOCH.date(), schedule.daily, tzinfo=UTC)
        stride = _DAY
    start = origin + ((at - origin) // stride) * stride
    return start if start >= at else start + stride


def _every_text(every_s: float) -> str:
    """``24h``, ``30m``, ``90s``: the largest unit that divides the time evenly."""
    whole = round(every_s)
    for unit, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def digest_time_text(at: datetime) -> str:
    """A digest time as the commands show it: ``2026-12-05 08:00 UTC``."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def waiting_text(state: str, digest_at: datetime | None, now: datetime) -> str | None:
    """``waiting for digest (at 2026-12-05 08:00 UTC)`` for a job that waits for it, else None.

    Args:
        state: the job's state (only a queued job waits).
        digest_at: its digest time (None: an interactive job).
        now: the time it is judged at.
    """
    if state != "queued" or digest_at is None or digest_at <= now:
        return None
    return f"waiting for digest (at {digest_time_text(digest_at)})"


def shown_state(state: str, digest_at: datetime | None, now: datetime) -> str:
    """A job's state for people: ``queued, waiting for digest (at ...)``, or its state."""
    waiting = waiting_text(state, digest_at, now)
    return state if waiting is None else f"{state}, {waiting}"
