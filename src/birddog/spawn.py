"""Kill what you spawn: child processes that lead their own process group, ended whole.

A timed-out call that stops listening but leaves the process it started running is an
orphan working at full effort for nobody. Everything here starts its child as the leader
of a new process group and, whenever the caller is done with it (the child finished, the
caller was cancelled by a timeout, a cancellation or a shutdown, or anything raised),
ends the whole group: ``SIGTERM``, then ``SIGKILL`` after a grace period, so nothing the
child started keeps running either. A process that leaves the group on purpose
(``setsid``, a double-forking daemon) is out of reach; run such programs under a
supervisor.

- :func:`process_group`: an async context manager around one child process.
- :func:`run_command`: run a program to completion with input, bounded output and the
  tail of its stderr.
- :func:`command_handler`: a worker handler that runs one process per job
  (``birddog worker --command``): mail content on stdin, ids in the environment, stdout
  the reply, a non-zero exit a failure with the tail of stderr as its diagnostic.

Python handlers that start agents use the first two::

    from birddog.spawn import run_command

    async def handle(payload: AgentJobPayload) -> str:
        done = await run_command(["claude", "-p"], input=payload.mail.content.encode())
        return done.stdout.decode()       # cancelled by the worker: the group is killed
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH
from birddog.core.errors import BirdDogError
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, AgentJobPayload
from birddog.worker import Handler, current_job

__all__ = [
    "DEFAULT_KILL_GRACE_S",
    "CommandFailed",
    "CommandNotFound",
    "Completed",
    "OutputTooLarge",
    "ProcessGroup",
    "command_argv",
    "command_handler",
    "job_environment",
    "process_group",
    "run_command",
]

log = structlog.get_logger("birddog.spawn")

DEFAULT_KILL_GRACE_S: Final = 5.0
"""How long a process group has between ``SIGTERM`` and ``SIGKILL``."""

STDERR_TAIL_BYTES: Final = 4096
"""How much of the end of a child's stderr is kept."""

_REAP_S: Final = 2.0
"""After ``SIGKILL``, how long to wait for the group to be gone before saying so, and
for its pipes to reach their end."""

_DRAIN_S: Final = 2.0
"""After the child and its group ended, how long its pipes may take to reach EOF."""

_POLL_S: Final = 0.02
"""How often a dying group is looked at."""

_WITHHELD_PREFIXES: Final = ("BIRDDOG_", "PG")
_WITHHELD: Final = frozenset({"DATABASE_URL"})


class CommandNotFound(BirdDogError):
    """The command cannot be run: no such program, or it is not executable."""


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


class ProcessGroup:
    """A child process that leads its own process group.

    Args:
        process: the child, started with ``process_group=0``.
        grace_s: how long the group gets between ``SIGTERM`` and ``SIGKILL``.

    Attributes:
        process: the child.
        pgid: the group's id (the child's pid).
    """

    def __init__(self, process: asyncio.subprocess.Process, *, grace_s: float) -> None:
        self.process = process
        self.pgid = process.pid
        self.grace_s = grace_s

    def alive(self) -> bool:
        """Whether any process of the group is still running (zombies do not count)."""
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _running_member(self.pgid)

    async def end(self) -> None:
        """End every process of the group: ``SIGTERM``, then ``SIGKILL`` after the grace.

        Returns at once when the group has already ended. Cancelling it sends ``SIGKILL``
        before the cancellation goes on, so it never leaves the group behind.
        """
        try:
            if self.alive():
                self._signal(signal.SIGTERM)
                if not await self._gone_within(self.grace_s):
                    self._signal(signal.SIGKILL)
                    if not await self._gone_within(_REAP_S):
                        log.warning("process_group_lingers", pgid=self.pgid)
        except asyncio.CancelledError:
            self._signal(signal.SIGKILL)
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
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses).
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            return True
    return False


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
) -> AsyncIterator[ProcessGroup]:
    """Start ``argv`` as the leader of a new process group; end the group on leaving.

    However the block ends (normally, by an exception, or cancelled by a timeout), every
    process of the group still running is sent ``SIGTERM`` and, after ``grace_s``,
    ``SIGKILL``.

    Args:
        argv: the program and its arguments.
        env: the child's environment (default: this process's).
        cwd: the child's working directory.
        stdin: as for :func:`asyncio.create_subprocess_exec` (default: a pipe).
        stdout: likewise.
        stderr: likewise.
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.

    Yields:
        The group; its ``process`` is the child.

    Raises:
        CommandNotFound: the program does not exist or cannot be executed.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=None if env is None else dict(env),
            cwd=cwd,
            process_group=0,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise CommandNotFound(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from exc
    group = ProcessGroup(process, grace_s=grace_s)
    try:
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
) -> Completed:
    """Run a program in its own process group to its end and collect what it wrote.

    When the program exits, whatever it left running in its group is ended too. Cancel
    the call (``asyncio.timeout``, a task cancellation) and the whole group is ended
    before the cancellation goes on.

    Args:
        argv: the program and its arguments.
        input: written to its stdin, which is then closed.
        env: its environment (default: this process's).
        cwd: its working directory.
        max_output_bytes: the most it may write to stdout.
        grace_s: time between ``SIGTERM`` and ``SIGKILL`` when its group is ended.

    Returns:
        Its exit status, stdout and the tail of its stderr (whatever the status).

    Raises:
        CommandNotFound: the program does not exist or cannot be executed.
        OutputTooLarge: it wrote more than ``max_output_bytes`` to stdout (it is stopped).
    """
    out = bytearray()
    err = bytearray()
    async with process_group(argv, env=env, cwd=cwd, grace_s=grace_s) as group:
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
    while proc.returncode is None:  # noqa: ASYNC110 - asyncio has no exit event apart from wait()
        await asyncio.sleep(_POLL_S)
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


def _inherited(environ: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without the worker's own credentials and settings."""
    return {
        name: value
        for name, value in environ.items()
        if name not in _WITHHELD and not name.startswith(_WITHHELD_PREFIXES)
    }


def command_handler(
    command: str,
    *,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    max_output_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
) -> Handler:
    """A worker handler that runs ``command`` once per job (``birddog worker --command``).

    - stdin: the mail's content (UTF-8; empty for a job without mail);
    - environment: this process's, without ``DATABASE_URL``, ``PG*`` and ``BIRDDOG_*``
      (the worker's credentials are not the agent's), plus the ids of
      :func:`job_environment`;
    - stdout: the reply content, verbatim (UTF-8, at most ``max_output_bytes``);
    - exit status non-zero: the job fails with ``exit status N`` and the tail of stderr
      as its diagnostic;
    - cancelled (handler timeout, recorded cancellation, worker stopping): the command's
      whole process group is ended, ``SIGTERM`` then ``SIGKILL`` after ``grace_s``.

    Args:
        command: the program and its arguments (see :func:`command_argv`).
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.
        max_output_bytes: the most the command may write to stdout.

    Returns:
        The handler.

    Raises:
        CommandNotFound: the command's program does not exist (checked now, at start-up).
    """
    argv = command_argv(command)

    async def handle(payload: AgentJobPayload) -> str:
        job = current_job()
        env = _inherited(os.environ) | job_environment(payload, None if job is None else job.job_id)
        content = payload.mail.content if payload.mail is not None else ""
        done = await run_command(
            argv,
            input=content.encode("utf-8"),
            env=env,
            max_output_bytes=max_output_bytes,
            grace_s=grace_s,
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
