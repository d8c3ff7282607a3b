"""``birddog migrate`` and ``birddog run``: the schema and the drain daemon."""

from __future__ import annotations

from typing import Any

import click

from birddog.cli import announcer, main, run, settings_of
from birddog.display import format_value
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
            "roles birddog_owner, birddog_daemon, birddog_worker, birddog_sender, "
            "birddog_a2a and birddog_reader are in place; grant each login one of them "
            "(birddog_agent: `birddog agent add AGENT --login`)"
        )


@main.command("run")
@click.option(
    "--once",
    is_flag=True,
    help="Drain until nothing is due, then exit, saying what it delivered and what it "
    "left (replies held, replies not yet due and when the next is).",
)
@click.option("--migrate/--no-migrate", "migrate_first", default=False, help="Upgrade first.")
@click.pass_context
def run_command(ctx: click.Context, once: bool, migrate_first: bool) -> None:
    """Run the drain daemon: deliver owed replies until stopped (SIGTERM/SIGINT)."""
    quiet_until_started()
    from birddog.processes.daemon import run_daemon  # noqa: PLC0415

    settings = settings_of(ctx)
    done = run(
        run_daemon(settings, once=once, migrate_first=migrate_first, announce=announcer(ctx)),
        resident=settings,
    )
    if once:
        click.echo(drained_line(done.moved, left=done.left))


def drained_line(moved: dict[str, int], *, left: dict[str, Any] | None) -> str:
    """One line saying what ``run --once`` did and left.

    E.g. ``delivered 3 replies, 1 retried, 1 dead; left 2 held, 1 not yet due (next due
    2026-01-01 10:00:00Z)``.

    Args:
        moved: what the daemon's stores did, by outcome.
        left: what the outbox held when it returned (``pending``, ``held``,
            ``in_flight``, ``next_due_at``), None when not known.

    Returns:
        The line.
    """
    delivered = moved.get("delivered", 0)
    line = f"delivered {delivered} repl{'ies' if delivered != 1 else 'y'}"
    for what in ("retried", "deferred", "dead"):
        if moved.get(what):
            line += f", {moved[what]} {what}"
    if left is None:
        return line
    held = int(left.get("held") or 0)
    later = int(left.get("pending") or 0) - held
    if not held and not later:
        return f"{line}; nothing left pending"
    parts = [f"{held} held"] if held else []
    if later:
        parts.append(f"{later} not yet due (next due {format_value(left.get('next_due_at'))})")
    return f"{line}; left {', '.join(parts)}"
