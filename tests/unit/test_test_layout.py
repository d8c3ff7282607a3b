"""The tests' own layout: shared code comes from ``tests.support`` only."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = "tests.support"


def _imported_test_code(path: Path) -> list[str]:
    """Every import in ``path`` of test code other than ``tests.support``, as ``line: module``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import reaches a sibling module or conftest
                found.append(f"{node.lineno}: {'.' * node.level}{node.module or ''}")
                continue
            modules = [node.module or ""]
        else:
            continue
        found.extend(f"{node.lineno}: {module}" for module in modules if _forbidden(module))
    return found


def _forbidden(module: str) -> bool:
    """Whether ``module`` is test code that is not ``tests.support`` or part of it."""
    in_tests = module == "tests" or module.startswith("tests.")
    return in_tests and module != SUPPORT and not module.startswith(f"{SUPPORT}.")


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    """Every Python file under tests/ imports test code only from tests.support."""
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50, "the scan found too few files to mean anything"
    offenders = {
        str(path.relative_to(TESTS.parent)): imports
        for path in files
        if (imports := _imported_test_code(path))
    }
    assert offenders == {}, (
        "import shared test code from tests.support (move it there), not from a test"
        f" module or a conftest: {offenders}"
    )


def test_the_scan_sees_the_imports_it_forbids(tmp_path: Path) -> None:
    """The scan reports a conftest import, a test-module import and a relative import."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "from tests.acceptance.conftest import cli\n"
        "import tests.integration.test_engine\n"
        "from .conftest import Harness\n"
        "from tests.support import eventually\n"
        "from tests.support.cli import Daemon\n",
        encoding="utf-8",
    )
    assert _imported_test_code(sample) == [
        "1: tests.acceptance.conftest",
        "2: tests.integration.test_engine",
        "3: .conftest",
    ]
