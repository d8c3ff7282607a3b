"""Write the next revision from the schema's function files: ``make migration NAME=...``.

A function of the ``birddog`` schema is edited in its file,
``src/birddog/postgres/functions/<name>.sql``; this script writes the Alembic revision
that installs the change, with the text frozen in it (a revision installs the same thing
forever, whatever the files say later):

1. It migrates a scratch database to the current head, on the server ``DATABASE_URL``
   names (this login must be allowed to create databases) or else on an embedded
   PostgreSQL of its own, and compares the functions there with the files: a file that
   differs is a changed function, a file without a function a new one, a function
   without a file one to drop.
2. It installs the changed and new files in a transaction it rolls back, to learn which
   functions each defines and how PostgreSQL prints them.
3. It writes ``migrations/versions/<next number>_<NAME>.py`` from ``script.py.mako``:
   each function's new text and, for the downgrade, the text it replaces, as literals.
   A function is replaced in place (``CREATE OR REPLACE``: it keeps its grants) unless
   PostgreSQL refuses that (a new result type, a renamed parameter), in which case the
   old one is dropped first; a function created anew has ``EXECUTE`` revoked from
   ``PUBLIC`` (``birddog migrate --roles`` grants it per role, in ``roles_grant``).
4. It checks the revision on the scratch database (up: the functions are then the
   files; down: they are as they were; up again), and only then rewrites the files it
   installed as PostgreSQL prints them, which is what the test comparing the database
   with the files expects. A revision that fails the check is deleted again.

With no function changed it writes an empty revision (for tables and the rest). With
``--files`` it writes no revision: it writes every file from the revisions as they
stand (after a revision written by hand) and removes files without a function.

Run it from a checkout, with ``make venv`` done. ``--migrations`` and ``--functions``
point it at other folders than the checkout's (the tests work on copies).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError

from birddog.core.errors import BirdDogError
from birddog.postgres import alembic_config
from birddog.postgres.functions import (
    SUFFIX,
    Overload,
    as_files,
    function_files,
    schema_overloads,
)
from birddog.postgres.scratch import with_database

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = ROOT / "migrations"
FUNCTIONS = ROOT / "src" / "birddog" / "postgres" / "functions"
FUNCTIONS_SHOWN = "src/birddog/postgres/functions/"
"""How the revisions name the functions' folder (never a path of the machine)."""


class Refused(Exception):
    """What stops the script, said to the developer (exit status 2, no traceback)."""


T = TypeVar("T")


# ---- the scratch database ------------------------------------------------------------------


@contextlib.contextmanager
def scratch_server() -> Iterator[str]:
    """The server to work on: ``DATABASE_URL``'s, else an embedded one, stopped afterwards."""
    if url := os.environ.get("DATABASE_URL"):
        yield url
        return
    try:
        from birddog.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415 - an extra
    except ImportError:
        raise Refused(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: set "
            "DATABASE_URL to a server where this login may create databases, or run make venv"
        ) from None
    with (
        tempfile.TemporaryDirectory(prefix="birddog-revision-", ignore_cleanup_errors=True) as root,
        EmbeddedPostgres(Path(root)) as server,
    ):
        yield server.dsn()


def run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one piece of database work on an event loop of its own (Alembic runs its own)."""
    return asyncio.run(work())


async def _admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def scratch_database(server: str) -> Iterator[str]:
    """A new, empty database on ``server``, dropped afterwards."""
    name = f"birddog_revision_{uuid.uuid4().hex[:12]}"
    run(lambda: _admin(server, f"CREATE DATABASE {name}"))
    try:
        yield with_database(server, name)
    finally:
        run(lambda: _admin(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def alembic(dsn: str, migrations: Path) -> Config:
    """An Alembic configuration for ``dsn`` over the revisions in ``migrations``."""
    config = alembic_config(dsn)
    config.set_main_option("script_location", str(migrations))
    return config


async def _overloads(dsn: str) -> list[Overload]:
    conn = await asyncpg.connect(dsn)
    try:
        return await schema_overloads(conn)
    finally:
        await conn.close()


def overloads(dsn: str) -> list[Overload]:
    """Every function of the schema in ``dsn``, as :func:`schema_overloads` gives them."""
    return run(lambda: _overloads(dsn))


def by_name(functions: Sequence[Overload]) -> dict[str, list[Overload]]:
    """The functions grouped by name, each group in the order given."""
    grouped: dict[str, list[Overload]] = {}
    for function in functions:
        grouped.setdefault(function.name, []).append(function)
    return grouped


# ---- what the files define --------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One function name the revision changes.

    Attributes:
        name: the function's name.
        before: its overloads at the current head (none: a new function).
        after: its overloads as its file defines them, as PostgreSQL prints them (none:
            the file is gone, the function is dropped).
        in_place: whether ``CREATE OR REPLACE`` can put ``after`` over ``before``.
    """

    name: str
    before: tuple[Overload, ...]
    after: tuple[Overload, ...]
    in_place: bool

    def dropped(self) -> list[Overload]:
        """The overloads at head that the upgrade drops (the downgrade creates them again)."""
        kept = {function.arguments for function in self.after} if self.in_place else set()
        return [function for function in self.before if function.arguments not in kept]

    def created(self) -> list[Overload]:
        """The overloads the upgrade creates anew (the downgrade drops them)."""
        dropped = {function.arguments for function in self.dropped()}
        known = {function.arguments for function in self.before} - dropped
        return [function for function in self.after if function.arguments not in known]

    def kind(self) -> str:
        """``changed``, ``new`` or ``dropped``, as the revision's docstring says it."""
        if not self.before:
            return "new"
        return "changed" if self.after else "dropped"


