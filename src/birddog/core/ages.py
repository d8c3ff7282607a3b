"""Durations as people say them: ``42s``, ``5m 03s``, ``2h 07m``, ``3d 04h``.

Pure, and below everything else in the core: the errors' messages, the ask's facts and
the spool's refusals all say how long something took.
"""

from __future__ import annotations

__all__ = ["format_age"]


def format_age(seconds: float) -> str:
    """A duration as people say it: ``42s``, ``5m 03s``, ``2h 07m``, ``3d 04h``.

    Args:
        seconds: the duration (negative durations print as ``-`` plus the duration).

    Returns:
        The duration in its two largest units.
    """
    sign = "-" if seconds < 0 else ""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}d {hours:02d}h"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m"
    if minutes:
        return f"{sign}{minutes}m {secs:02d}s"
    return f"{sign}{secs}s"
