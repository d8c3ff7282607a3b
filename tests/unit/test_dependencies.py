"""Dependencies: the lock pins everything installed, and the bounds are the tested ones."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = ROOT / "constraints.txt"


def _locked() -> dict[str, Version]:
    """Each package the lock pins, by canonical name."""
    pins: dict[str, Version] = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, equals, version = line.partition("==")
        assert equals, f"the lock pins with ==, not: {line!r}"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _published() -> list[Requirement]:
    """The runtime dependencies and the users' extras."""
    project = PYPROJECT["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(text) for text in [*project["dependencies"], *extras]]


def test_every_published_dependency_is_locked_within_its_bounds() -> None:
    """Each runtime and extra requirement is pinned by the lock at a version it allows."""
    locked = _locked()
    for requirement in _published():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in {LOCK.name}: run make lock"
        assert requirement.specifier.contains(locked[name]), (
            f"{LOCK.name} pins {name} {locked[name]}, outside {requirement.specifier}"
        )


def test_lower_bounds_name_the_release_series_the_lock_tests() -> None:
    """A runtime lower bound is the major.minor the lock pins: nothing older is claimed."""
    locked = _locked()
    for requirement in _published():
        name = canonicalize_name(requirement.name)
        lower = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{requirement} needs one lower bound (>=)"
        assert lower[0].release[:2] == locked[name].release[:2], (
            f"{requirement}: the lock tests {locked[name]}; make the lower bound"
            f" >={locked[name].major}.{locked[name].minor}"
        )


def test_every_tool_of_the_locked_groups_is_pinned() -> None:
    """Whatever the test, lint and bench groups name is in the lock, so CI runs it too."""
    locked = _locked()
    groups = PYPROJECT["dependency-groups"]
    named = [r for group in ("test", "lint", "bench") for r in groups[group]]
    missing = [r for r in named if canonicalize_name(Requirement(r).name) not in locked]
    assert missing == [], f"not in {LOCK.name} (run make lock): {missing}"


def test_the_makefile_installs_only_through_the_lock() -> None:
    """Every pip install of make's venv is constrained by the lock (make lock's own aside)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installing, _, lock_recipe = makefile.partition("\nlock:")
    assert lock_recipe, "the Makefile has a lock target"
    assert re.search(r"^INSTALL := .*--constraint \$\(LOCK\)", installing, re.MULTILINE)
    assert "LOCK   := constraints.txt" in installing
    for line in installing.splitlines():
        if "pip install" in line and not line.startswith(("INSTALL :=", "#")):
            assert "--constraint $(LOCK)" in line, line


def test_the_installer_itself_is_pinned() -> None:
    """The Makefile installs with uv, which pip installs at the release the lock pins."""
    assert "uv" in _locked(), f"uv is not in {LOCK.name} (run make lock)"
