"""Kill what you spawn: every child runs under a supervisor that ends it whole.

A timed-out call that stops listening but leaves the process it started running is an
orphan working at full effort for nobody, and a worker killed with ``SIGKILL`` cannot end
anything. So every process started here runs under :mod:`birddog.supervisor`, a small
script the worker's interpreter runs as the leader of a new process group: the kernel
tells it when the worker dies (Linux), it is the subreaper of everything the command
starts, and whenever the caller is done with the child (it finished, the caller was
cancelled by a timeout, a cancellation or a shutdown, anything raised, or the worker
died) the whole tree is ended: ``SIGTERM``, then ``SIGKILL`` after a grace period, even
what left the group with ``setsid`` or a double fork. On platforms without ``/proc``
and ``prctl`` (macOS) only the process group is reached; see SECURITY.md.

- :func:`process_group`: an async context manager around one supervised child.
- :func:`run_command`: run a program to completion with input, bounded output and the
  tail of its stderr.
- :func:`command_handler`: a worker handler that runs one process per job
  (``birddog worker --command``): mail content on stdin, ids in the environment, stdout
  the reply, a non-zero exit a failure with the tail of stderr as its diagnostic; in a
  fresh directory, with an allow-listed environment, optionally as another OS user.
- :func:`agent_environment`: the environment an agent gets (an allow-list, never the
  worker's credentials).

Python handlers that start agents use the first two::

    from birddog.spawn import agent_environment, run_command

    async def handle(payload: AgentJobPayload) -> str:
        done = await run_command(
            ["claude", "-p"],
            input=payload.mail.content.encode(),
            env=agent_environment(os.environ, passed=["ANTHROPIC_API_KEY"]),
        )
        return done.stdout.decode()       # cancelled by the worker: the group is killed
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog

from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH
from birddog.core.errors import BirdDogError, StoreUnavailable
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, AgentJobPayload
from birddog.core.turns import DEFAULT_KILL_GRACE_S, Turn
from birddog.ports import TurnRecords
from birddog.supervisor import (
    EXIT_CANNOT_START,
    SCRIPT,
    boot_id,
    process_start_ticks,
    supervisor_argv,
)
from birddog.worker import Handler, current_job, report_turn

__all__ = [
    "AGENT_ENVIRONMENT",
    "DEFAULT_KILL_GRACE_S",
    "AgentSetupRefused",
    "CommandFailed",
    "CommandNotFound",
    "Completed",
    "OutputTooLarge",
    "ProcessGroup",
    "RunAs",
    "agent_environment",
    "check_passed_names",
    "command_argv",
    "command_handler",
    "end_leftover_turn",
    "end_leftover_turns",
    "job_environment",
    "process_group",
    "run_as",
    "run_command",
]

log = structlog.get_logger("birddog.spawn")

STDERR_TAIL_BYTES: Final = 4096
"""How much of the end of a child's stderr is kept."""

SUPERVISOR_SLACK_S: Final = 2.0
"""Beyond the grace, how long a supervisor may take to end its tree and exit before its
whole group is sent ``SIGKILL`` from outside."""

_REAP_S: Final = 2.0
"""After ``SIGKILL``, how long to wait for the group to be gone before saying so, and
for its pipes to reach their end."""

_DRAIN_S: Final = 2.0
"""After the child and its group ended, how long its pipes may take to reach EOF."""

_POLL_S: Final = 0.02
"""How often a dying group is looked at."""

AGENT_ENVIRONMENT: Final = ("PATH", "HOME", "LANG", "TZ")
"""The variables of the worker's environment an agent gets (and every ``LC_*``)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CommandNotFound(BirdDogError):
    """The command cannot be run: no such program, or it is not executable."""


class AgentSetupRefused(BirdDogError):
    """An agent's environment, user or directory cannot be given as asked."""


class CommandFailed(BirdDogError):
    """The command exited with a non-zero status or was killed by a signal.

    Attributes:
        returncode: the exit status (negative: the signal that killed it).
        stderr_tail: the last bytes the command wrote to stderr.
    """

    def __init__(self, message: str, *, returncode: int, stderr_tail: bytes = b"") -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(message)


