"""The pre-commit hooks and the Makefile check the same things, the way CI checks them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def _hooks() -> list[dict[str, Any]]:
    """Every hook of .pre-commit-config.yaml, each checked to be a local one."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks: list[dict[str, Any]] = []
    for repo in config["repos"]:
        assert repo["repo"] == "local", f"a hook from elsewhere runs other versions: {repo}"
        hooks.extend(repo["hooks"])
    return hooks


def _rule(target: str) -> tuple[list[str], list[str]]:
    """A Makefile target's prerequisites and its recipe's commands, as written."""
    # A rule's line, not a target-specific variable's (test: export NAME := value).
    match = re.search(rf"^{target}:(?![^\n]*=)(.*)\n((?:\t.*\n)*)", MAKEFILE, re.MULTILINE)
    assert match, f"the Makefile has no {target} target"
    prerequisites = match.group(1).split()
    return prerequisites, [line.strip() for line in match.group(2).splitlines()]


def test_the_hooks_are_the_make_targets_that_make_test_runs_first() -> None:
    """Each hook runs a make target over the whole tree; make test runs those same targets."""
    hooks = _hooks()
    assert [hook["entry"] for hook in hooks] == ["make lint", "make typecheck"]
    for hook in hooks:
        assert hook["language"] == "system", hook
        assert hook["pass_filenames"] is False, f"make checks the whole tree: {hook}"
        for changed in ("src/birddog/service/mail.py", "tests/support/cli.py", "pyproject.toml"):
            assert re.search(hook["files"], changed), (hook["id"], changed)
    test_prerequisites, _ = _rule("test")
    for hook in hooks:
        assert hook["entry"].removeprefix("make ") in test_prerequisites


def test_the_targets_run_ruff_ruff_format_and_mypy_on_the_same_trees() -> None:
    """Lint runs ruff check and ruff format --check on the paths fmt fixes; mypy src and tests."""
    _, lint = _rule("lint")
    paths = "src tests bench migrations examples"
    assert lint == [f"$(BIN)/ruff check {paths}", f"$(BIN)/ruff format --check {paths}"]
    _, fmt = _rule("fmt")
    assert fmt == [f"$(BIN)/ruff format {paths}", f"$(BIN)/ruff check --fix {paths}"]
    _, typecheck = _rule("typecheck")
    assert typecheck == ["$(BIN)/mypy src tests"]
