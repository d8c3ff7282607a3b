"""Operator commands: ``status``, ``pending``, ``dead``, ``replay``, ``check``, ``probe``."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import EXIT_ALARM, EXIT_OK, main, print_rows, settings_of, with_stack
from birddog.core.text import inert

if TYPE_CHECKING:
    from birddog.bootstrap import Stack

LIST_LIMIT_MAX = 10_000
"""The most rows ``pending`` and ``dead`` print at once."""

DAEMONS_SEEN_BEATS = 3
"""A process counts as running while it beat within this many heartbeats."""

PROBLEMS_SHOWN = 5
"""How many stale or dead replies of each kind ``check`` names."""


async def status_report(stack: Stack) -> dict[str, Any]:
    """What the outbox holds, when it next wakes, the jobs by state, and who is running.

    Returns:
        ``replies`` (``pending``, ``held``, ``in_flight``, ``dead``,
        ``oldest_pending_age_s``, ``next_wake_in_s``), ``jobs`` (counts by state) and
        ``daemons`` (``kind``, ``host``, ``pid``, ``seen_at`` of each process seen lately).
    """
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast

    counts = await stack.outbox.counts()
    now = stack.clock.now()
    oldest = counts.get("oldest_pending_at")
    due = await stack.room.next_wake_at()
    daemons = await stack.reports.daemons_seen(within_s=DAEMONS_SEEN_BEATS * HEARTBEAT_S)
    return {
        "replies": {
            **{k: v for k, v in counts.items() if k not in {"oldest_pending_at", "next_due_at"}},
            "oldest_pending_age_s": round((now - oldest).total_seconds(), 1) if oldest else None,
            "next_wake_in_s": round(max(0.0, (due - now).total_seconds()), 1) if due else None,
        },
        "jobs": await stack.jobs.counts(),
        "daemons": [
            {key: daemon[key] for key in ("kind", "host", "pid", "seen_at")} for daemon in daemons
        ],
    }


def render_status(report: dict[str, Any]) -> str:
    """The status report as three short tables: replies, jobs, daemons seen.

    Args:
        report: from :func:`status_report`.

    Returns:
        The text to print.
    """
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast
    from birddog.display import format_age, render_table  # noqa: PLC0415

    replies = dict(report["replies"])
    for name in ("oldest_pending_age_s", "next_wake_in_s"):
        seconds = replies[name]
        replies[name] = None if seconds is None else format_age(seconds)
    jobs: dict[str, int] = report["jobs"]
    within = format_age(DAEMONS_SEEN_BEATS * HEARTBEAT_S)
    return "\n\n".join(
        [
            "replies\n"
            + render_table(
                [replies],
                ["pending", "held", "in_flight", "dead", "oldest_pending_age_s", "next_wake_in_s"],
                headers=["pending", "held", "in flight", "dead", "oldest pending", "next wake in"],
            ),
            "jobs\n" + render_table([jobs], list(jobs)),
            f"daemons and workers seen in the last {within}\n"
            + render_table(report["daemons"], ["kind", "host", "pid", "seen_at"]),
        ]
    )


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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Replies by state, the oldest pending one, the next wake, jobs, and daemons seen."""
    from birddog.display import dump_json  # noqa: PLC0415 - keeps --help fast

    report = with_stack(ctx, status_report)
    click.echo(dump_json(report) if as_json else render_status(report))


@main.command()
@click.option(
    "--limit", type=click.IntRange(1, LIST_LIMIT_MAX), default=50, help="Show at most this many."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
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
@click.option(
    "--limit", type=click.IntRange(1, LIST_LIMIT_MAX), default=50, help="Show at most this many."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
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
    if not keys:
        what = f"key {key!r}" if key is not None else f"recipient {agent_id!r}"
        click.echo(f"Error: no dead letter with {inert(what)}; see `birddog dead`", err=True)
        sys.exit(EXIT_ALARM)
    click.echo(f"replayed {len(keys)} dead letter(s)")
    for replayed in keys:
        click.echo(inert(replayed))


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
