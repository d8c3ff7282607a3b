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
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from birddog.postgres.sql import queries

__all__ = [
    "SUFFIX",
    "Overload",
    "as_files",
    "file_text",
    "function_files",
    "schema_functions",
    "schema_overloads",
]

SUFFIX = ".sql"
"""What a function file's name ends with (the rest is the function's name)."""


def function_files(folder: Traversable | None = None) -> dict[str, str]:
    """Every function file, by function name.

    Args:
        folder: where the files are; by default this package's folder (the files it
            ships).

    Returns:
        The text of each ``<name>.sql`` of the folder, keyed by ``<name>``.
    """
    if folder is None:
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


@dataclass(frozen=True, slots=True)
class Overload:
    """One function of the schema as the database holds it.

    Attributes:
        name: the function's name (its file is ``<name>.sql``).
        arguments: its identity arguments (``text, uuid``), as ``DROP FUNCTION`` takes them.
        definition: what ``pg_get_functiondef`` prints for it.
    """

    name: str
    arguments: str
    definition: str

    @property
    def signature(self) -> str:
        """``birddog.<name>(<arguments>)``: the function, as DDL names it."""
        return f"birddog.{self.name}({self.arguments})"


async def schema_overloads(conn: Any) -> list[Overload]:
    """Every function of the ``birddog`` schema, by name, then by argument types.

    Args:
        conn: an asyncpg connection to a migrated database.

    Returns:
        One :class:`Overload` per function.
    """
    rows = await conn.fetch(queries["schema_functions"])
    return [Overload(row["name"], row["arguments"], row["definition"]) for row in rows]


def as_files(overloads: Iterable[Overload]) -> dict[str, str]:
    """What the file of each name holds, given the functions of the schema.

    Args:
        overloads: functions in the order :func:`schema_overloads` gives them.

    Returns:
        For each function name, :func:`file_text` of its overloads' definitions.
    """
    grouped: dict[str, list[str]] = {}
    for overload in overloads:
        grouped.setdefault(overload.name, []).append(overload.definition)
    return {name: file_text(definitions) for name, definitions in grouped.items()}


async def schema_functions(conn: Any) -> dict[str, str]:
    """Every function of the ``birddog`` schema, by name, as its file holds it.

    Args:
        conn: an asyncpg connection to a migrated database.

    Returns:
        For each function name, :func:`file_text` of its overloads' definitions.
    """
    return as_files(await schema_overloads(conn))
