"""Run a program to its end under a supervisor: input, bounded output, the tail of stderr."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.core.turns import DEFAULT_KILL_GRACE_S
from birddog.spawn.errors import CommandFailed, OutputTooLarge
from birddog.spawn.groups import process_group
from birddog.spawn.users import RunAs

__all__ = ["STDERR_TAIL_BYTES", "Completed", "describe_exit", "run_command"]

STDERR_TAIL_BYTES: Final = 4096
"""How much of the end of a child's stderr is kept."""

_DRAIN_S: Final = 2.0
"""After the child and its group ended, how long its pipes may take to reach EOF."""


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


async def run_command(
    argv: Sequence[str],
    *,
    input: bytes = b"",
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    max_output_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    user: RunAs | None = None,
    remove: Path | None = None,
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
        remove: a directory its supervisor removes once everything it started ended
            (the fresh directory of a turn), even after this process's death.

    Returns:
        Its exit status, stdout and the tail of its stderr (whatever the status).

    Raises:
        CommandNotFound: the program does not exist or cannot be executed.
        OutputTooLarge: it wrote more than ``max_output_bytes`` to stdout (it is stopped).
    """
    out = bytearray()
    err = bytearray()
    async with process_group(
        argv, env=env, cwd=cwd, grace_s=grace_s, user=user, remove=remove
    ) as group:
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