class OutputTooLarge(CommandFailed):
    """The command wrote more to stdout than the limit; it was stopped."""


@dataclass(frozen=True, slots=True)
class Completed:
    """A child that ran to its end.

    Attributes:
        returncode: its exit status (negative: the signal that killed it).
        stdout: everything it wrote to stdout.
        stderr_tail: the last :data:`STDERR_TAIL_BYTES` it wrote to stderr.
    """

    returncode: int
    stdout: bytes
    stderr_tail: bytes

    def check(self) -> Completed:
        """This result, if the child exited 0.

        Returns:
            ``self``.

        Raises:
            CommandFailed: a non-zero exit, described with the tail of stderr.
        """
        if self.returncode != 0:
            raise CommandFailed(
                describe_exit(self.returncode, self.stderr_tail),
                returncode=self.returncode,
                stderr_tail=self.stderr_tail,
            )
        return self


def describe_exit(returncode: int, stderr_tail: bytes) -> str:
    """One line saying how a child ended, with the end of what it said on stderr.

    The tail is cut at a word boundary so that no part of a value (a credential the
    diagnostic would mask) starts the line; what is kept fits a diagnostic.

    Args:
        returncode: the exit status (negative: the signal that killed it).
        stderr_tail: the end of its stderr.

    Returns:
        ``exit status 3: <tail>`` or ``killed by SIGKILL: <tail>``.
    """
    if returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"killed by signal {-returncode}"
    else:
        how = f"exit status {returncode}"
    text = " ".join(stderr_tail.decode("utf-8", "replace").split())
    # The worker's diagnostic reads "CommandFailed: <this>"; all of it must fit.
    room = DIAGNOSTIC_MAX_LENGTH - len(f"{CommandFailed.__name__}: {how}: ")
    if len(text) > room:
        cut = text[-room:]
        text = cut.partition(" ")[2] if " " in cut else ""
    return f"{how}: {text}" if text else how


# ---- who the agent runs as -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunAs:
    """Another OS user an agent runs as (``worker --user``).

    Attributes:
        name: the user's name.
        uid: its user id.
        gid: its primary group.
        groups: every group it belongs to (supplementary included).
        home: its home directory (the agent's ``HOME``).
    """

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = field(default=())
    home: str = "/"


def run_as(name: str) -> RunAs:
    """The user ``name``, checked for running agents as it.

    Args:
        name: a user name (or a numeric uid) of this host.

    Returns:
        Its ids, groups and home.

    Raises:
        AgentSetupRefused: the worker does not run as root (only root can start a
            process as another user), the user does not exist, or it is the worker's
            own user.
    """
    if os.geteuid() != 0:
        raise AgentSetupRefused(
            f"--user needs the worker to run as root, to start agents as {name!r} "
            f"(it runs as uid {os.geteuid()}); without --user agents run as the worker's user"
        )
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        raise AgentSetupRefused(f"--user {name!r}: no such user on this host") from None
    if entry.pw_uid == os.geteuid():
        raise AgentSetupRefused(
            f"--user {name!r} is the worker's own user: choose a user of its own for agents"
        )
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir or "/")


# ---- what the agent's environment holds ----------------------------------------------


def _withheld(name: str) -> bool:
    """Whether a variable belongs to the worker: its database and its settings."""
    upper = name.upper()
    return upper == "DATABASE_URL" or upper.startswith(("PG", "BIRDDOG_"))


def check_passed_names(names: Collection[str]) -> list[str]:
    """Check the names of ``worker --env``: variables, none of them the worker's own.

    Args:
        names: the names, as given.

    Returns:
        The names.

    Raises:
        AgentSetupRefused: a name is not a variable name, or names the worker's
            credentials or settings (``DATABASE_URL``, ``PG*``, ``BIRDDOG_*``, in any
            case), which no agent is given.
    """
    for name in names:
        if not _NAME.fullmatch(name):
            raise AgentSetupRefused(f"--env {name[:200]!r}: not a variable name")
        if _withheld(name):
            raise AgentSetupRefused(
                f"--env {name}: the worker's database and settings (DATABASE_URL, PG*, "
                "BIRDDOG_*) are never passed to agents"
            )
    return list(names)


