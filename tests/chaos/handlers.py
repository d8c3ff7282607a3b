"""The handler the fault run's workers run (``birddog worker --handler tests.chaos.handlers:answer``).

Every job answers ``answer:<command fact id>``, so a recipient can check each reply it gets
against the job that owed it. One job (command ``CHAOS_BLOCK_COMMAND``) blocks the first
time it runs: the handler writes the ``CHAOS_MARKER`` file and waits forever, so the test
knows the job is running and kills its worker mid-job. When a second worker runs the
recovered job, the marker exists and the job answers like any other.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from birddog import AgentJobPayload
from tests.support import answer_for


async def answer(payload: AgentJobPayload) -> str:
    """Answer at once, except the first run of the blocking job, which never returns."""
    command = payload.command_fact_id
    if command == os.environ.get("CHAOS_BLOCK_COMMAND") and _first_run():
        await asyncio.Event().wait()  # until the test SIGKILLs this worker
    return answer_for(command)


def _first_run() -> bool:
    """Leave the marker for the test; True only if it was not there yet."""
    marker = Path(os.environ["CHAOS_MARKER"])
    if marker.exists():
        return False
    marker.write_text(str(os.getpid()))
    return True
