"""The layers hold: the core is pure, and the resident loops never name the database driver."""

from __future__ import annotations

import ast
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
        *(SOURCE / "engine").glob("*.py"),
    ]
)
"""The app layer: the composition root, the commands, the console, the processes, the engine."""


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