def agent_environment(
    environ: Mapping[str, str], *, passed: Collection[str] = (), home: str | None = None
) -> dict[str, str]:
    """The environment an agent gets: an allow-list of the worker's, never a copy of it.

    ``PATH``, ``HOME``, ``LANG``, ``TZ`` and ``LC_*`` (exactly these names), plus the
    variables named in ``passed``; whatever the worker's credentials and settings are
    called (``DATABASE_URL``, ``PG*``, ``BIRDDOG_*``, in any case) they are left out,
    even when passed.

    Args:
        environ: the worker's environment (``os.environ``).
        passed: more names to pass (``worker --env``).
        home: the agent's ``HOME`` (another user's), instead of the worker's.

    Returns:
        The variables.
    """
    wanted = set(AGENT_ENVIRONMENT) | set(passed)
    env = {
        name: value
        for name, value in environ.items()
        if (name in wanted or name.startswith("LC_")) and not _withheld(name)
    }
    if home is not None:
        env["HOME"] = home
    return env


def job_environment(payload: AgentJobPayload, job_id: str | None) -> dict[str, str]:
    """The ids a command agent finds in its environment for one job.

    Args:
        payload: the job's decoded payload.
        job_id: the job's id, when known.

    Returns:
        ``BIRDDOG_JOB_ID``, ``BIRDDOG_SESSION_ID``, ``BIRDDOG_COMMAND_ID`` and, for a job
        with mail, ``BIRDDOG_MAIL_KEY``, ``BIRDDOG_FROM_AGENT``, ``BIRDDOG_FROM_SESSION``.
    """
    ids = {"BIRDDOG_SESSION_ID": payload.session_id, "BIRDDOG_COMMAND_ID": payload.command_fact_id}
    if job_id is not None:
        ids["BIRDDOG_JOB_ID"] = job_id
    if payload.mail is not None:
        ids["BIRDDOG_MAIL_KEY"] = payload.mail.key
        ids["BIRDDOG_FROM_AGENT"] = payload.mail.from_.agent_id
        ids["BIRDDOG_FROM_SESSION"] = payload.mail.from_.session_id
    return ids


# ---- one supervised child ------------------------------------------------------------


