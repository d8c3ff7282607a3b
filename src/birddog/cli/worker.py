"""``birddog worker``: run agent jobs with a handler."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from birddog.cli import announcer, main, run, settings_of
from birddog.core.digests import DigestWait, digest_time_text
from birddog.core.errors import BirdDogError
from birddog.runtime import quiet_until_started

if TYPE_CHECKING:
    from birddog.core.mail import AgentAddress
    from birddog.worker import Handler


@main.command()
@click.option("--handler", default=None, help="package.module:function, an async handler.")
@click.option(
    "--command",
    default=None,
    help="Or a program, one process per job: mail content on stdin, ids in BIRDDOG_* "
    "variables, stdout the reply; e.g. 'tr a-z A-Z'.",
)
@click.option(
    "--agent",
    "agents",
    multiple=True,
    help="Serve every session of this agent (the mail's to agent), one turn at a time per "
    "session; repeatable.",
)
@click.option(
    "--a2a",
    "a2a_url",
    default=None,
    metavar="URL",
    help="Or a remote A2A agent (its base URL): each job's mail is sent to it with "
    "a2a-sdk's client, and the job settles with the remote task's outcome.",
)
@click.option(
    "--a2a-token",
    envvar="BIRDDOG_WORKER_A2A_TOKEN",
    default=None,
    help="With --a2a: the bearer token the remote agent wants (default: none).",
)
@click.option(
    "--env",
    "env_names",
    multiple=True,
    metavar="NAME",
    help="With --command: pass the worker's variable NAME to agents (repeatable). Agents "
    "get PATH, HOME, LANG, LC_*, TZ and the job's BIRDDOG_* ids only, never the worker's "
    "DATABASE_URL, PG* or other BIRDDOG_* (refused here, in any case).",
)
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With --command: run every agent in this directory. Default: a fresh temporary "
    "directory per job, removed after its turn.",
)
@click.option(
    "--user",
    default=None,
    metavar="NAME",
    help="With --command: run agents as this OS user (uid, groups, HOME), so the data "
    "directory, pgpass and the worker's /proc are out of their reach. Needs the worker to "
    "run as root.",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    help="Serve this one session (queue) as well; repeatable. With neither --agent nor "
    "--queue, every queue except those starting with 'birddog:', which BirdDog keeps for "
    "itself (its probe), whatever agent the mail is for.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1000),
    default=None,
    help="Jobs run at once (1 to 1000).",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 1000),
    default=None,
    metavar="N",
    help="Run up to N queued mails of one session as one turn (default 20 for --handler; "
    "1 for --command and --a2a). A --command with --batch gets the turn's mails on stdin as "
    "JSON lines (job_id, key, from, kind, content) and answers with JSON lines (job_id, "
    "content, optional outcome and diagnostic).",
)
@click.option(
    "--live",
    default=None,
    metavar="AGENT:SESSION",
    help="Announce this agent session as live while the worker runs (a program that stays "
    "up): its mail is offered to this worker first, other workers take it only after the "
    "route's live grace. Without --agent or --queue, the worker serves this session only.",
)
@click.option(
    "--once",
    is_flag=True,
    help="Run jobs until none it may take is queued or running (checked after its last "
    "job settles), then exit, saying what it settled and any jobs it left queued.",
)
@click.pass_context
def worker(
    ctx: click.Context,
    handler: str | None,
    command: str | None,
    agents: tuple[str, ...],
    a2a_url: str | None,
    a2a_token: str | None,
    env_names: tuple[str, ...],
    cwd: Path | None,
    user: str | None,
    queues: tuple[str, ...],
    concurrency: int | None,
    batch: int | None,
    live: str | None,
    once: bool,
) -> None:
    """Run agent jobs with --handler, --command or --a2a, settling and fanning out each one.

    A --command runs once per job under a supervisor that leads its process group; on
    the handler timeout, a recorded cancellation, the worker stopping or the worker being
    killed, everything the command started is ended (SIGTERM, then SIGKILL after
    BIRDDOG_KILL_GRACE_S). A non-zero exit fails the job with the tail of its stderr as
    the diagnostic. Agents start in their own directory with fds 0-2 only and an
    allow-listed environment (see --env, --cwd, --user).
    """
    quiet_until_started()
    from birddog.bootstrap.agents import guarded_paths  # noqa: PLC0415 - keeps --help fast
    from birddog.processes.worker import run_worker  # noqa: PLC0415
    from birddog.spawn import command_handler, command_turn_handler  # noqa: PLC0415
    from birddog.turns import TurnHandler  # noqa: PLC0415
    from birddog.worker import load_handler  # noqa: PLC0415

    if sum(given is not None for given in (handler, command, a2a_url)) != 1:
        raise click.UsageError("give exactly one of --handler, --command or --a2a")
    if a2a_token is not None and a2a_url is None:
        raise click.UsageError("--a2a-token goes with --a2a")
    if command is None and (env_names or cwd is not None or user is not None):
        raise click.UsageError("--env, --cwd and --user go with --command")
    if a2a_url is not None and batch not in {None, 1}:
        raise click.UsageError("--batch goes with --handler or --command")
    live_session = None if live is None else _live_session(live)
    if live_session is not None and not agents and not queues:
        queues = (live_session.session_id,)
    settings = settings_of(ctx)
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    sys.path.insert(0, ".")
    function: Handler | TurnHandler
    try:
        if a2a_url is not None:
            function = _remote_agent(a2a_url, a2a_token)
        elif handler is not None:
            function = load_handler(handler)
        else:
            make = command_handler if batch is None else command_turn_handler
            function = make(
                command or "",
                grace_s=settings.kill_grace_s,
                max_output_bytes=settings.max_content_bytes,
                env=env_names,
                cwd=cwd,
                user=user,
                guarded=guarded_paths(settings),
            )
    except BirdDogError as exc:
        raise click.UsageError(str(exc)) from exc
    if not agents and not queues:
        # On a terminal a plain line; where logs are JSON, a notice event like the rest.
        announcer(ctx)(EVERY_QUEUE_NOTICE)
    done = run(
        run_worker(
            settings,
            function,
            queues=list(queues),
            agents=list(agents),
            once=once,
            announce=announcer(ctx),
            batch=batch if batch is not None else (DEFAULT_BATCH if handler else 1),
            live=live_session,
        )
    )
    if once:
        click.echo(settled_line(done.summary, left=done.left, digests=done.digests))


DEFAULT_BATCH = 20
"""A --handler worker's --batch: up to 20 mails of one session in one turn."""

