"""The overview's chart: deliveries and dead letters per minute, drawn as inline SVG bars.

Only the geometry is computed here; the template writes the ``<svg>`` and the stylesheet
colours it, so the page needs no script and no inline style.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

WIDTH = 720
"""The chart's width in SVG units."""

HEIGHT = 140
"""The chart's height in SVG units, the axis labels included."""

PLOT_TOP = 14
PLOT_BOTTOM = 118
"""The vertical extent of the bars; labels go above and below."""


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: where it stands, how tall, and what it counts.

    Attributes:
        x: left edge.
        y: top edge.
        width: width.
        height: height (0 for an empty minute).
        kind: ``delivered`` or ``dead`` (its CSS class).
        label: what a reader hovering the bar is told.
    """

    x: float
    y: float
    width: float
    height: float
    kind: str
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """The chart of one hour.

    Attributes:
        bars: two bars per minute, delivered then dead.
        peak: the largest count, the top of the scale.
        delivered: deliveries over the hour.
        dead: dead letters over the hour.
        first: the first minute.
        last: the last minute.
        width: the SVG width.
        height: the SVG height.
        plot_top: the top of the bars' area.
        plot_bottom: the baseline.
    """

    bars: list[Bar]
    peak: int
    delivered: int
    dead: int
    first: datetime | None
    last: datetime | None
    width: int = WIDTH
    height: int = HEIGHT
    plot_top: int = PLOT_TOP
    plot_bottom: int = PLOT_BOTTOM


def activity_chart(activity: Sequence[tuple[datetime, int, int]]) -> Chart:
    """Lay out one bar pair per minute, scaled to the busiest minute.

    Args:
        activity: ``(minute, delivered, dead)`` per minute, oldest first.

    Returns:
        The chart's bars and labels.
    """
    peak = max((max(d, x) for _, d, x in activity), default=0)
    scale = (PLOT_BOTTOM - PLOT_TOP) / max(peak, 1)
    slot = WIDTH / max(len(activity), 1)
    width = max(slot / 2 - 0.5, 0.5)
    bars: list[Bar] = []
    for i, (minute, delivered, dead) in enumerate(activity):
        stamp = minute.strftime("%H:%M")
        for offset, kind, count in ((0.0, "delivered", delivered), (width, "dead", dead)):
            height = count * scale
            bars.append(
                Bar(
                    x=round(i * slot + offset, 2),
                    y=round(PLOT_BOTTOM - height, 2),
                    width=round(width, 2),
                    height=round(height, 2),
                    kind=kind,
                    label=f"{stamp}: {count} {kind}",
                )
            )
    return Chart(
        bars=bars,
        peak=peak,
        delivered=sum(d for _, d, _ in activity),
        dead=sum(x for _, _, x in activity),
        first=activity[0][0] if activity else None,
        last=activity[-1][0] if activity else None,
    )
