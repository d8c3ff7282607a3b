"""The layers hold: the core is pure, the loops never name the driver, the app never the adapter."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

SOURCE = Path(str(resources.files("birddog")))

DRIVERS = ("asyncpg", "sqlalchemy", "psycopg", "aiohttp")
"""Libraries only adapters may import (aiohttp also the app's own HTTP servers)."""

DATABASE_DRIVERS = ("asyncpg", "sqlalchemy", "psycopg")
"""Libraries only the database adapters (``birddog.postgres``) may import."""

APP_LOOPS = ("worker.py", "daemon.py", "runtime.py")
"""The resident processes' loops: they catch BirdDog errors only."""

APP_MODULES = sorted(
    [
        *(path for path in SOURCE.glob("*.py")),
        *(SOURCE / "cli").glob("*.py"),
        *(SOURCE / "console").glob("*.py"),
        *(SOURCE / "processes").glob("*.py"),
        *(SOURCE / "engine").glob("*.py"),
        *(SOURCE / "bootstrap").glob("*.py"),
        *(SOURCE / "spawn").glob("*.py"),
    ]
)
"""The app layer: the composition root, the commands, the console, the processes, the engine,
and what agents run under (spawn)."""

COMPOSITION_ROOT = sorted((SOURCE / "bootstrap").glob("*.py"))
"""The app package that names the Postgres adapters (the processes take them from it)."""


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def drivers_in(path: Path, drivers: tuple[str, ...] = DRIVERS) -> list[str]:
    """The driver libraries ``path`` imports."""
    return sorted(name for name in imported_modules(path) if name.split(".")[0] in drivers)


@pytest.mark.parametrize("name", APP_LOOPS)
def test_the_resident_loops_never_import_a_driver(name: str) -> None:
    """Worker, daemon and runtime see StoreUnavailable, never asyncpg's own errors."""
    assert drivers_in(SOURCE / name) == []


def test_the_core_imports_no_driver_and_no_app_module() -> None:
    """core/ is pure: no driver, and nothing outside the core but the standard library."""
    for path in sorted((SOURCE / "core").glob("*.py")):
        modules = imported_modules(path)
        assert drivers_in(path) == [], path.name
        outside = {
            m for m in modules if m.startswith("birddog.") and not m.startswith("birddog.core")
        }
        assert outside == set(), path.name


@pytest.mark.parametrize("path", APP_MODULES, ids=lambda path: str(path.relative_to(SOURCE)))
def test_the_app_layer_never_imports_a_database_driver(path: Path) -> None:
    """Only birddog.postgres knows the database driver; the app sees BirdDog errors."""
    assert drivers_in(path, DATABASE_DRIVERS) == []


def test_an_adapter_module_loads_without_alembic_or_sqlalchemy() -> None:
    """Importing the outbox, wake or routes adapter loads no migration library (a fresh process)."""
    script = (
        "import sys\n"
        "import birddog.postgres.outbox, birddog.postgres.wake, birddog.postgres.routes\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & {'alembic', 'sqlalchemy'})))"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def postgres_imports(path: Path) -> list[str]:
    """The Postgres adapter modules ``path`` imports, and any import of ``queries``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("birddog.postgres"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("birddog.postgres") or (
                node.module == "birddog" and any(a.name == "postgres" for a in node.names)
            ):
                found.add(node.module)
            found.update(f"{node.module}.queries" for a in node.names if a.name == "queries")
    return sorted(found)


@pytest.mark.parametrize(
    "path",
    [path for path in APP_MODULES if path not in COMPOSITION_ROOT],
    ids=lambda path: str(path.relative_to(SOURCE)),
)
def test_only_the_composition_root_names_the_postgres_adapters(path: Path) -> None:
    """Commands, console and processes reach the database through bootstrap or a port."""
    assert postgres_imports(path) == []


def test_the_processes_stand_above_the_composition_root() -> None:
    """A process module takes its adapters from bootstrap, which never imports a process."""
    assert COMPOSITION_ROOT, "no composition root found"
    for root in COMPOSITION_ROOT:
        imported = imported_modules(root)
        assert not any(name.startswith("birddog.processes") for name in imported), root.name
    for path in sorted((SOURCE / "processes").glob("*.py")):
        assert postgres_imports(path) == [], path.name
