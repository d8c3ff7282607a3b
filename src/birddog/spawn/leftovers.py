"""Turns whose worker is gone: found by their record, ended by their supervisor."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path

import structlog

from birddog.core.errors import StoreUnavailable
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.ports import TurnRecords
from birddog.spawn.groups import POLL_S, SUPERVISOR_SLACK_S
from birddog.supervisor import SCRIPT, boot_id, process_start_ticks

__all__ = ["end_leftover_turn", "end_leftover_turns"]

log = structlog.get_logger("birddog.spawn")


def _supervised_by(pid: int) -> int | None:
    """The worker pid a BirdDog supervisor was started by (its ``--parent``), else None."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if os.fsencode(SCRIPT) not in words or b"--parent" not in words[:-1]:
        return None
    value = words[words.index(b"--parent") + 1]
    return int(value) if value.isdigit() else None


def _parent_of(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 else None


async def end_leftover_turn(turn: Turn, *, grace_s: float = DEFAULT_KILL_GRACE_S) -> bool:
    """End a turn still running on this host for a worker that is gone.

    Nothing is signalled unless the recorded supervisor is this host's, of this boot,
    with the recorded start time (a reused pid has another), is a BirdDog supervisor, and
    its worker is gone (it was re-parented). Then it is asked to end its tree
    (``SIGTERM``, and ``SIGCONT`` should it be stopped); what is left after the grace and
    a margin gets ``SIGKILL`` with its whole group.

    Args:
        turn: where the turn was recorded to run.
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.

    Returns:
        Whether a leftover turn was found (and ended).
    """
    if turn.host != socket.gethostname() or turn.boot_id != boot_id():
        return False
    if process_start_ticks(turn.pid) != turn.start_ticks:
        return False
    worker = _supervised_by(turn.pid)
    if worker is None or _parent_of(turn.pid) == worker:
        return False  # not a supervisor of ours, or its worker still runs it
    loop = asyncio.get_running_loop()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(turn.pid, signal.SIGTERM)
        os.kill(turn.pid, signal.SIGCONT)  # a stopped supervisor must run to end its tree
    deadline = loop.time() + grace_s + SUPERVISOR_SLACK_S
    while process_start_ticks(turn.pid) == turn.start_ticks:
        if loop.time() >= deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(turn.pid, signal.SIGKILL)
            break
        await asyncio.sleep(POLL_S)
    return True


async def end_leftover_turns(
    jobs: TurnRecords, *, grace_s: float = DEFAULT_KILL_GRACE_S
) -> list[str]:
    """End every turn on this host whose worker is gone (a worker runs this at start).

    Args:
        jobs: the job store, which holds where running jobs' turns run.
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.

    Returns:
        The ids of the jobs whose leftover turn was ended.

    A database that cannot be reached is logged (``leftover_turns_unchecked``) and
    nothing is ended: the reaper's kill grace still keeps the jobs from running again.
    """
    booted = boot_id()
    if booted is None:
        return []  # no /proc: no turn was recorded here
    try:
        recorded = await jobs.turns_on_host(host=socket.gethostname(), boot_id=booted)
    except StoreUnavailable as exc:
        log.warning("leftover_turns_unchecked", error=type(exc.__cause__ or exc).__name__)
        return []
    ended = []
    for job_id, turn in recorded:
        if await end_leftover_turn(turn, grace_s=grace_s):
            log.warning("leftover_turn_ended", job_id=job_id, pid=turn.pid)
            ended.append(job_id)
    return ended