EVERY_QUEUE_NOTICE = (
    "this worker takes every queue: it answers mail for every agent; "
    "give --agent AGENT to serve one agent's sessions"
)
"""What a worker given neither --agent nor --queue says at start."""


def _live_session(value: str) -> AgentAddress:
    """``--live AGENT:SESSION`` as an address (a usage error otherwise)."""
    from birddog.core.ask import parse_address  # noqa: PLC0415 - keeps --help fast

    try:
        return parse_address(value, "--live")
    except BirdDogError as exc:
        raise click.UsageError(str(exc)) from None


def _remote_agent(url: str, token: str | None) -> Handler:
    """The handler of ``--a2a``: a2a-sdk's client, from the a2a extra."""
    try:
        from birddog.a2a.remote import remote_agent  # noqa: PLC0415 - the a2a extra
    except ModuleNotFoundError:
        raise click.ClickException(
            "--a2a needs the a2a extra: pip install 'birddog[a2a]'"
        ) from None
    if not url.startswith(("http://", "https://")):
        raise click.UsageError("--a2a takes the remote agent's http(s) base URL")
    return remote_agent(url, token=token)


def settled_line(
    summary: dict[str, int], *, left: int | None = None, digests: DigestWait | None = None
) -> str:
    """One line saying what a worker run settled: ``settled 3 jobs: 2 completed, 1 failed``.

    Args:
        summary: counts by outcome (and ``requeued``), as the worker keeps them.
        left: jobs still queued in the worker's queues when it stopped (not yet due, or
            it was stopped first); said only when some are.
        digests: the informational jobs of its queues waiting for their digest (no worker
            takes them before it); said only when some are.

    Returns:
        The line; ``settled no jobs`` when there was nothing to do.
    """
    requeued = summary.get("requeued", 0)
    settled = {what: n for what, n in summary.items() if what != "requeued" and n}
    total = sum(settled.values())
    line = "settled no jobs" if total == 0 else f"settled {total} job{'s' * (total != 1)}: "
    line += ", ".join(f"{n} {what}" for what, n in sorted(settled.items()))
    if requeued:
        line += f"{'; ' if total else ', '}{requeued} given back to the queue"
    if left:
        line += f"; left {left} queued job{'s' * (left != 1)}"
    if digests is not None and digests.jobs and digests.next_at is not None:
        line += (
            f"; left {digests.jobs} job{'s' * (digests.jobs != 1)} waiting for "
            f"{'their' if digests.jobs != 1 else 'its'} digest (at "
            f"{digest_time_text(digests.next_at)})"
        )
    return line
