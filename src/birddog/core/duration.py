"""Durations as people write them: ``30d``, ``12h``, ``90m``, ``45s``, or plain seconds."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from birddog.core.ages import format_age
from birddog.core.errors import InvalidInput

__all__ = [
    "MAX_DURATION_S",
    "format_age",
    "parse_duration",
    "parse_time",
    "parse_time_or_duration",
]

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")

MAX_DURATION_S = 100 * 365 * 86400.0
"""The longest duration accepted: a hundred years is "forever" for every setting here."""


def parse_time_or_duration(text: str, *, now: datetime, field: str = "time") -> datetime:
    """Read a moment: an ISO 8601 time with its timezone, or a duration from ``now``.

    Args:
        text: ``2026-12-02T09:00:00Z``, ``2026-12-02 09:00+01:00``, or a duration such as
            ``90s`` or ``2h`` (see :func:`parse_duration`), counted from ``now``.
        now: the current time, timezone-aware.
        field: the name to report in an error.

    Returns:
        The moment, timezone-aware.

    Raises:
        InvalidInput: neither a time with a timezone nor a duration.
    """
    moment = parse_time(text)
    if moment is None:
        try:
            return now + timedelta(seconds=parse_duration(text, field=field))
        except InvalidInput:
            raise InvalidInput(
                f"{field} must be a time such as 2026-12-02T09:00:00Z or a duration such "
                "as 90s or 2h",
                field=field,
            ) from None
    if moment.tzinfo is None:
        raise InvalidInput(
            f"{field} needs its timezone, e.g. {text.strip()}Z or {text.strip()}+01:00", field=field
        )
    return moment


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 time (``Z`` for UTC allowed), naive if it names no timezone; else None."""
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_duration(text: str | float, *, field: str = "duration") -> float:
    """Read a duration in seconds.

    Args:
        text: ``30d``, ``12h``, ``90m`` (or ``90min``), ``45s``, ``2w``, a decimal such as
            ``1.5h``, or a plain number of seconds (a number or its text).
        field: the name to report in an error.

    Returns:
        The duration in seconds, finite and not negative.

    Raises:
        InvalidInput: not a duration, negative, not finite, or above a hundred years.
    """
    if isinstance(text, bool):
        raise InvalidInput(f"{field} must be a duration such as 30d, 12h or 90m", field=field)
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text).lower())
        if match is None or match.group(2) not in {"", *_UNITS}:
            raise InvalidInput(
                f"{field} must be a duration such as 30d, 12h, 90m or 45s", field=field
            )
        seconds = float(match.group(1)) * _UNITS.get(match.group(2), 1.0)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInput(f"{field} must be a finite duration, not negative", field=field)
    if seconds > MAX_DURATION_S:
        raise InvalidInput(f"{field} must be at most 100 years", field=field)
    return seconds
