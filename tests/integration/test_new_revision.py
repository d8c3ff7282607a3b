"""``make migration`` (``migrations/new_revision.py``) on copies of the revisions and the files.

Each test copies ``migrations/``, the function files and ``pyproject.toml`` (ruff's
settings) into a temporary checkout, edits the files as a developer would, runs the
script on the session's PostgreSQL server and checks what it wrote against a database
migrated with the copies.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from alembic import command

from birddog.postgres import alembic_config
from birddog.postgres.functions import function_files, schema_functions
from tests.support.cli import ROOT

FUNCTIONS = ROOT / "src" / "birddog" / "postgres" / "functions"
SCRIPT = ROOT / "migrations" / "new_revision.py"


@dataclass(frozen=True)
class Checkout:
    """A temporary checkout: copies of the revisions and the function files."""

    root: Path
    server: str

    @property
    def migrations(self) -> Path:
        """The copy of ``migrations/``."""
        return self.root / "migrations"

    @property
    def functions(self) -> Path:
        """The copy of the function files."""
        return self.root / "functions"

    def file(self, name: str) -> Path:
        """The copy of ``<name>.sql``."""
        return self.functions / f"{name}.sql"

    async def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the script on this checkout, with the session's server as ``DATABASE_URL``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BIRDDOG_")}
        env["DATABASE_URL"] = self.server
        command = [sys.executable, str(SCRIPT), *args]
        command += ["--migrations", str(self.migrations), "--functions", str(self.functions)]
        return await asyncio.to_thread(
            subprocess.run,
            command,
            env=env, cwd=self.root, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip

    def revisions(self) -> list[str]:
        """The revisions' file names."""
        return sorted(path.name for path in (self.migrations / "versions").glob("*.py"))


def _checkout(tmp_path: Path, server: str) -> Checkout:
    checkout = Checkout(tmp_path / "checkout", server)
    shutil.copytree(
        ROOT / "migrations",
        checkout.migrations,
        ignore=shutil.ignore_patterns("__pycache__", "new_revision.py"),
    )
    checkout.functions.mkdir()
    for path in FUNCTIONS.glob("*.sql"):
        shutil.copy(path, checkout.functions)
    shutil.copy(ROOT / "pyproject.toml", checkout.root)
    return checkout


