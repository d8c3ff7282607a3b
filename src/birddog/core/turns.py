"""Where a job's turn runs, so that no second turn starts while a process of it lives.

A worker that starts a process for a job (through :mod:`birddog.spawn`) records on the
job the host, the boot of that host and the supervisor's pid with its start time. A pid
alone is not a process: after the process ends the kernel gives the number out again,
so the start time (and the boot: counters start again at every boot) tell a reused pid
from the supervisor that was recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_KILL_GRACE_S", "TURNS_WINDOW_S", "Turn"]

DEFAULT_KILL_GRACE_S: Final = 5.0
"""How long a turn's processes get between ``SIGTERM`` and ``SIGKILL``
(``BIRDDOG_KILL_GRACE_S``); a job whose lease ended is recovered only this long after,
when the supervisor of a killed worker has ended them."""


TURNS_WINDOW_S: Final = 3600.0
"""How far back ``birddog status`` and the daemon's turn gauges count settled turns (turns,
mails per turn and spawns, by kind and how they ran)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """The supervisor of a job's turn: where it runs and which process it is.

    Attributes:
        host: the host name of the machine the turn runs on.
        boot_id: that machine's boot (Linux ``/proc/sys/kernel/random/boot_id``).
        pid: the supervisor's process id; it leads the turn's process group.
        start_ticks: when the supervisor started, in clock ticks since boot.
    """

    host: str
    boot_id: str
    pid: int
    start_ticks: int
