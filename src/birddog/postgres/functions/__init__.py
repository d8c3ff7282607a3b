r"""The schema's functions as files: ``functions/<name>.sql``, one for each function.

A file holds what PostgreSQL prints for its function (``pg_get_functiondef``, psql's
``\sf``) in a database migrated to the newest revision: ``CREATE OR REPLACE FUNCTION
birddog.<name>(...)``, its attributes (``SECURITY DEFINER``, every ``SET``) and its body,
byte for byte. Should a name ever have several overloads, its file holds them all, in
order of their argument types, a blank line apart; the schema has none (a revision that
changes a signature drops the old one).

The files are where a function is read and edited. The Alembic revisions stay what
installs the schema, each freezing the text it installs: ``make migration NAME=...``
(``migrations/new_revision.py``) writes a revision from the files that changed, and a
test checks that a migrated database and the files agree (CONTRIBUTING.md, "Migrations
and the schema's functions").
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any

from birddog.postgres.sql import queries

__all__ = ["SUFFIX", "file_text", "function_files", "schema_functions"]

SUFFIX = ".sql"
"""What a function file's name ends with (the rest is the function's name)."""


def function_files() -> dict[str, str]:
    """Every function file shipped with this package, by function name.

    Returns:
        The text of each ``<name>.sql`` of this folder, keyed by ``<name>``.
    """
    folder = resources.files(__name__)
    return {
        entry.name.removesuffix(SUFFIX): entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(SUFFIX)
    }


def file_text(definitions: Iterable[str]) -> str:
    """The text of one name's file, from the definitions of its overloads.

    Args:
        definitions: what ``pg_get_functiondef`` printed for each overload, in order of
            their argument types.

    Returns:
        The definitions, each ending with one newline, a blank line apart.
    """
    return "\n".join(definition.rstrip("\n") + "\n" for definition in definitions)


async def schema_functions(conn: Any) -> dict[str, str]:
    """Every function of the ``birddog`` schema, by name, as its file holds it.

    Args:
        conn: an asyncpg connection to a migrated database.

    Returns:
        For each function name, :func:`file_text` of its overloads' definitions.
    """
    grouped: dict[str, list[str]] = {}
    for row in await conn.fetch(queries["schema_functions"]):
        grouped.setdefault(row["name"], []).append(row["definition"])
    return {name: file_text(definitions) for name, definitions in grouped.items()}