class ProcessGroup:
    """A child process under its supervisor, which leads the child's process group.

    Args:
        process: the supervisor, started with ``process_group=0``.
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
            await asyncio.sleep(_POLL_S)
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
) -> AsyncIterator[ProcessGroup]:
    """Start ``argv`` under a supervisor leading a new process group; end it all on leaving.

    However the block ends (normally, by an exception, or cancelled by a timeout), every
    process the child started and that still runs is sent ``SIGTERM`` and, after
    ``grace_s``, ``SIGKILL``; so it is when this process dies. Only fds 0-2 are open in
    the child. Run inside a worker's handler, the job records where the turn runs.

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
    )
    try:
        process = await asyncio.create_subprocess_exec(
            *line,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=agent_environment(os.environ) if env is None else dict(env),
            cwd=cwd,
            process_group=0,
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


async def run_command(
    argv: Sequence[str],
    *,
    input: bytes = b"",
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    max_output_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    user: RunAs | None = None,
) -> Completed:
    """Run a program under a supervisor to its end and collect what it wrote.

    When the program exits, whatever it left running is ended too. Cancel the call
    (``asyncio.timeout``, a task cancellation) and everything it started is ended before
    the cancellation goes on; if this process dies, the supervisor ends it.

    Args:
        argv: the program and its arguments.
        input: written to its stdin, which is then closed.
        env: its environment (default: :func:`agent_environment` of this process's).
        cwd: its working directory.
        max_output_bytes: the most it may write to stdout.
        grace_s: time between ``SIGTERM`` and ``SIGKILL`` when its group is ended.
        user: run it as this user (see :func:`run_as`).

    Returns:
        Its exit status, stdout and the tail of its stderr (whatever the status).

    Raises:
        CommandNotFound: the program does not exist or cannot be executed.
        OutputTooLarge: it wrote more than ``max_output_bytes`` to stdout (it is stopped).
    """
    out = bytearray()
    err = bytearray()
    async with process_group(argv, env=env, cwd=cwd, grace_s=grace_s, user=user) as group:
        proc = group.process
        stdin, stdout, stderr = _pipes(proc)
        feeding = asyncio.ensure_future(_feed(stdin, input))
        reading = asyncio.ensure_future(_read_bounded(stdout, out, max_output_bytes))
        tailing = asyncio.ensure_future(_read_tail(stderr, err, STDERR_TAIL_BYTES))
        exited = asyncio.ensure_future(_exited(proc))
        tasks = (feeding, reading, tailing, exited)
        try:
            await asyncio.wait({exited, reading}, return_when=asyncio.FIRST_COMPLETED)
            if not (reading.done() and reading.exception() is not None):
                await exited
                # What the program left behind may hold its pipes open: end it first.
                await group.end()
                await asyncio.wait({reading, tailing}, timeout=_DRAIN_S)
            if reading.done() and isinstance(reading.exception(), OutputTooLarge):
                await group.end()
                raise OutputTooLarge(
                    f"wrote more than {max_output_bytes} bytes to stdout",
                    returncode=proc.returncode if proc.returncode is not None else -9,
                    stderr_tail=bytes(err),
                )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return Completed(returncode=returncode, stdout=bytes(out), stderr_tail=bytes(err))


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """The child's exit status, once it exits.

    Not ``proc.wait()``: that also waits for the child's pipes to close, which a process
    it left behind may keep open for ever.
    """
    delay_s = 0.002  # a quick command is seen to end at once, a long one costs ~20 looks/s
    while proc.returncode is None:
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.05)
    return proc.returncode


def _pipes(
    proc: asyncio.subprocess.Process,
) -> tuple[asyncio.StreamWriter, asyncio.StreamReader, asyncio.StreamReader]:
    if proc.stdin is None or proc.stdout is None or proc.stderr is None:
        raise RuntimeError("the child was started without pipes")
    return proc.stdin, proc.stdout, proc.stderr


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    try:
        if data:
            pipe.write(data)
            await pipe.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the program did not read all of it: its business
    finally:
        pipe.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await pipe.wait_closed()


async def _read_bounded(pipe: asyncio.StreamReader, into: bytearray, limit: int) -> None:
    while chunk := await pipe.read(65536):
        if len(into) + len(chunk) > limit:
            raise OutputTooLarge("stdout over the limit", returncode=0)
        into += chunk


async def _read_tail(pipe: asyncio.StreamReader, into: bytearray, keep: int) -> None:
    while chunk := await pipe.read(65536):
        into += chunk
        del into[:-keep]


# ---- one process per job: ``birddog worker --command`` -------------------------------


def command_argv(command: str) -> list[str]:
    """Split a ``--command`` string as a shell would and check its program exists.

    Args:
        command: the program and its arguments, e.g. ``tr a-z A-Z``; shell quoting
            applies, shell syntax (pipes, ``&&``) does not (use ``sh -c '...'``).

    Returns:
        The argument vector, its program resolved to a path.

    Raises:
        CommandNotFound: the command is empty or unparsable, or its program is not on
            ``PATH`` or not executable.
    """
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandNotFound(f"cannot parse the command: {exc}") from None
    if not argv:
        raise CommandNotFound("the command is empty")
    program = argv[0]
    found = shutil.which(program)
    if found is None:
        where = "not executable" if Path(program).exists() else "not found"
        raise CommandNotFound(
            f"command {program!r}: {where}" + ("" if "/" in program else " on PATH")
        )
    return [found, *argv[1:]]


