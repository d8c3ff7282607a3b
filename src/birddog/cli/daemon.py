"""``birddog migrate`` and ``birddog run``: the schema and the drain daemon."""

from __future__ import annotations

import click

from birddog.cli import announcer, main, run, settings_of
from birddog.runtime import quiet_until_started


@main.command()
@click.option(
    "--roles",
    is_flag=True,
    help="Also create the least-privilege roles (birddog_owner, _daemon, _worker, _sender, "
    "_reader), give the schema to birddog_owner and grant each role what it needs.",
)
@click.pass_context
def migrate(ctx: click.Context, roles: bool) -> None:
    """Create or upgrade the birddog schema."""
    from birddog.bootstrap import migrate_schema  # noqa: PLC0415 - keeps --help fast

    run(migrate_schema(settings_of(ctx), roles=roles))
    click.echo("schema is at head")
    if roles:
        click.echo(
            "roles birddog_owner, birddog_daemon, birddog_worker, birddog_sender and "
            "birddog_reader are in place; grant each login one of them"
        )


@main.command("run")
@click.option("--once", is_flag=True, help="Drain until nothing is due, then exit.")
@click.option("--migrate/--no-migrate", "migrate_first", default=False, help="Upgrade first.")
@click.pass_context
def run_command(ctx: click.Context, once: bool, migrate_first: bool) -> None:
    """Run the drain daemon: deliver owed replies until stopped (SIGTERM/SIGINT)."""
    quiet_until_started()
    from birddog.processes.daemon import run_daemon  # noqa: PLC0415

    settings = settings_of(ctx)
    run(
        run_daemon(settings, once=once, migrate_first=migrate_first, announce=announcer(ctx)),
        resident=settings,
    )
