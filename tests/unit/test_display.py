"""Values as people read them: tables, records, times, ages, JSON, all of it printable."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

from birddog.display import (
    CELL_WIDTH,
    dump_json,
    format_age,
    format_value,
    render_record,
    render_table,
)


def test_values_print_as_people_read_them() -> None:
    """None, flags, times in UTC, ages, JSON and hostile text each print as one printable line."""
    assert format_value(None) == "-"
    assert (format_value(True), format_value(False)) == ("yes", "no")
    plus_two = timezone(timedelta(hours=2))
    assert format_value(datetime(2026, 1, 1, 2, 0, 5, tzinfo=plus_two)) == "2026-01-01 00:00:05Z"
    assert format_value(timedelta(seconds=3725)) == "1h 02m"
    assert format_value({"a": "\x1b"}) == '{"a": "\\u001b"}'
    assert format_value("a\x1b[2J\u202eb\nc") == "a\\x1b[2J\\u202eb\\x0ac"


def test_ages_use_their_two_largest_units() -> None:
    """Ages read 42s, 5m 03s, 2h 07m, 3d 04h, and negative ones carry a sign."""
    assert format_age(42.9) == "42s"
    assert format_age(303) == "5m 03s"
    assert format_age(2 * 3600 + 7 * 60) == "2h 07m"
    assert format_age(3 * 86400 + 4 * 3600) == "3d 04h"
    assert format_age(-61) == "-1m 01s"


def test_tables_align_columns_and_cut_long_cells() -> None:
    """A table aligns its columns under a header and cuts cells past the width with an ellipsis."""
    rows = [{"key": "a", "error": "x" * 100}, {"key": "longer-key", "error": None}]
    lines = render_table(rows, ["key", "error"], headers=["KEY", "ERROR"]).splitlines()
    assert lines[0] == "KEY         ERROR"
    assert lines[1] == "a           " + "x" * (CELL_WIDTH - 1) + "…"
    assert lines[2] == "longer-key  -"
    assert render_table([], ["key"]) == "(none)"


def test_records_align_names_and_keep_values_whole() -> None:
    """A record prints one aligned name: value line per field, long values uncut."""
    text = render_record([("job", "j-1"), ("diagnostic", "y" * 100)])
    assert text.splitlines() == ["       job: j-1", "diagnostic: " + "y" * 100]


def test_json_output_escapes_every_control_including_del() -> None:
    """JSON output writes times as ISO 8601, ids as text, and escapes controls, DEL and bidi."""
    when = datetime(2026, 1, 1, tzinfo=UTC)
    token = uuid.UUID(int=1)
    text = dump_json(
        {"at": when, "age": timedelta(seconds=1.5), "id": token, "e": "\x1b\x7f\u202e"}
    )
    assert all(ch == "\n" or 0x20 <= ord(ch) < 0x7F for ch in text)
    assert json.loads(text) == {
        "at": "2026-01-01T00:00:00+00:00",
        "age": 1.5,
        "id": str(token),
        "e": "\x1b\x7f\u202e",
    }