@contextlib.contextmanager
def _turn_directory(cwd: Path | None, user: RunAs | None) -> Iterator[Path]:
    """The directory a turn runs in: ``cwd`` as given, else a fresh one removed after."""
    if cwd is not None:
        yield cwd
        return
    made = Path(tempfile.mkdtemp(prefix="birddog-turn-"))
    try:
        if user is not None:
            os.chown(made, user.uid, user.gid)
        yield made
    finally:
        _remove_tree(made)


def _remove_tree(path: Path) -> None:
    """Remove what an agent left, even directories it made unwritable; never raise."""

    def unlock(_function: object, failed: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            parent = Path(failed).parent
            parent.chmod(parent.stat().st_mode | stat.S_IRWXU)
            if Path(failed).is_dir() and not Path(failed).is_symlink():
                Path(failed).chmod(stat.S_IRWXU)
                shutil.rmtree(failed, ignore_errors=True)
            else:
                Path(failed).unlink(missing_ok=True)

    shutil.rmtree(path, onerror=unlock)
    if path.exists():
        log.warning("turn_directory_left", path=str(path))


def command_handler(
    command: str,
    *,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    max_output_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    env: Collection[str] = (),
    cwd: str | Path | None = None,
    user: str | None = None,
) -> Handler:
    """A worker handler that runs ``command`` once per job (``birddog worker --command``).

    - stdin: the mail's content (UTF-8; empty for a job without mail);
    - environment: :func:`agent_environment` (``PATH``, ``HOME``, ``LANG``, ``TZ``,
      ``LC_*`` and the names in ``env``; never ``DATABASE_URL``, ``PG*`` or
      ``BIRDDOG_*``), plus the ids of :func:`job_environment`;
    - working directory: ``cwd``, else a fresh temporary directory per job, removed after
      the turn; only fds 0-2 are open;
    - user: with ``user``, another OS user (the worker must be root), its ``HOME``;
    - stdout: the reply content, verbatim (UTF-8, at most ``max_output_bytes``);
    - exit status non-zero: the job fails with ``exit status N`` and the tail of stderr
      as its diagnostic;
    - cancelled (handler timeout, recorded cancellation, worker stopping) or the worker
      killed: everything the command started is ended, ``SIGTERM`` then ``SIGKILL``
      after ``grace_s``.

    Args:
        command: the program and its arguments (see :func:`command_argv`).
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.
        max_output_bytes: the most the command may write to stdout.
        env: names of more variables of the worker's environment to pass.
        cwd: the directory every turn runs in (default: a fresh one per job).
        user: the OS user agents run as (default: the worker's).

    Returns:
        The handler.

    Raises:
        CommandNotFound: the command's program does not exist (checked now, at start-up).
        AgentSetupRefused: ``env`` names the worker's credentials or settings, ``user``
            cannot be used, or ``cwd`` is not a directory.
    """
    argv = command_argv(command)
    passed = check_passed_names(env)
    account = None if user is None else run_as(user)
    directory = None if cwd is None else Path(cwd)
    if directory is not None and not directory.is_dir():
        raise AgentSetupRefused(f"--cwd {str(directory)[:200]!r}: not a directory")
    home = None if account is None else account.home

    async def handle(payload: AgentJobPayload) -> str:
        job = current_job()
        ids = job_environment(payload, None if job is None else job.job_id)
        content = payload.mail.content if payload.mail is not None else ""
        with _turn_directory(directory, account) as where:
            done = await run_command(
                argv,
                input=content.encode("utf-8"),
                env=agent_environment(os.environ, passed=passed, home=home) | ids,
                cwd=where,
                max_output_bytes=max_output_bytes,
                grace_s=grace_s,
                user=account,
            )
        done.check()
        try:
            return done.stdout.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CommandFailed(
                f"stdout is not UTF-8 (byte {exc.start})",
                returncode=0,
                stderr_tail=done.stderr_tail,
            ) from None

    return handle


# ---- a turn whose worker is gone -----------------------------------------------------


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
        await asyncio.sleep(_POLL_S)
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