async def _functions(dsn: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        return await schema_functions(conn)
    finally:
        await conn.close()


async def _acl(dsn: str, function: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        acl = await conn.fetchval(
            "SELECT coalesce(proacl::text[], '{}') FROM pg_proc WHERE oid = $1::regprocedure",
            function,
        )
    finally:
        await conn.close()
    return list(acl)


def _alembic(checkout: Checkout, dsn: str, operation: str, revision: str) -> None:
    config = alembic_config(dsn)
    config.set_main_option("script_location", str(checkout.migrations))
    getattr(command, operation)(config, revision)


async def test_a_revision_from_edited_files_freezes_their_text_and_runs_both_ways(
    tmp_path: Path, postgres_server_dsn: str, empty_database_url: str
) -> None:
    """Edited, retyped and new files become one revision that installs them and undoes them."""
    checkout = _checkout(tmp_path, postgres_server_dsn)
    shipped = function_files()
    # An edited body, written with a header of the developer's own spelling.
    ack = checkout.file("ack").read_text(encoding="utf-8")
    checkout.file("ack").write_text(
        ack.replace("Mark mailbox replies read;", "Mark mailbox replies as read;").replace(
            "SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'",
            "SET search_path = pg_catalog, birddog, pg_temp",
        ),
        encoding="utf-8",
    )
    # A new result type: CREATE OR REPLACE cannot do it, so the old one is dropped first.
    fmt = checkout.file("_format_bytes").read_text(encoding="utf-8")
    checkout.file("_format_bytes").write_text(
        fmt.replace(" RETURNS text\n", " RETURNS character varying\n", 1), encoding="utf-8"
    )
    checkout.file("hello").write_text(
        "CREATE FUNCTION birddog.hello(p_who text) RETURNS text LANGUAGE sql IMMUTABLE\n"
        "AS $$ SELECT 'hello ' || p_who $$;\n",
        encoding="utf-8",
    )

    # The head as shipped (so the test holds whichever revision lands next).
    head = max(
        int(path.name[:4])
        for path in (checkout.migrations / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")
    )
    old, new = f"{head:04d}", f"{head + 1:04d}"

    done = await checkout.run("ack_reads_better")

    assert done.returncode == 0, done.stderr
    assert f"{new}_ack_reads_better.py (revises {old})" in done.stdout
    revision = checkout.migrations / "versions" / f"{new}_ack_reads_better.py"
    text = revision.read_text(encoding="utf-8")
    assert f'down_revision: str | Sequence[str] | None = "{old}"' in text
    assert "Mark mailbox replies as read;" in text  # frozen in the revision itself
    assert "Mark mailbox replies read;" in text  # and what the downgrade restores
    assert "importlib" not in text
    assert 'op.execute("DROP FUNCTION birddog._format_bytes(p_size bigint)")' in text
    for lint in (["check"], ["format", "--check"]):
        linted = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "ruff", *lint, str(revision)],
            cwd=checkout.root, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert linted.returncode == 0, linted.stdout + linted.stderr
    # The files are rewritten as PostgreSQL prints them.
    written = function_files(checkout.functions)
    assert "SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'" in written["ack"]
    assert written["hello"].startswith("CREATE OR REPLACE FUNCTION birddog.hello(p_who text)\n")

    await asyncio.to_thread(_alembic, checkout, empty_database_url, "upgrade", "head")
    assert await _functions(empty_database_url) == written
    assert not [entry for entry in await _acl(empty_database_url, "birddog.hello(text)")
                if entry.startswith("=")]  # fmt: skip
    await asyncio.to_thread(_alembic, checkout, empty_database_url, "downgrade", old)
    assert await _functions(empty_database_url) == shipped


async def test_files_mode_writes_every_file_from_the_revisions(
    tmp_path: Path, postgres_server_dsn: str
) -> None:
    """``--files`` restores a missing or edited file and removes one without a function."""
    checkout = _checkout(tmp_path, postgres_server_dsn)
    before = checkout.revisions()
    checkout.file("settle").unlink()
    checkout.file("claim").write_text("-- not what the revisions install\n", encoding="utf-8")
    checkout.file("stray").write_text("-- no such function\n", encoding="utf-8")

    done = await checkout.run("--files")

    assert done.returncode == 0, done.stderr
    assert "claim.sql" in done.stdout
    assert "stray.sql (removed)" in done.stdout
    assert function_files(checkout.functions) == function_files()
    assert checkout.revisions() == before


async def test_a_file_that_defines_another_function_is_refused(
    tmp_path: Path, postgres_server_dsn: str
) -> None:
    """A file whose text defines a function of another name gets a clear error and no revision."""
    checkout = _checkout(tmp_path, postgres_server_dsn)
    before = checkout.revisions()
    checkout.file("hello").write_text(
        "CREATE FUNCTION birddog.goodbye() RETURNS text LANGUAGE sql AS $$ SELECT 'bye' $$;\n",
        encoding="utf-8",
    )

    done = await checkout.run("hello")

    assert done.returncode == 2
    assert done.stderr.startswith("error: hello.sql defines birddog.goodbye: ")
    assert "Traceback" not in done.stderr
    assert checkout.revisions() == before


def test_no_revision_keeps_the_placeholder_of_its_docstring() -> None:
    """Every revision says what it changes and why instead of the script's placeholder."""
    script = SCRIPT.read_text(encoding="utf-8")
    placeholder = "Say here what changes and why"
    assert placeholder in script
    unsaid = [
        path.name
        for path in sorted((ROOT / "migrations" / "versions").glob("*.py"))
        if placeholder in path.read_text(encoding="utf-8")
    ]
    assert not unsaid, f"say in the docstring what these revisions change and why: {unsaid}"
