"""What a daemon says while it works: one counts-only line per store or per second."""

from __future__ import annotations

import asyncio
from collections import Counter

import structlog

from birddog.cli.daemon import drained_line
from birddog.daemon import Progress
from tests.support import at, eventually


async def test_counts_within_the_pace_are_summed_into_one_later_line() -> None:
    """The first store is logged at once; the next two, within the pace, as one sum after it."""
    progress = Progress(every_s=0.2)
    loop = asyncio.get_running_loop()
    with structlog.testing.capture_logs() as events:
        progress.add(Counter(delivered=2, retried=1, skipped=4))
        first_at = loop.time()
        progress.add(Counter(delivered=3))
        progress.add(Counter(dead=1, deferred=2))
        lines = [e for e in events if e["event"] == "replies_moved"]
        assert len(lines) == 1
        await eventually(
            lambda: [e for e in events if e["event"] == "replies_moved"],
            "the second line",
            until=lambda found: len(found) == 2,
        )
        second_at = loop.time()
    moved = [e for e in events if e["event"] == "replies_moved"]
    assert [{k: v for k, v in e.items() if k not in ("event", "log_level")} for e in moved] == [
        {"delivered": 2, "retried": 1, "deferred": 0, "dead": 0},
        {"delivered": 3, "retried": 0, "deferred": 2, "dead": 1},
    ]
    assert second_at - first_at >= 0.15


async def test_a_store_that_moved_nothing_says_nothing() -> None:
    """Only skipped rows (another claim's) is no progress: no line, and flush stays silent."""
    progress = Progress(every_s=0.2)
    with structlog.testing.capture_logs() as events:
        progress.add(Counter(skipped=3))
        progress.flush()
    assert events == []


def test_run_once_says_what_it_delivered_and_what_it_left() -> None:
    """The summary names what was delivered, retried or died, and the held and later rows."""
    assert drained_line({"delivered": 1}, left={"pending": 0, "held": 0}) == (
        "delivered 1 reply; nothing left pending"
    )
    left = {"pending": 5, "held": 2, "next_due_at": at(90)}
    assert drained_line({"delivered": 3, "retried": 1, "dead": 1}, left=left) == (
        "delivered 3 replies, 1 retried, 1 dead; left 2 held, 3 not yet due "
        "(next due 2026-01-01 00:01:30Z)"
    )
