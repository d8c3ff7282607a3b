"""The schema's functions as files: a migrated database holds exactly what the files say.

The comparison is byte for byte, with no normalisation of our own: a file is what
PostgreSQL's ``pg_get_functiondef`` prints for its function (overloads of one name, should
there ever be any, in order of their argument types, a blank line apart), so PostgreSQL
itself is the normaliser; ``make migration`` rewrites an edited file in that form.
"""

from __future__ import annotations

import difflib
from typing import Any

from birddog.postgres.functions import function_files, schema_functions

WORKFLOW = (
    "A function changes only with a revision: edit src/birddog/postgres/functions/<name>.sql "
    "AND run `make migration NAME=<what changes>`, which writes the next revision with the "
    "new text frozen in it and rewrites the file as PostgreSQL prints it. If you wrote the "
    "revision by hand, `python migrations/new_revision.py --files` writes the files from it. "
    "Never edit a revision that has been released (CONTRIBUTING.md, 'Migrations and the "
    "schema's functions')."
)


async def test_every_function_has_a_file_and_every_file_a_function(pg_conn: Any) -> None:
    """Each function of the migrated schema has a file of its name, and each file a function."""
    installed = set(await schema_functions(pg_conn))
    files = set(function_files())
    assert "settle" in installed
    assert not installed - files, (
        f"functions without a file: {sorted(installed - files)}. {WORKFLOW}"
    )
    assert not files - installed, (
        f"files without a function: {sorted(files - installed)}. {WORKFLOW}"
    )


async def test_every_file_is_what_the_migrated_database_prints(pg_conn: Any) -> None:
    """The text of every function in a freshly migrated database is its file's, byte for byte."""
    installed = await schema_functions(pg_conn)
    files = function_files()
    differences = [
        "".join(
            difflib.unified_diff(
                files[name].splitlines(keepends=True),
                installed[name].splitlines(keepends=True),
                fromfile=f"src/birddog/postgres/functions/{name}.sql",
                tofile=f"birddog.{name} in a database migrated to head",
            )
        )
        for name in sorted(installed.keys() & files.keys())
        if installed[name] != files[name]
    ]
    assert not differences, (
        f"{len(differences)} function file(s) differ from what the revisions install. "
        f"{WORKFLOW}\n\n" + "\n".join(differences)
    )
