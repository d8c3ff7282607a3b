"""Digest schedules: parsing, their text, the next digest time, how waiting mail is shown."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from birddog import InvalidInput
from birddog.core.digests import (
    DEFAULT_DIGEST,
    DigestSchedule,
    check_every,
    next_digest,
    parse_daily,
    shown_state,
    waiting_text,
)
from birddog.core.live import turn_how, turn_ran_by

AT = datetime(2026, 12, 4, 21, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "daily"), [("daily@08:00", time(8, 0)), (" daily@23:59 ", time(23, 59))]
)
def test_a_daily_digest_is_a_time_of_day(text: str, daily: time) -> None:
    """daily@HH:MM reads as that time of day."""
    assert parse_daily(text) == DigestSchedule(daily=daily)


@pytest.mark.parametrize("text", ["daily@24:00", "daily@8:00", "weekly", "08:00", "daily@08:00Z"])
def test_anything_else_is_refused_naming_the_form(text: str) -> None:
    """A value that is not daily@HH:MM is refused, the message naming the form."""
    with pytest.raises(InvalidInput, match="daily@HH:MM"):
        parse_daily(text)


@pytest.mark.parametrize("every_s", [59.0, 7 * 86400 + 1.0, float("nan"), float("inf")])
def test_a_digest_every_so_long_is_a_minute_to_a_week(every_s: float) -> None:
    """Below a minute, above a week or not finite: refused."""
    with pytest.raises(InvalidInput, match="from 1m to 7d"):
        check_every(every_s)


def test_a_schedule_is_one_of_the_two() -> None:
    """Neither or both is no schedule."""
    with pytest.raises(InvalidInput):
        DigestSchedule()
    with pytest.raises(InvalidInput):
        DigestSchedule(daily=time(8, 0), every_s=3600)


@pytest.mark.parametrize(
    ("schedule", "text"),
    [
        (DEFAULT_DIGEST, "daily@08:00 UTC"),
        (DigestSchedule(every_s=1800), "every 30m"),
        (DigestSchedule(every_s=86400), "every 24h"),
        (DigestSchedule(every_s=90), "every 90s"),
    ],
)
def test_a_schedule_reads_as_it_was_given(schedule: DigestSchedule, text: str) -> None:
    """As route list shows it."""
    assert str(schedule) == text


@pytest.mark.parametrize(
    ("schedule", "at", "due"),
    [
        (DEFAULT_DIGEST, AT, datetime(2026, 12, 5, 8, 0, tzinfo=UTC)),
        (DEFAULT_DIGEST, AT.replace(hour=7), datetime(2026, 12, 4, 8, 0, tzinfo=UTC)),
        (DEFAULT_DIGEST, AT.replace(hour=8, minute=0), AT.replace(hour=8, minute=0)),
        (DigestSchedule(every_s=1800), AT, AT.replace(minute=30)),
        (DigestSchedule(every_s=3600), AT, AT.replace(hour=22, minute=0)),
    ],
)
def test_the_next_digest_is_the_first_at_or_after_the_mail(
    schedule: DigestSchedule, at: datetime, due: datetime
) -> None:
    """Daily at its time in UTC; every so long on multiples since 00:00 UTC."""
    assert next_digest(schedule, at) == due


def test_waiting_mail_is_shown_with_its_time_and_only_while_it_waits() -> None:
    """Queued and before its digest: waiting; due, running or interactive: its state alone."""
    later = AT + timedelta(hours=1)
    assert waiting_text("queued", later, AT) == "waiting for digest (at 2026-12-04 22:10 UTC)"
    assert (
        shown_state("queued", later, AT) == "queued, waiting for digest (at 2026-12-04 22:10 UTC)"
    )
    assert shown_state("queued", AT, AT) == "queued"
    assert shown_state("running", later, AT) == "running"
    assert shown_state("queued", None, AT) == "queued"


def test_a_workers_turn_of_informational_mail_ran_for_its_digest() -> None:
    """how=digest for a worker's turn whose first mail is a report or receipt; live stays live."""
    assert turn_ran_by("host:1", "report") == "digest"
    assert turn_ran_by("host:1", "receipt") == "digest"
    assert turn_ran_by("host:1", "task") == "worker"
    assert turn_ran_by("host:1") == "worker"
    assert turn_ran_by("mcp:host:1", "report") == "live"
    assert turn_how("live", "report") == "live"
    assert turn_how("worker", "escalation") == "worker"
