"""The handler the fault run's workers run (``birddog worker --handler tests.chaos.handlers:answer``).

Every job answers ``answer:<command fact id>``, so a recipient can check each reply it gets
against the job that owed it, except jobs whose command ends ``-unstorable-<kind>``: they
return a result that cannot be stored (a NUL, a lone surrogate, more than 1 MiB, a
number) and must settle ``failed``. One job (command ``CHAOS_BLOCK_COMMAND``) blocks the
first time it runs: the handler writes the ``CHAOS_MARKER`` file and waits forever, so the
test knows the job is running and kills its worker mid-job. When a second worker runs the
recovered job, the marker exists and the job answers like any other.

Every finished turn is appended to ``CHAOS_TURNS`` (session, command, start, end), so the
test can prove no two turns of one session overlapped.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from birddog import AgentJobPayload
from tests.support import answer_for
from tests.support.chaos import CROWDED_SESSION, unstorable_result


async def answer(payload: AgentJobPayload) -> str:
    """Answer at once, except the first run of the blocking job, which never returns."""
    command = payload.command_fact_id
    if command == os.environ.get("CHAOS_BLOCK_COMMAND") and _first_run():
        await asyncio.Event().wait()  # until the test SIGKILLs this worker
    began = time.time()
    if payload.session_id == CROWDED_SESSION:
        await asyncio.sleep(0.02)  # a turn that takes a moment, so overlapping ones would show
    result = unstorable_result(command)
    _record_turn(payload.session_id, command, began, time.time())
    return answer_for(command) if result is None else result  # type: ignore[return-value]


def _record_turn(session: str, command: str, began: float, ended: float) -> None:
    with Path(os.environ["CHAOS_TURNS"]).open("a", encoding="utf-8") as turns:
        turns.write(f"{session}\t{command}\t{began!r}\t{ended!r}\n")


def _first_run() -> bool:
    """Leave the marker for the test; True only if it was not there yet."""
    marker = Path(os.environ["CHAOS_MARKER"])
    if marker.exists():
        return False
    marker.write_text(str(os.getpid()))
    return True
