"""The layers hold: the core is pure, the loops never name the driver, the app never the adapter.

And the commands are handed services typed by port (``with_services``), never the adapters.
"""

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


# ---- every package in its place -------------------------------------------------------

LAYERS: dict[str, int] = {
    "core": 0,
    "ports": 1,
    "clock": 1,
    "lazy": 1,
    "logs": 1,
    "supervisor": 1,
    "runtime": 2,
    "cancels": 2,
    "sealing": 2,
    "tracing": 2,
    "display": 2,
    "engine": 3,
    "settings": 4,
    "service": 4,
    "testing": 4,
    "postgres": 5,
    "http": 5,
    "spool": 5,
    "sqlite": 5,
    "metrics": 6,
    "turns": 6,
    "console": 6,
    "listen": 6,
    "mcp": 6,
    "a2a": 6,
    "worker": 7,
    "daemon": 7,
    "spawn": 8,
    "bootstrap": 9,
    "processes": 10,
    "cli": 11,
    "": 11,
}
"""The floor of each part of birddog ("" is the package's own __init__): a module imports
only from floors below its own, or from its own part. The core is the ground; ports and
the pure helpers stand on it; then the engine, the application layer (service) and its
fakes, the adapters, the protocol adapters, the processes' loops, the composition root,
the processes, and the entry points on top."""

POSTGRES_USERS = ("postgres", "bootstrap")
"""The only parts that may import birddog.postgres: the adapters and the composition root."""

BOOTSTRAP_USERS = ("bootstrap", "processes", "cli", "")
"""The only parts that may import birddog.bootstrap: the entry points (and the public
package's lazy names)."""

ALL_MODULES = sorted(SOURCE.rglob("*.py"))
"""Every module of birddog."""


def part_of_path(path: Path) -> str:
    """The part of birddog a file belongs to: its first folder or module name."""
    relative = path.relative_to(SOURCE)
    return "" if relative.parts == ("__init__.py",) else relative.parts[0].removesuffix(".py")


def part_of_module(name: str) -> str | None:
    """The part a ``birddog...`` module name belongs to (None: not birddog's)."""
    parts = name.split(".")
    if parts[0] != "birddog":
        return None
    return parts[1] if len(parts) > 1 else ""


def birddog_imports(path: Path) -> set[str]:
    """Every birddog module ``path`` imports (``from birddog import x`` names ``birddog.x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("birddog"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "birddog":
                names.update(f"birddog.{alias.name}" for alias in node.names)
            elif node.module.startswith("birddog."):
                names.add(node.module)
    return names


def test_every_part_of_birddog_has_a_floor() -> None:
    """A new package or top-level module must be placed in LAYERS before it is used."""
    parts = {part_of_path(path) for path in ALL_MODULES}
    assert sorted(parts - set(LAYERS)) == []


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda path: str(path.relative_to(SOURCE)))
def test_imports_point_down(path: Path) -> None:
    """A module imports only its own part or parts on lower floors: no arrow runs back up."""
    own = part_of_path(path)
    upward = sorted(
        name
        for name in birddog_imports(path)
        if (part := part_of_module(name)) is not None
        and part != own
        and part in LAYERS
        and LAYERS[part] >= LAYERS[own]
    )
    assert upward == []


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda path: str(path.relative_to(SOURCE)))
def test_only_the_adapters_and_the_composition_root_import_postgres(path: Path) -> None:
    """birddog.postgres is imported by postgres/ and bootstrap/ only; the rest use ports."""
    if part_of_path(path) in POSTGRES_USERS:
        return
    assert sorted(n for n in birddog_imports(path) if part_of_module(n) == "postgres") == []


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda path: str(path.relative_to(SOURCE)))
def test_only_the_entry_points_import_the_composition_root(path: Path) -> None:
    """birddog.bootstrap is imported by cli/, processes/ and birddog's lazy names only."""
    if part_of_path(path) in BOOTSTRAP_USERS:
        return
    assert sorted(n for n in birddog_imports(path) if part_of_module(n) == "bootstrap") == []


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda path: str(path.relative_to(SOURCE)))
def test_only_the_database_adapters_import_a_database_driver(path: Path) -> None:
    """asyncpg, SQLAlchemy and psycopg are birddog.postgres's own; nobody else names them."""
    if part_of_path(path) == "postgres":
        return
    assert drivers_in(path, DATABASE_DRIVERS) == []


def test_the_application_layer_is_written_against_ports() -> None:
    """service/ names no adapter, no composition root, no entry point: ports and the core."""
    allowed = {"core", "ports", "service", "engine", "runtime", "clock"}
    for path in sorted((SOURCE / "service").glob("*.py")):
        parts = {part_of_module(name) for name in birddog_imports(path)}
        assert parts - allowed == set(), path.name


# ---- the commands are handed services, typed by port ----------------------------------

CLI_MODULES = sorted((SOURCE / "cli").glob("*.py"))
"""The command line's modules."""

CLI_COMPOSITION = SOURCE / "cli" / "__init__.py"
"""The one command-line module that opens the adapters (``with_services``)."""

CLI_BOOTSTRAP_NAMES = frozenset(
    {
        "CLOCK",
        "HEARTBEAT_S",
        "guarded_paths",
        "migrate_schema",
        "open_spool",
        "psql_session",
        "refusal_reason",
        "running_database",
        "transient_reason",
    }
)
"""What a command may take from the composition root besides the services: wiring that
needs no database (the clock, the spool, the data directory) and the database's setup."""


def bootstrap_names(path: Path) -> dict[str, str]:
    """Each name ``path`` imports from a birddog.bootstrap module, and that module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("birddog.bootstrap"):
                names.update((alias.name, node.module) for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(
                (alias.name, alias.name)
                for alias in node.names
                if alias.name.startswith("birddog.bootstrap")
            )
    return names


def adapter_names(path: Path) -> list[str]:
    """Every ``Adapters`` or ``Postgres*`` name ``path`` mentions (annotations included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.rsplit(".", 1)[-1])
    return sorted(n for n in found if n == "Adapters" or n.startswith("Postgres"))


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda path: path.name)
def test_commands_name_no_adapter(path: Path) -> None:
    """A command sees Services and ports: never Adapters, never a Postgres* class."""
    assert adapter_names(path) == []


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda path: path.name)
def test_commands_take_only_wiring_from_the_composition_root(path: Path) -> None:
    """Only with_services opens the adapters; a command takes no other adapter from bootstrap."""
    allowed = CLI_BOOTSTRAP_NAMES | ({"open_adapters"} if path == CLI_COMPOSITION else set())
    names = bootstrap_names(path)
    assert sorted(set(names) - allowed) == []
    assert "birddog.bootstrap.adapters" not in names.values()
