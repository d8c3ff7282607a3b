"""The runtime SQL, loaded once from ``queries.sql`` into a dict of ``LiteralString``.

Each block in ``queries.sql`` reads::

    -- name: claim_page
    -- One line saying what the statement does.
    -- params: $1 after_key text, $2 now timestamptz, ...
    SELECT ...;

Other full-line comments (section headings, notes) are ignored. The statements are
written by BirdDog and never assembled from strings at run time, so they are as safe as
literals in the code: values always travel as ``$n`` parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString

_NAME = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$")
_PARAMS = re.compile(r"^-- params: (.+)$")


@dataclass(frozen=True, slots=True)
class Query:
    """One named statement of ``queries.sql``.

    Attributes:
        name: the block's name.
        purpose: the one-line description.
        params: the parameters in order, as written (``none`` when there are none).
        sql: the statement, without comment lines.
    """

    name: str
    purpose: str
    params: str
    sql: LiteralString


def parse_queries(text: str) -> dict[str, Query]:
    """Parse the named blocks of a query file.

    Args:
        text: the file's contents.

    Returns:
        The queries by name, in file order.

    Raises:
        ValueError: a block lacks its purpose, its ``-- params:`` line or its statement,
            or a name is used twice.
    """
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _NAME.match(line)
        if match:
            blocks.append((match.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
    queries: dict[str, Query] = {}
    for name, lines in blocks:
        if name in queries:
            raise ValueError(f"queries.sql: {name!r} is defined twice")
        header = lines[:2]
        if len(header) < 2 or not header[0].startswith("-- ") or header[0].startswith("-- params:"):
            raise ValueError(f"queries.sql: {name!r} needs a one-line purpose after its name")
        params = _PARAMS.match(header[1])
        if params is None:
            raise ValueError(f"queries.sql: {name!r} needs a '-- params:' line after its purpose")
        body = "\n".join(
            line for line in lines[2:] if line.strip() and not line.lstrip().startswith("--")
        ).strip()
        if not body:
            raise ValueError(f"queries.sql: {name!r} has no statement")
        queries[name] = Query(
            name=name,
            purpose=header[0].removeprefix("-- ").strip(),
            params=params.group(1).strip(),
            # BirdDog wrote every statement in the file; none is built from input, so
            # each is as safe as a literal (mypy treats LiteralString as str, no cast).
            sql=body,
        )
    return queries


def _load() -> dict[str, Query]:
    text = (resources.files("birddog.postgres") / "queries.sql").read_text(encoding="utf-8")
    return parse_queries(text)


QUERIES: Mapping[str, Query] = _load()
"""Every named query, with its purpose and parameters."""

queries: Mapping[str, LiteralString] = {name: query.sql for name, query in QUERIES.items()}
"""The statements by name: ``queries["outbox_claim_page"]``."""
