"""``birddog worker``: run agent jobs with a handler."""

from __future__ import annotations

import sys

import click

from birddog.cli import announcer, main, run, settings_of
from birddog.core.errors import BirdDogError
from birddog.runtime import quiet_until_started


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
@click.option("--once", is_flag=True, help="Run queued jobs, then exit.")
@click.pass_context
def worker(
    ctx: click.Context,
    handler: str | None,
    command: str | None,
    agents: tuple[str, ...],
    queues: tuple[str, ...],
    concurrency: int | None,
    once: bool,
) -> None:
    """Run agent jobs with --handler or --command, settling and fanning out each one.

    A --command runs once per job in its own process group; on the handler timeout, a
    recorded cancellation or the worker stopping, the whole group is ended (SIGTERM,
    then SIGKILL after BIRDDOG_KILL_GRACE_S). A non-zero exit fails the job with the
    tail of its stderr as the diagnostic.
    """
    quiet_until_started()
    from birddog.processes.worker import run_worker  # noqa: PLC0415 - keeps --help fast
    from birddog.spawn import command_handler  # noqa: PLC0415
    from birddog.worker import load_handler  # noqa: PLC0415

    if (handler is None) == (command is None):
        raise click.UsageError("give exactly one of --handler or --command")
    settings = settings_of(ctx)
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    sys.path.insert(0, ".")
    try:
        function = (
            load_handler(handler)
            if handler is not None
            else command_handler(
                command or "",
                grace_s=settings.kill_grace_s,
                max_output_bytes=settings.max_content_bytes,
            )
        )
    except BirdDogError as exc:
        raise click.UsageError(str(exc)) from exc
    if not agents and not queues:
        # On a terminal a plain line; where logs are JSON, a notice event like the rest.
        announcer(ctx)(EVERY_QUEUE_NOTICE)
    summary = run(
        run_worker(
            settings,
            function,
            queues=list(queues),
            agents=list(agents),
            once=once,
            announce=announcer(ctx),
        )
    )
    if once:
        click.echo(settled_line(summary))


EVERY_QUEUE_NOTICE = (
    "this worker takes every queue: it answers mail for every agent; "
    "give --agent AGENT to serve one agent's sessions"
)
"""What a worker given neither --agent nor --queue says at start."""


def settled_line(summary: dict[str, int]) -> str:
    """One line saying what a worker run settled: ``settled 3 jobs: 2 completed, 1 failed``.

    Args:
        summary: counts by outcome (and ``requeued``), as the worker keeps them.

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
    return line
