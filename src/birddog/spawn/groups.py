"""One supervised child: a process group led by its supervisor, ended whole on leaving."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import structlog

from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.spawn.environment import agent_environment
from birddog.spawn.errors import CommandNotFound
from birddog.spawn.users import RunAs
from birddog.supervisor import EXIT_CANNOT_START, boot_id, process_start_ticks, supervisor_argv
from birddog.turns import report_turn

__all__ = ["POLL_S", "SUPERVISOR_SLACK_S", "ProcessGroup", "process_group"]

log = structlog.get_logger("birddog.spawn")

SUPERVISOR_SLACK_S: Final = 2.0
"""Beyond the grace, how long a supervisor may take to end its tree and exit before its
whole group is sent ``SIGKILL`` from outside."""

_REAP_S: Final = 2.0
"""After ``SIGKILL``, how long to wait for the group to be gone before saying so, and
for its pipes to reach their end."""

POLL_S: Final = 0.02
"""How often a dying group is looked at."""


class ProcessGroup:
    """A child process under its supervisor, which leads the child's process group.

    Args:
        process: the supervisor, started in a session of its own (``setsid``).
        grace_s: how long the group gets between ``SIGTERM`` and ``SIGKILL``.

    Attributes:
        process: the supervisor (its exit status is the command's).
        pgid: the group's id (the supervisor's pid).
        command_pid: the command's pid, once it started.
    """

    def __init__(self, process: asyncio.subprocess.Process, *, grace_s: float) -> None:
        self.process = process
        self.pgid = process.pid
        self.grace_s = grace_s
        self.command_pid: int | None = None

    def alive(self) -> bool:
        """Whether any process of the group is still running (zombies do not count).

        The supervisor is one of them, and exits only once everything it watches ended.
        """
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _running_member(self.pgid)

    async def end(self) -> None:
        """End the child and everything it started: ``SIGTERM``, ``SIGKILL`` after the grace.

        The supervisor is asked (``SIGTERM``) and does it, reaching processes that left
        the group too; should it not be done within the grace and a margin, the whole
        group gets ``SIGKILL``. Returns at once when everything has already ended.
        Cancelling it asks the supervisor for ``SIGKILL`` at once before the
        cancellation goes on, so it never leaves the tree behind.
        """
        try:
            if self.alive():
                self._tell(signal.SIGTERM)
                if not await self._gone_within(self.grace_s + SUPERVISOR_SLACK_S):
                    self._signal(signal.SIGKILL)
                    if not await self._gone_within(_REAP_S):
                        log.warning("process_group_lingers", pgid=self.pgid)
        except asyncio.CancelledError:
            self._tell(signal.SIGUSR1)
            raise

    async def close(self) -> None:
        """End the group, then read its pipes to their end and collect the child's status.

        What is still unread in the pipes is discarded.
        """
        await self.end()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drain_and_wait(), _REAP_S)

    async def _drain_and_wait(self) -> None:
        # Nobody writes any more, so each pipe reaches its end at once; only then does
        # asyncio let go of the child (its wait() waits for the pipes as well).
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                while await stream.read(65536):
                    pass
        await self.process.wait()

    def _tell(self, sig: signal.Signals) -> None:
        """Signal the supervisor alone: it passes the word on to what it watches."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pgid, sig)
            log.info("process_group_signalled", pgid=self.pgid, signal=sig.name)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)
            log.info("process_group_signalled", pgid=self.pgid, signal=sig.name)

    async def _gone_within(self, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.alive():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True


def _running_member(pgid: int) -> bool:
    """Whether a non-zombie process belongs to group ``pgid`` (Linux ``/proc``).

    An orphaned member that has exited stays a zombie until its new parent reaps it;
    ``kill(0)`` still finds it, though nothing runs. Without ``/proc``, any member counts.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses).
        fields = stat_line.rpartition(")")[2].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            return True
    return False


async def _started(group: ProcessGroup, status_fd: int, argv: Sequence[str]) -> None:
    """Wait for the supervisor's word that the command runs; raise if it could not start."""
    pipe = os.fdopen(status_fd, "rb", buffering=0)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        line = (await reader.readline()).decode("utf-8", "replace").strip()
    finally:
        transport.close()
    word, _, rest = line.partition(" ")
    if word == "started" and rest.isdigit():
        group.command_pid = int(rest)
        return
    await group.close()
    if word == "failed":
        number, _, reason = rest.partition(" ")
        raise CommandNotFound(f"cannot run {argv[0]!r}: {reason or 'error ' + number}")
    code = group.process.returncode
    raise CommandNotFound(
        f"cannot run {argv[0]!r}: its supervisor ended before starting it"
        + ("" if code in (None, EXIT_CANNOT_START) else f" (exit status {code})")
    )


async def _record(group: ProcessGroup) -> None:
    """Tell the worker running the current job where this turn runs (when it can know)."""
    booted = boot_id()
    ticks = process_start_ticks(group.pgid)
    if booted is None or ticks is None:
        return  # no /proc: nothing could check the record later
    await report_turn(
        Turn(host=socket.gethostname(), boot_id=booted, pid=group.pgid, start_ticks=ticks)
    )


@contextlib.asynccontextmanager
async def process_group(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: int | None = asyncio.subprocess.PIPE,
    stdout: int | None = asyncio.subprocess.PIPE,
    stderr: int | None = asyncio.subprocess.PIPE,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    user: RunAs | None = None,
    remove: Path | None = None,
) -> AsyncIterator[ProcessGroup]:
    """Start ``argv`` under a supervisor leading a new session; end it all on leaving.

    The supervisor leads a new session and process group (``setsid``), so no process of
    the child's has a controlling terminal. However the block ends (normally, by an
    exception, or cancelled by a timeout), every process the child started and that
    still runs is sent ``SIGTERM`` and, after ``grace_s``, ``SIGKILL``; so it is when
    this process dies. Only fds 0-2 are open in the child. Run inside a worker's handler,
    the job records where the turn runs.

    Args:
        argv: the program and its arguments.
        env: the child's environment (default: :func:`agent_environment` of this
            process's: no credentials).
        cwd: the child's working directory (default: this process's).
        stdin: as for :func:`asyncio.create_subprocess_exec` (default: a pipe).
        stdout: likewise.
        stderr: likewise.
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.
        user: run the child as this user (the caller must be root; see :func:`run_as`).
        remove: a directory the supervisor removes once everything of the child ended,
            even when this process was killed (the fresh directory of a turn).

    Yields:
        The group; its ``process`` is the supervisor, whose exit status is the child's.

    Raises:
        CommandNotFound: the program does not exist or cannot be executed.
    """
    status_r, status_w = os.pipe()
    line = supervisor_argv(
        argv,
        parent_pid=os.getpid(),
        grace_s=grace_s,
        status_fd=status_w,
        uid=None if user is None else user.uid,
        gid=None if user is None else user.gid,
        groups=() if user is None else user.groups,
        remove=None if remove is None else str(remove),
    )
    try:
        process = await asyncio.create_subprocess_exec(
            *line,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=agent_environment(os.environ) if env is None else dict(env),
            cwd=cwd,
            # A new session, not only a new group: no controlling terminal, so neither
            # the agent nor anything it starts can open /dev/tty or push input into the
            # operator's terminal (TIOCSTI). The supervisor leads both session and group.
            start_new_session=True,
            pass_fds=(status_w,),
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        os.close(status_r)
        where = f"directory {str(cwd)!r}" if cwd is not None else repr(sys.executable)
        raise CommandNotFound(f"cannot run {argv[0]!r} in {where}: {exc.strerror or exc}") from exc
    finally:
        os.close(status_w)
    group = ProcessGroup(process, grace_s=grace_s)
    try:
        await _started(group, status_r, argv)
        await _record(group)
        yield group
    finally:
        await group.close()
