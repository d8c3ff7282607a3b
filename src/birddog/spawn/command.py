"""One process per turn: the handlers of ``birddog worker --command`` (and ``--batch``)."""

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

from birddog.core.batched import MailTurn, MalformedAnswers, TurnAnswer, parse_answers, turn_input
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, AgentJobPayload
from birddog.core.mail import Outcome
from birddog.core.turns import DEFAULT_KILL_GRACE_S
from birddog.spawn.environment import agent_environment, check_passed_names, job_environment
from birddog.spawn.errors import AgentSetupRefused, CommandFailed, CommandNotFound
from birddog.spawn.running import Completed, run_command
from birddog.spawn.users import Guarded, RunAs, check_guarded, run_as
from birddog.supervisor import remove_tree
from birddog.turns import TurnHandler, current_job, turn_handler
from birddog.worker import Handler

__all__ = ["command_argv", "command_handler", "command_turn_handler"]

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
    agent = _Agent.check(command, env=env, cwd=cwd, user=user, guarded=guarded)

    async def handle(payload: AgentJobPayload) -> str:
        job = current_job()
        ids = job_environment(payload, None if job is None else job.job_id)
        content = payload.mail.content if payload.mail is not None else ""
        done = await agent.run(
            content.encode("utf-8"), ids, grace_s=grace_s, max_output_bytes=max_output_bytes
        )
        return _decoded(done.check())

    return handle


def command_turn_handler(
    command: str,
    *,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    max_output_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    env: Collection[str] = (),
    cwd: str | Path | None = None,
    user: str | None = None,
    guarded: Collection[Guarded] = (),
) -> TurnHandler:
    """A turn handler that runs ``command`` once per turn (``worker --command --batch N``).

    As :func:`command_handler`, except:

    - stdin: the turn's mails as JSON lines, one a mail: ``job_id``, ``key``, ``from``
      (``AGENT:SESSION``), ``kind`` and ``content``;
    - environment: ``BIRDDOG_SESSION_ID`` and ``BIRDDOG_TURN_JOBS`` (how many mails);
    - stdout: one JSON line per answered mail: ``job_id``, ``content``, optional
      ``outcome`` (``completed`` or ``failed``) and ``diagnostic``; a mail it does not
      answer settles ``failed`` saying so; a line that is not such an answer ends the
      turn's unanswered mail ``failed`` with a diagnostic naming the line (the answers
      before it stand), never a guessed answer;
    - exit status non-zero: every mail it did not answer fails with the exit status and
      the tail of stderr (the answers it gave stand).

    Args:
        command: the program and its arguments (see :func:`command_argv`).
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.
        max_output_bytes: the most the command may write to stdout.
        env: names of more variables of the worker's environment to pass.
        cwd: the directory every turn runs in (default: a fresh one per turn).
        user: the OS user agents run as (default: the worker's).
        guarded: as for :func:`command_handler`.

    Returns:
        The turn handler (marked with :func:`birddog.turns.turn_handler`).

    Raises:
        CommandNotFound: the command's program does not exist.
        AgentSetupRefused: as for :func:`command_handler`.
    """
    agent = _Agent.check(command, env=env, cwd=cwd, user=user, guarded=guarded)

    @turn_handler
    async def handle_turn(turn: MailTurn) -> dict[str, TurnAnswer]:
        ids = {"BIRDDOG_SESSION_ID": turn.session_id, "BIRDDOG_TURN_JOBS": str(len(turn.mails))}
        done = await agent.run(
            turn_input(turn), ids, grace_s=grace_s, max_output_bytes=max_output_bytes
        )
        failure: CommandFailed | None = None
        try:
            done.check()
        except CommandFailed as exc:
            failure = exc
        try:
            answers = parse_answers(_decoded(done), turn.job_ids)
        except MalformedAnswers as exc:
            return {**_failed(turn, str(exc)), **exc.answered}
        if failure is not None:
            return {**_failed(turn, str(failure)), **answers}
        return answers

    return handle_turn


def _failed(turn: MailTurn, diagnostic: str) -> dict[str, TurnAnswer]:
    """Every mail of the turn failed with ``diagnostic`` (answers given replace some)."""
    return {job_id: TurnAnswer("", Outcome.FAILED, diagnostic) for job_id in turn.job_ids}


class _Agent:
    """A checked command: its argv, environment names, user and directory."""

    def __init__(
        self, argv: list[str], passed: list[str], account: RunAs | None, directory: Path | None
    ) -> None:
        self.argv = argv
        self.passed = passed
        self.account = account
        self.directory = directory

    @classmethod
    def check(
        cls,
        command: str,
        *,
        env: Collection[str],
        cwd: str | Path | None,
        user: str | None,
        guarded: Collection[Guarded],
    ) -> _Agent:
        """Check the command, names, user and directory now, at start-up."""
        argv = command_argv(command)
        passed = check_passed_names(env)
        account = None if user is None else run_as(user)
        if account is not None:
            check_guarded(account, guarded)
        directory = None if cwd is None else Path(cwd)
        if directory is not None and not directory.is_dir():
            raise AgentSetupRefused(f"--cwd {str(directory)[:200]!r}: not a directory")
        return cls(argv, list(passed), account, directory)

    async def run(
        self, stdin: bytes, ids: dict[str, str], *, grace_s: float, max_output_bytes: int
    ) -> Completed:
        """Run one turn's process to its end: its exit status, stdout and stderr's tail."""
        home = None if self.account is None else self.account.home
        with _turn_directory(self.directory, self.account) as (where, fresh):
            return await run_command(
                self.argv,
                input=stdin,
                env=agent_environment(os.environ, passed=self.passed, home=home) | ids,
                cwd=where,
                max_output_bytes=max_output_bytes,
                grace_s=grace_s,
                user=self.account,
                remove=fresh,
            )


def _decoded(done: Completed) -> str:
    """The command's stdout as text.

    Raises:
        CommandFailed: it is not UTF-8.
    """
    try:
        return done.stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandFailed(
            f"stdout is not UTF-8 (byte {exc.start})", returncode=0, stderr_tail=done.stderr_tail
        ) from None
