"""Operator commands: ``status``, ``pending``, ``dead``, ``replay``, ``check``, ``probe``."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import EXIT_ALARM, EXIT_OK, main, print_rows, settings_of, with_stack

if TYPE_CHECKING:
    from birddog.bootstrap import Stack

PROBLEMS_SHOWN = 5
"""How many stale or dead replies of each kind ``check`` names."""


async def status_report(stack: Stack) -> dict[str, Any]:
    """Counts by state, oldest pending age, next wake, jobs, and daemons seen."""
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast

    counts = await stack.outbox.counts()
    now = stack.clock.now()
    oldest = counts.get("oldest_pending_at")
    due = await stack.room.next_wake_at()
    daemons = await stack.reports.daemons_seen(within_s=3 * HEARTBEAT_S)
    return {
        **{k: v for k, v in counts.items() if k not in {"oldest_pending_at", "next_due_at"}},
        "oldest_pending_age_s": round((now - oldest).total_seconds(), 1) if oldest else None,
        "next_wake_in_s": round(max(0.0, (due - now).total_seconds()), 1) if due else None,
        "jobs": await stack.jobs.counts(),
        "daemons_seen": [f"{d['kind']} {d['host']}:{d['pid']}" for d in daemons],
    }


async def check_report(
    stack: Stack, *, pending_after: timedelta, dead_within: timedelta
) -> list[str]:
    """Problems worth an alert: replies pending too long, dead letters that are new."""
    stale = await stack.reports.stale_pending(
        older_than_s=pending_after.total_seconds(), limit=PROBLEMS_SHOWN
    )
    dead = await stack.reports.new_dead(within_s=dead_within.total_seconds(), limit=PROBLEMS_SHOWN)
    return [
        f"pending too long: {row['key']} to {row['recipient_agent_id']} since "
        f"{row['created_at']:%Y-%m-%d %H:%M:%S}Z, {row['attempts']} attempts, "
        f"last error: {row['last_error'] or '-'}"
        for row in stale
    ] + [
        f"new dead letter: {row['key']} to {row['recipient_agent_id']} "
        f"({row['dead_reason']}) at {row['dead_at']:%Y-%m-%d %H:%M:%S}Z"
        for row in dead
    ]


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Counts by state, the oldest pending reply, the next wake, and daemons seen."""
    report = with_stack(ctx, status_report)
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    for name, value in report.items():
        click.echo(f"{name:>22}: {value}")


@main.command()
@click.option("--limit", type=int, default=50)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def pending(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Replies still owed: to whom, since when, attempts, last error, next try."""
    rows = with_stack(ctx, lambda s: s.outbox.list_pending(limit=limit))
    print_rows(
        rows,
        as_json,
        ["key", "recipient_agent_id", "held", "attempts", "deferrals", "next_try_at", "last_error"],
    )


@main.command()
@click.option("--limit", type=int, default=50)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Dead letters: why each died and its last error."""
    rows = with_stack(ctx, lambda s: s.outbox.list_dead(limit=limit))
    print_rows(
        rows,
        as_json,
        ["key", "recipient_agent_id", "dead_reason", "attempts", "dead_at", "last_error"],
    )


@main.command()
@click.argument("key", required=False)
@click.option("--agent", "agent_id", default=None, help="Every dead letter of this recipient.")
@click.pass_context
def replay(ctx: click.Context, key: str | None, agent_id: str | None) -> None:
    """Put a dead letter (KEY) or all of a recipient's back to pending, attempts reset."""
    if (key is None) == (agent_id is None):
        raise click.UsageError("give exactly one of KEY or --agent")
    keys = with_stack(ctx, lambda s: s.outbox.replay(key=key, agent_id=agent_id))
    click.echo(f"replayed {len(keys)} dead letter(s)")
    for replayed in keys:
        click.echo(replayed)


@main.command()
@click.option("--pending-s", type=float, default=None, help="Alarm when pending longer.")
@click.option("--dead-s", type=float, default=None, help="Alarm on a dead letter this new.")
@click.pass_context
def check(ctx: click.Context, pending_s: float | None, dead_s: float | None) -> None:
    """Exit 1 when a reply is pending too long or a dead letter is new (for alerting)."""
    settings = settings_of(ctx)
    problems = with_stack(
        ctx,
        lambda s: check_report(
            s,
            pending_after=timedelta(seconds=pending_s or settings.check_pending_s),
            dead_within=timedelta(seconds=dead_s or settings.check_dead_s),
        ),
    )
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(EXIT_ALARM)
    click.echo("ok")


@main.command()
@click.option("--timeout-s", type=float, default=300.0, help="Deadline for the round trip.")
@click.option(
    "--drain", is_flag=True, help="Deliver the probe's reply itself instead of a running daemon."
)
@click.pass_context
def probe(ctx: click.Context, timeout_s: float, drain: bool) -> None:
    """A canary round trip, job to receipt, with a nonce; exit 0 only if it came back."""
    from birddog.probe import run_probe  # noqa: PLC0415 - keeps --help fast

    result = with_stack(ctx, lambda s: run_probe(s, timeout_s=timeout_s, drain=drain))
    click.echo(result.message)
    sys.exit(EXIT_OK if result.ok else EXIT_ALARM)