async def _defined_by(
    dsn: str, names: Sequence[str], files: dict[str, str], head: dict[str, list[Overload]]
) -> dict[str, list[Overload]]:
    conn = await asyncpg.connect(dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        try:
            # Dropped first (with what depends on them: all of it is rolled back), so that
            # afterwards a name's functions are exactly what its file defines.
            for name in names:
                for function in head.get(name, []):
                    await conn.execute(f"DROP FUNCTION {function.signature} CASCADE")
            current = by_name(await schema_overloads(conn))
            for name in names:
                try:
                    await conn.execute(files[name])
                except asyncpg.PostgresError as exc:
                    raise Refused(f"{name}{SUFFIX}: PostgreSQL refused it: {exc}") from None
                now = by_name(await schema_overloads(conn))
                _only_its_own(name, current, now)
                current = now
        finally:
            await transaction.rollback()
    finally:
        await conn.close()
    return {name: current[name] for name in names}


def _only_its_own(
    name: str, before: dict[str, list[Overload]], after: dict[str, list[Overload]]
) -> None:
    """Refuse a file that touched another name's functions, or defined none of its own."""
    others = sorted(
        other
        for other in before.keys() | after.keys()
        if other != name and before.get(other) != after.get(other)
    )
    if others:
        raise Refused(
            f"{name}{SUFFIX} defines {', '.join(f'birddog.{other}' for other in others)}: "
            f"a file holds the functions of its own name only (birddog.{others[0]} goes "
            f"in {others[0]}{SUFFIX})"
        )
    if name not in after:
        raise Refused(
            f"{name}{SUFFIX} defines no function birddog.{name}: a file holds "
            f"CREATE OR REPLACE FUNCTION birddog.{name}(...) and nothing else"
        )


async def _replaces_in_place(dsn: str, text: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(text)
        except asyncpg.InvalidFunctionDefinitionError:
            # "cannot change return type of existing function", "cannot change name of
            # input parameter", "cannot remove parameter defaults": drop, then create.
            return False
        finally:
            await transaction.rollback()
    finally:
        await conn.close()
    return True


def changes(dsn: str, files: dict[str, str]) -> list[Change]:
    """What the revision must change so that the schema in ``dsn`` becomes the files."""
    head = by_name(overloads(dsn))
    installed = as_files(overload for group in head.values() for overload in group)
    edited = sorted(name for name, text in files.items() if installed.get(name) != text)
    defined = run(lambda: _defined_by(dsn, edited, files, head)) if edited else {}
    found = []
    for name in edited:
        before = tuple(head.get(name, ()))
        after = tuple(defined[name])
        if before == after:
            continue  # only the file's form differed: it is rewritten, nothing to migrate
        shared = {f.arguments for f in before} & {f.arguments for f in after}
        in_place = not shared or run(lambda name=name: _replaces_in_place(dsn, files[name]))
        found.append(Change(name, before, after, in_place))
    found.extend(
        Change(name, tuple(head[name]), (), in_place=False)
        for name in sorted(head.keys() - files.keys())
    )
    return found


# ---- writing the revision -----------------------------------------------------------------


def literal(text: str) -> str:
    """A Python literal of ``text``: a raw triple-quoted string where one can hold it."""
    for candidate in (f'r"""{text}"""', f'"""{text}"""'):
        with contextlib.suppress(SyntaxError, ValueError):
            if ast.literal_eval(candidate) == text:
                return candidate
    return repr(text)


def _constant(name: str, taken: set[str], prefix: str = "") -> str:
    base = prefix + (re.sub(r"\W", "_", name).strip("_").upper() or "FUNCTION")
    constant, number = base, 1
    while constant in taken:
        number += 1
        constant = f"{base}_{number}"
    taken.add(constant)
    return constant


def _checked(text: str, where: str) -> str:
    # op.execute reads a string as SQLAlchemy text(): ":name" would be a bind parameter.
    binds = sorted(sa.text(text).compile().params)
    if binds:
        raise Refused(
            f"{where}: SQLAlchemy would read {', '.join(':' + b for b in binds)} as bind "
            "parameters when a revision runs it; write the text another way "
            "(':' || 'name', or a space after the colon)"
        )
    return text


def _revoke(function: Overload) -> str:
    # Created executable by PUBLIC; birddog migrate --roles grants EXECUTE per role.
    return f'op.execute("REVOKE ALL ON FUNCTION {function.signature} FROM PUBLIC")'


@dataclass
class Script:
    """The parts of a revision the template fills in."""

    constants: list[str]
    upgrades: list[str]
    downgrades: list[str]


def script_parts(found: Sequence[Change], head: str) -> Script:
    """The frozen texts, the upgrade and the downgrade of a revision making ``found``."""
    taken: set[str] = set()
    parts = Script([], [], [])
    drops: list[str] = []
    creates: list[str] = []
    undrops: list[str] = []
    restores: list[str] = []
    for change in found:
        dropped = {f.arguments for f in change.dropped()}
        created = {f.arguments for f in change.created()}
        drops += [f'op.execute("DROP FUNCTION {f.signature}")' for f in change.dropped()]
        for function in change.after:
            constant = _constant(function.name, taken)
            text = _checked(function.definition, f"{function.name}{SUFFIX}")
            parts.constants.append(
                f"{constant} = {literal(text)}\n"
                f'"""``{function.signature}`` as this revision installs it."""'
            )
            creates.append(f"op.execute({constant})")
            if function.arguments in created:
                creates.append(_revoke(function))
                undrops.append(f'op.execute("DROP FUNCTION {function.signature}")')
        for function in change.before:
            constant = _constant(function.name, taken, "PREVIOUS_")
            text = _checked(function.definition, f"birddog.{function.name} at {head}")
            parts.constants.append(
                f"{constant} = {literal(text)}\n"
                f'"""``{function.signature}`` as revision {head} left it, as the downgrade'
                ' restores it."""'
            )
            restores.append(f"op.execute({constant})")
            if function.arguments in dropped:
                restores.append(_revoke(function))
    parts.upgrades = drops + creates
    parts.downgrades = undrops + restores
    return parts


SAY_WHY = "Say here what changes and why: the reader of a migration has only this."
"""The docstring's placeholder (a test refuses a revision that still holds it)."""


def _notes(found: Sequence[Change]) -> str:
    if not found:
        return SAY_WHY
    listed = ", ".join(f"birddog.{change.name} ({change.kind()})" for change in found)
    return "\n\n".join(
        [
            SAY_WHY,
            textwrap.fill(
                f"The functions' text is frozen below, as {FUNCTIONS_SHOWN} had it when "
                f"this revision was written: {listed}.",
                width=88,
            ),
        ]
    )


def _frozen(parts: Script, texts: Sequence[str]) -> str:
    if not parts.constants:
        return ""
    codes = ["E501"]
    if any(line != line.rstrip() for text in texts for line in text.splitlines()):
        codes += ["W291", "W293"]
    if any("\t" in text for text in texts):
        codes.append("W191")
    return "\n\n".join(
        [
            "# A revision installs the same thing forever: each function's text is frozen\n"
            "# here, as PostgreSQL prints it (its signature on one line).\n"
            f"# ruff: noqa: {', '.join(codes)}",
            *parts.constants,
        ]
    )


def message_of(name: str) -> str:
    """The revision's first docstring line (and file name) from ``NAME``."""
    words = re.findall(r"\w+", name.replace("_", " "))
    if not words:
        raise Refused(
            "NAME says what the revision does, in a few words: "
            "make migration NAME=settle_records_the_kind"
        )
    sentence = " ".join(words)
    return sentence[0].upper() + sentence[1:] + "."


def next_revision(script: ScriptDirectory) -> tuple[str, str]:
    """The current head and the next revision's id (the next number, four digits)."""
    heads = script.get_heads()
    if len(heads) != 1:
        raise Refused(
            f"the revisions have {len(heads)} heads ({', '.join(sorted(heads))}): after a "
            "merge, renumber your revision after the other one (revision and "
            "down_revision), or remove it and write it again with make migration"
        )
    numbers = [int(s.revision) for s in script.walk_revisions() if s.revision.isdigit()]
    return heads[0], f"{max(numbers, default=0) + 1:04d}"


def _format(path: Path) -> None:
    # The template's layout is close to ruff's; ruff makes it exact (when it is installed).
    if importlib.util.find_spec("ruff") is not None:
        subprocess.run(  # noqa: S603 - ruff of this interpreter, on the file just written
            [sys.executable, "-m", "ruff", "format", "--quiet", str(path)], check=False
        )


# ---- the two commands -----------------------------------------------------------------------


def _expected(before: list[Overload], found: Sequence[Change]) -> dict[str, str]:
    files = as_files(before)
    for change in found:
        files.pop(change.name, None)
        if change.after:
            files[change.name] = as_files(change.after)[change.name]
    return files


def _check(config: Config, revision: str, before: list[Overload], found: Sequence[Change]) -> None:
    dsn = config.attributes["dsn"]
    try:
        command.upgrade(config, revision)
        upgraded = as_files(overloads(dsn))
        command.downgrade(config, "-1")
        downgraded = as_files(overloads(dsn))
        command.upgrade(config, revision)
    except Exception as exc:  # whatever PostgreSQL or Alembic said, for the developer
        raise Refused(f"the revision does not run: {str(exc).splitlines()[0]}") from None
    for state, got, wanted in (
        ("after the revision", upgraded, _expected(before, found)),
        ("after its downgrade", downgraded, as_files(before)),
    ):
        differ = sorted(n for n in got.keys() | wanted.keys() if got.get(n) != wanted.get(n))
        if differ:
            raise Refused(f"{state}, these functions are not as expected: {', '.join(differ)}")


def write_revision(name: str, *, migrations: Path, functions: Path) -> str:
    """Write the next revision from the function files; returns what was done, for people."""
    message = message_of(name)
    files = function_files(functions)
    script = ScriptDirectory.from_config(alembic("postgresql://unused/", migrations))
    head, revision = next_revision(script)
    with scratch_server() as server, scratch_database(server) as dsn:
        config = alembic(dsn, migrations)
        command.upgrade(config, head)
        before = overloads(dsn)
        found = changes(dsn, files)
        parts = script_parts(found, head)
        texts = [f.definition for change in found for f in (*change.before, *change.after)]
        written = script.generate_revision(
            revision,
            message,
            head=head,
            notes=_notes(found),
            frozen=_frozen(parts, texts),
            imports="",
            upgrades="\n    ".join(parts.upgrades),
            downgrades="\n    ".join(parts.downgrades),
        )
        if written is None:  # pragma: no cover - Alembic returns None for a file it cannot read
            raise Refused("Alembic wrote no revision")
        path = Path(written.path)
        _format(path)
        try:
            _check(config, revision, before, found)
        except Exception:
            path.unlink()  # a revision that does not do what the files say is not kept
            raise
        rewritten = _write_files(functions, _expected(before, found), files)
    shown = path.relative_to(migrations.parent) if path.is_relative_to(migrations.parent) else path
    lines = [f"wrote {shown} (revises {head})"]
    lines += [f"  birddog.{change.name}: {change.kind()}" for change in found] or [
        "  no function changed: an empty revision, for the rest of the change"
    ]
    if rewritten:
        lines.append(f"rewrote as PostgreSQL prints them: {', '.join(rewritten)}")
    lines.append(
        "next: say what changes and why in its docstring; grant a new function to the roles "
        "that call it (roles_grant in queries.sql); make test"
    )
    return "\n".join(lines)


def _write_files(functions: Path, wanted: dict[str, str], files: dict[str, str]) -> list[str]:
    changed = []
    for name, text in sorted(wanted.items()):
        if files.get(name) != text:
            (functions / f"{name}{SUFFIX}").write_text(text, encoding="utf-8")
            changed.append(f"{name}{SUFFIX}")
    for name in sorted(files.keys() - wanted.keys()):
        (functions / f"{name}{SUFFIX}").unlink()
        changed.append(f"{name}{SUFFIX} (removed)")
    return changed


def write_files(*, migrations: Path, functions: Path) -> str:
    """Write every function file from the revisions; returns what was done, for people."""
    files = function_files(functions)
    with scratch_server() as server, scratch_database(server) as dsn:
        command.upgrade(alembic(dsn, migrations), "head")
        rewritten = _write_files(functions, as_files(overloads(dsn)), files)
    if not rewritten:
        return "the files are what the revisions install"
    return f"wrote from the revisions: {', '.join(rewritten)}"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        description="Write the next Alembic revision from the schema's function files "
        "(make migration NAME=...), or the files from the revisions (--files)."
    )
    parser.add_argument("name", nargs="?", help="what the revision does: settle_records_the_kind")
    parser.add_argument(
        "--files", action="store_true", help="write the files from the revisions; no revision"
    )
    parser.add_argument("--migrations", type=Path, default=MIGRATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--functions", type=Path, default=FUNCTIONS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.files:
            said = write_files(migrations=args.migrations, functions=args.functions)
        else:
            said = write_revision(
                args.name or "", migrations=args.migrations, functions=args.functions
            )
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, asyncpg.PostgresError, BirdDogError) as exc:
        print(f"error: PostgreSQL: {exc}", file=sys.stderr)
        return 2
    except (CommandError, RevisionError) as exc:
        print(f"error: the revisions: {exc}", file=sys.stderr)
        return 2
    print(said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
