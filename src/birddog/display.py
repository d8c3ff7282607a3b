r"""Values as people read them (the CLI and the console), and JSON for machines.

Every value passes through :func:`birddog.core.text.printable` before it reaches the
terminal, since keys, ids, errors and URLs may come from outside: an escape sequence
in a recipient's error message shows as ``\x1b``, it never runs. Times print in UTC,
ages as hours, minutes and seconds, and long cells are cut to :data:`CELL_WIDTH` in
tables (the JSON output and the record view keep them whole).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from birddog.core.duration import format_age
from birddog.core.text import printable

CELL_WIDTH = 60
"""The widest a table cell is printed; longer values end with an ellipsis."""


def format_value(value: object) -> str:
    """One value as people read it: UTC times, short ages, ``-`` for nothing, all printable.

    Args:
        value: a value from a row (text, number, time, interval, flag, JSON).

    Returns:
        One line of printable text.
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    if isinstance(value, timedelta):
        return format_age(value.total_seconds())
    if isinstance(value, dict | list):
        return printable(json.dumps(value, default=json_default, ensure_ascii=False))
    return printable(str(value))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    headers: Sequence[str] | None = None,
) -> str:
    """Rows as an aligned table with a header line; ``(none)`` when there are no rows.

    Args:
        rows: the rows (column name to value).
        columns: the columns to show, in order.
        headers: the header of each column (default: the column names).

    Returns:
        The table, lines joined by newlines, without a trailing newline.
    """
    cells = [[_cut(format_value(row.get(c)), CELL_WIDTH) for c in columns] for row in rows]
    if not cells:
        return "(none)"
    head = list(headers or columns)
    widths = [max(len(h), *(len(line[i]) for line in cells)) for i, h in enumerate(head)]
    lines = [head, *cells]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def render_record(pairs: Iterable[tuple[str, object]]) -> str:
    """One record as ``name: value`` lines, names aligned, values whole and printable.

    Args:
        pairs: ``(name, value)`` in the order to show.

    Returns:
        The lines joined by newlines.
    """
    items = [(name, format_value(value)) for name, value in pairs]
    width = max((len(name) for name, _ in items), default=0)
    return "\n".join(f"{name.rjust(width)}: {value}" for name, value in items)


def json_default(value: object) -> object:
    """JSON for what :mod:`json` does not know: ISO 8601 times, seconds, ids as text.

    Args:
        value: a datetime, timedelta, UUID or other value.

    Returns:
        Its JSON-ready form.
    """
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def dump_json(value: object) -> str:
    r"""``value`` as indented JSON, with :func:`json_default` for times and ids.

    Non-ASCII characters, controls and DEL are written as ``\u`` escapes, so the
    output is printable in a terminal whatever the values hold.

    Args:
        value: rows, a record or a report.

    Returns:
        The JSON text.
    """
    # ensure_ascii escapes every control but DEL, which is ASCII.
    return json.dumps(value, indent=2, default=json_default).replace("\x7f", "\\u007f")
