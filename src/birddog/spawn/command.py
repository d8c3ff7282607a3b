"""One process per job: the handler of ``birddog worker --command``."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Final

import structlog

from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, AgentJobPayload
from birddog.core.turns import DEFAULT_KILL_GRACE_S
from birddog.spawn.environment import agent_environment, check_passed_names, job_environment
from birddog.spawn.errors import AgentSetupRefused, CommandFailed, CommandNotFound
from birddog.spawn.running import run_command
from birddog.spawn.users import Guarded, RunAs, check_guarded, run_as
from birddog.supervisor import remove_tree
from birddog.worker import Handler, current_job

__all__ = ["command_argv", "command_handler"]

log = structlog.get_logger("birddog.spawn")

TURN_PREFIX: Final = "birddog-turn-"
"""How the fresh directory of a turn is named (in the temporary directory)."""


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
def _turn_directory(cwd: Path | None, user: RunAs | None) -> Iterator[tuple[Path, Path | None]]:
    """The directory a turn runs in, and the one to remove after it (None: keep it).

    ``cwd`` as given, else a fresh one. The turn's supervisor removes a fresh one once
    everything of the turn has ended, even when the worker was killed; should it not
    have (it could not start), it is removed here.
    """
    if cwd is not None:
        yield cwd, None
        return
    made = Path(tempfile.mkdtemp(prefix=TURN_PREFIX))
    try:
        if user is not None:
            os.chown(made, user.uid, user.gid)
        yield made, made
    finally:
        if not remove_tree(str(made)):
            log.warning("turn_directory_left", path=str(made))


def command_handler(
    command: str,
    *,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    max_output_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    env: Collection[str] = (),
    cwd: str | Path | None = None,
    user: str | None = None,
    guarded: Collection[Guarded] = (),
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
        guarded: with ``user``, the worker's paths that user may neither own nor write
            (see :func:`~birddog.spawn.users.check_guarded`).

    Returns:
        The handler.

    Raises:
        CommandNotFound: the command's program does not exist (checked now, at start-up).
        AgentSetupRefused: ``env`` names the worker's credentials or settings, ``user``
            cannot be used (or owns or can write a guarded path), or ``cwd`` is not a
            directory.
    """
    argv = command_argv(command)
    passed = check_passed_names(env)
    account = None if user is None else run_as(user)
    if account is not None:
        check_guarded(account, guarded)
    directory = None if cwd is None else Path(cwd)
    if directory is not None and not directory.is_dir():
        raise AgentSetupRefused(f"--cwd {str(directory)[:200]!r}: not a directory")
    home = None if account is None else account.home

    async def handle(payload: AgentJobPayload) -> str:
        job = current_job()
        ids = job_environment(payload, None if job is None else job.job_id)
        content = payload.mail.content if payload.mail is not None else ""
        with _turn_directory(directory, account) as (where, fresh):
            done = await run_command(
                argv,
                input=content.encode("utf-8"),
                env=agent_environment(os.environ, passed=passed, home=home) | ids,
                cwd=where,
                max_output_bytes=max_output_bytes,
                grace_s=grace_s,
                user=account,
                remove=fresh,
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
