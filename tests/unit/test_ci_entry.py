"""The CI entry point stays a working script: bash parses it, and it ends in make test."""

from __future__ import annotations

import subprocess
from pathlib import Path

CI = Path(__file__).resolve().parents[2] / ".ci" / "run"


def test_the_ci_entry_point_parses_and_runs_make_test_non_interactively() -> None:
    """The script parses (bash -n), its installs never prompt, and it ends in make test."""
    subprocess.run(["bash", "-n", str(CI)], check=True, timeout=30)  # noqa: S603, S607 - bash from PATH
    lines = [line.strip() for line in CI.read_text().splitlines() if line.strip()]
    commands = [line for line in lines if not line.startswith("#")]
    assert commands[-1] == "make test"
    assert "set -euo pipefail" in commands
    for line in commands:
        if "apt-get install" in line:
            assert "DEBIAN_FRONTEND=noninteractive" in line
            assert " -y " in line
