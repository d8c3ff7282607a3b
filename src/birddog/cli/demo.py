"""``birddog demo``: watch replies travel, retry, land as receipts, and die loudly."""

from __future__ import annotations

import click

from birddog.cli import main, run, settings_of


@main.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Two sample agents, jobs with reply lists, a flaky inbox: watch replies travel."""
    from birddog.processes.demo import run_demo  # noqa: PLC0415

    run(run_demo(settings_of(ctx), echo=click.echo))
