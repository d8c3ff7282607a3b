"""``birddog console``: the operator's web page on 127.0.0.1."""

from __future__ import annotations

import click

from birddog.cli import announce, main, run, settings_of
from birddog.runtime import quiet_until_started

DEFAULT_PORT = 9465
"""Where the console listens unless told otherwise (``--port``)."""


@main.command()
@click.option(
    "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
    help="The port on 127.0.0.1 (0: any free port).",
)  # fmt: skip
@click.option("--read-only", is_flag=True, help="Serve the pages only: no replay, hold or cancel.")
@click.pass_context
def console(ctx: click.Context, port: int, read_only: bool) -> None:
    """Serve the operator's console on 127.0.0.1 until stopped; prints the URL to open.

    The URL carries a token (printed once, new at every start) that signs the browser
    in; every page and action needs it.
    """
    quiet_until_started()
    from birddog.processes.console import run_console  # noqa: PLC0415 - keeps --help fast

    run(run_console(settings_of(ctx), port=port, read_only=read_only, announce=announce))
