"""Kill what you spawn, as a lint: only birddog.spawn starts child processes in src/birddog.

A child started anywhere else would not be in a process group of its own that BirdDog
ends on timeout, cancellation or shutdown. Foreground programs the user runs in their own
terminal session are the listed exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "birddog"

SPAWNING = {
    "create_subprocess_exec",
    "create_subprocess_shell",
    "Popen",
    "run",
    "call",
    "check_call",
    "check_output",
    "fork",
    "forkpty",
    "posix_spawn",
    "posix_spawnp",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
    "system",
    "popen",
}
"""Names of the standard library's ways to start a process (on subprocess, os, asyncio)."""

MODULES = {"subprocess", "os", "asyncio"}

ALLOWED = {
    "spawn/groups.py": "the process-group runner itself",
    "supervisor.py": "the supervisor every spawned child runs under: it starts that child",
    "cli/database.py": "birddog psql: the user's own psql in the foreground of their terminal",
    "postgres/embedded/programs.py": "initdb and pg_ctl run to completion for the embedded "
    "server, which is meant to outlive the call (pg_ctl stops it)",
    "postgres/embedded/account.py": "useradd runs to completion to make the embedded server's user",
}


def spawning_calls(path: Path) -> list[str]:
    """The calls in a file that start a process through the standard library."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if (
            node.func.attr in SPAWNING
            and isinstance(owner, ast.Name)
            and owner.id in MODULES
            and not (owner.id == "asyncio" and node.func.attr == "run")
        ):
            found.append(f"{owner.id}.{node.func.attr} at line {node.lineno}")
    return found


def test_only_birddog_spawn_starts_processes() -> None:
    """No module outside the allowed list starts a process without birddog.spawn."""
    offenders = {
        str(path.relative_to(SOURCE)): calls
        for path in sorted(SOURCE.rglob("*.py"))
        if str(path.relative_to(SOURCE)) not in ALLOWED and (calls := spawning_calls(path))
    }
    assert offenders == {}, "start child processes with birddog.spawn (kill what you spawn)"


def test_the_lint_sees_a_spawning_call(tmp_path: Path) -> None:
    """The lint recognises the calls it is meant to refuse."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio, subprocess\n"
        "async def f():\n"
        "    await asyncio.create_subprocess_exec('x')\n"
        "    subprocess.Popen(['x'])\n"
        "    asyncio.run(f())\n"
    )
    assert sorted(spawning_calls(sample)) == [
        "asyncio.create_subprocess_exec at line 3",
        "subprocess.Popen at line 4",
    ]
