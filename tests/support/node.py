"""Node scripts as the interop tests run them: one process, its JSON report on stdout.

The scripts beside the interop tests (``tests/interop/*.mjs``) drive BirdDog with the
clients agent hosts are built on and print one JSON object, ``{"steps": {...}}``:
:func:`run_tour` runs one and returns its steps, failing with the script's stderr when it
does.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any, Final

__all__ = ["NODE", "run_tour"]

NODE: Final = shutil.which("node")
"""The ``node`` on PATH (None: the interop tests skip, saying so)."""


async def run_tour(
    script: Path, config: dict[str, Any], *, timeout_s: float = 240
) -> dict[str, Any]:
    """Run ``node SCRIPT CONFIG_JSON`` in the script's folder; the steps it reports.

    Args:
        script: the ``.mjs`` file (its folder holds the pinned ``node_modules``).
        config: what the script is told, as its one argument (JSON).
        timeout_s: the longest the script may run; past it the process is killed.

    Returns:
        The ``steps`` of the JSON object the script printed.
    """
    assert NODE is not None, "node is not on PATH"
    proc = await asyncio.create_subprocess_exec(
        NODE,
        str(script),
        json.dumps(config),
        cwd=script.parent,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()[-4000:]
    steps: dict[str, Any] = json.loads(out)["steps"]
    return steps
