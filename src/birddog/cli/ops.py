"""Operator commands: ``status``, ``pending``, ``dead``, ``replay``, ``check``, ``probe``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import EXIT_ALARM, EXIT_OK, duration, main, print_rows, settings_of, with_services
from birddog.core.text import printable, shown_key
from birddog.core.turns import TURNS_WINDOW_S

if TYPE_CHECKING:
    from birddog.service.entry import Services

LIST_LIMIT_MAX = 10_000
"""The most rows ``pending`` and ``dead`` print at once."""

DAEMONS_SEEN_BEATS = 3
"""A process counts as running while it beat within this many heartbeats."""

PROBLEMS_SHOWN = 5
"""How many stale or dead replies of each kind ``check`` names."""


async def status_report(adapters: Services) -> dict[str, Any]:
    """What the outbox holds, when it next wakes, the jobs by state, and who is running.

    Returns:
        ``replies`` (``pending``, ``held``, ``in_flight``, ``dead``,
        ``oldest_pending_age_s``, ``next_wake_in_s``), ``jobs`` (counts by state),
        ``jobs_not_yet_due`` (``jobs`` queued with a later not-before, ``next_at`` the
        earliest), ``jobs_waiting_for_digest`` (``jobs``: informational mail waiting for
        its digest, ``next_at`` the earliest digest), ``turns`` (the last hour's settled
        turns by first mail's ``kind`` and ``how`` they ran, ``live``, ``digest`` or
        ``worker``, with ``turns``, ``mails``,
        ``mails_per_turn`` and ``spawns``: agent processes started),
        ``live_sessions`` (``agent_id``, ``session``, ``holder``, ``started_at``,
        ``expires_at`` of each agent session a process serves now: metadata, no mail) and
        ``daemons`` (``kind``, ``host``, ``pid``, ``seen_at`` of each process seen
        lately).
    """
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast

    counts = await adapters.outbox.counts()
    now = adapters.clock.now()
    oldest = counts.get("oldest_pending_at")
    due = await adapters.room.next_wake_at()
    daemons = await adapters.reports.daemons_seen(within_s=DAEMONS_SEEN_BEATS * HEARTBEAT_S)
    later, next_at = await adapters.jobs.not_yet_due()
    digests = await adapters.routes.digests.waiting()
    turns = await adapters.jobs.turns_since(now - timedelta(seconds=TURNS_WINDOW_S))
    live = await adapters.live.live()
    return {
        "replies": {
            **{k: v for k, v in counts.items() if k not in {"oldest_pending_at", "next_due_at"}},
            "oldest_pending_age_s": round((now - oldest).total_seconds(), 1) if oldest else None,
            "next_wake_in_s": round(max(0.0, (due - now).total_seconds()), 1) if due else None,
        },
        "jobs": await adapters.jobs.counts(),
        "jobs_not_yet_due": {"jobs": later, "next_at": next_at},
        "jobs_waiting_for_digest": {"jobs": digests.jobs, "next_at": digests.next_at},
        "turns": [
            {**row, "mails_per_turn": round(row["mails"] / row["turns"], 1)} for row in turns
        ],
        "live_sessions": [
            {
                "agent_id": session.agent_id,
                "session": session.session,
                "holder": session.holder,
                "started_at": session.started_at,
                "expires_at": session.expires_at,
            }
            for session in live
        ],
        "daemons": [
            {key: daemon[key] for key in ("kind", "host", "pid", "seen_at")} for daemon in daemons
        ],
    }


def render_status(report: dict[str, Any]) -> str:
    """The status report as short tables: replies, jobs, turns, live sessions, daemons seen.

    Args:
        report: from :func:`status_report`.

    Returns:
        The text to print.
    """
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast
    from birddog.core.duration import format_age  # noqa: PLC0415
    from birddog.display import render_table  # noqa: PLC0415

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
            "jobs\n"
            + render_table([jobs], list(jobs))
            + _not_yet_due_line(report)
            + _digest_line(report),
            f"turns settled in the last {format_age(TURNS_WINDOW_S)}\n"
            + render_table(
                report["turns"],
                ["kind", "how", "turns", "mails", "mails_per_turn", "spawns"],
                headers=["first mail", "ran by", "turns", "mails", "mails per turn", "spawns"],
            ),
            "live sessions (served now, before any worker)\n"
            + render_table(
                report["live_sessions"],
                ["agent_id", "session", "holder", "started_at"],
                headers=["agent", "session", "holder", "live since"],
            ),
            f"daemons and workers seen in the last {within}\n"
            + render_table(report["daemons"], ["kind", "host", "pid", "seen_at"]),
        ]
    )


def _not_yet_due_line(report: dict[str, Any]) -> str:
    """The line under the jobs table about jobs sent for later ('' when there are none)."""
    from birddog.display import format_value  # noqa: PLC0415 - keeps --help fast

    later = report.get("jobs_not_yet_due") or {}
    if not later.get("jobs"):
        return ""
    next_at = format_value(later["next_at"])
    return f"\n{later['jobs']} queued not before a later time; the next at {next_at}"


def _digest_line(report: dict[str, Any]) -> str:
    """The line under the jobs table about mail waiting for its digest ('' when none waits)."""
    from birddog.core.digests import digest_time_text  # noqa: PLC0415 - keeps --help fast

    waiting = report.get("jobs_waiting_for_digest") or {}
    if not waiting.get("jobs"):
        return ""
    return (
        f"\n{waiting['jobs']} queued waiting for digest (informational mail); the next at "
        f"{digest_time_text(waiting['next_at'])}"
    )


@dataclass(frozen=True)
class CheckLimits:
    """What ``birddog check`` counts as a problem.

    Attributes:
        pending_s: a reply pending (or deferred) longer.
        dead_s: a dead letter newer.
        job_queued_s: interactive mail queued longer (nobody claimed it).
        lease_overdue_s: a job running this long past its lease (its worker is gone and
            no reaper handled it).
        hold_s: a recipient held longer.
        daemon_s: replies due and no drain daemon beat for this long.
        spool_s: mail waiting in the local spool longer.
    """

    pending_s: float
    dead_s: float
    job_queued_s: float
    lease_overdue_s: float
    hold_s: float
    daemon_s: float
    spool_s: float = 600.0


async def spool_problems(
    adapters: Services, limits: CheckLimits, *, database_answers: bool
) -> list[dict[str, Any]]:
    """What is wrong with this host's local spool, one problem per line.

    Mail waiting while the database answers (nothing forwards it), mail waiting longer
    than ``limits.spool_s``, mail meant for another database (by destination), and
    quarantined mail (never forwarded: each names its reason).

    Args:
        adapters: the open adapters (the spool is local; no query is made).
        limits: the thresholds.
        database_answers: whether the database answered the other checks.

    Returns:
        One dict per problem: ``check`` (``spool_waiting``, ``spool_old``,
        ``spool_elsewhere``, ``spool_quarantined``), ``message`` and the spool's facts.
    """
    from birddog.cli.spool import status_facts  # noqa: PLC0415 - keeps --help fast
    from birddog.core.duration import format_age  # noqa: PLC0415

    status = await adapters.spool.status()
    now = adapters.clock.now()
    facts = status_facts(status, now)
    problems: list[dict[str, Any]] = []
    where = printable(status.path)
    error = f"; last forward error: {printable(status.last_error)}" if status.last_error else ""
    age = status.oldest_age_s(now)
    if status.oldest_at is not None and age is not None and age > limits.spool_s:
        problems.append(
            {
                "check": "spool_old",
                "message": f"spooled mail older than {format_age(limits.spool_s)}: "
                f"{status.mails} waiting in {where}, the oldest since {_at(status.oldest_at)}"
                f"{error}",
                **facts,
            }
        )
    elsewhere = sum(count for _, count, _ in status.elsewhere)
    if status.elsewhere:
        named = "; ".join(f"{printable(name)}: {count}" for name, count, _ in status.elsewhere)
        problems.append(
            {
                "check": "spool_elsewhere",
                "message": f"{elsewhere} spooled mails in {where} are meant for another "
                f"database than this one, never forwarded here ({named}); run birddog spool "
                "forward with that DATABASE_URL, or birddog spool forward --adopt to send "
                "them here",
                **facts,
            }
        )
    if status.mails > elsewhere and database_answers:
        problems.append(
            {
                "check": "spool_waiting",
                "message": f"{status.mails - elsewhere} spooled mails wait in {where} while "
                "the database "
                "answers (is a daemon, worker or MCP server running on this host? or: birddog "
                f"spool forward){error}",
                **facts,
            }
        )
    if status.quarantined:
        [latest] = await adapters.spool.quarantined(limit=1)
        problems.append(
            {
                "check": "spool_quarantined",
                "message": f"{status.quarantined} mails quarantined in {where}, never "
                f"forwarded; the latest {printable(str(latest['key']))}: "
                f"{printable(str(latest['reason']))} (birddog spool status)",
                **facts,
            }
        )
    return problems


async def check_report(adapters: Services, limits: CheckLimits) -> list[dict[str, Any]]:
    """Problems worth an alert, one per line, each with the facts behind it.

    Args:
        adapters: the open adapters.
        limits: the thresholds.

    Returns:
        One dict per problem: ``check`` (``pending``, ``dead``, ``job_queued``,
        ``job_overdue``, ``queue_held``, ``hold``, ``no_daemon``), ``message`` (one
        printable line) and the row's facts.
    """
    reports = adapters.reports
    problems: list[dict[str, Any]] = []

    def problem(check: str, message: str, facts: dict[str, Any]) -> None:
        problems.append({"check": check, "message": message, **facts})

    for row in await reports.stale_pending(older_than_s=limits.pending_s, limit=PROBLEMS_SHOWN):
        problem(
            "pending",
            f"pending too long: {printable(row['key'])} to {printable(row['recipient_agent_id'])} "
            f"since {_at(row['created_at'])}, {row['attempts']} attempts, "
            f"last error: {printable(row['last_error'] or '-')}",
            row,
        )
    for row in await reports.new_dead(within_s=limits.dead_s, limit=PROBLEMS_SHOWN):
        problem(
            "dead",
            f"new dead letter: {printable(row['key'])} to {printable(row['recipient_agent_id'])} "
            f"({row['dead_reason']}) at {_at(row['dead_at'])}",
            row,
        )
    for row in await reports.stale_queued(older_than_s=limits.job_queued_s, limit=PROBLEMS_SHOWN):
        digest_at = row.get("digest_at")
        since = "" if digest_at is None else f", its digest due {_at(digest_at)}"
        problem(
            "job_queued",
            f"job queued too long: {printable(row['job_id'])} ({row['kind']}) in queue "
            f"{printable(row['queue'])} since {_at(row['created_at'])}{since}; is a worker or "
            "a live session serving this session?",
            row,
        )
    for row in await reports.overdue_running(grace_s=limits.lease_overdue_s, limit=PROBLEMS_SHOWN):
        problem(
            "job_overdue",
            f"job running past its lease: {printable(row['job_id'])} in queue "
            f"{printable(row['queue'])} on {printable(row['worker_id'] or '-')}, lease ended "
            f"{_at(row['lease_expires_at'])}; is a daemon or worker running its reaper?",
            row,
        )
    for row in await reports.held_queues(limit=PROBLEMS_SHOWN):
        problem(
            "queue_held",
            f"queue held: {printable(row['job_id'])} in queue {printable(row['queue'])} on "
            f"{printable(row['worker_id'] or '-')}, running since {_at(row['started_at'])}, "
            f"lease until {_at(row['lease_expires_at'])}, {row['waiting']} jobs waiting "
            f"behind it (birddog jobs cancel {printable(row['job_id'])} frees it)",
            row,
        )
    for row in await reports.long_holds(older_than_s=limits.hold_s, limit=PROBLEMS_SHOWN):
        problem(
            "hold",
            f"held too long: {printable(row['agent_id'])} since {_at(row['held_at'])}, "
            f"{row['waiting']} replies waiting (birddog route release AGENT)",
            row,
        )
    stalled = await reports.due_without_daemon(within_s=limits.daemon_s)
    if stalled is not None:
        from birddog.core.duration import format_age  # noqa: PLC0415 - keeps --help fast

        last, stopped = stalled["last_seen_at"], stalled["last_stopped_at"]
        if last is None:
            last_daemon = "no daemon ever ran on this database (start `birddog run`)"
        elif stopped is not None:
            last_daemon = f"the last daemon stopped at {_at(stopped)} (start `birddog run`)"
        else:
            last_daemon = (
                f"the last daemon beat at {_at(last)} and vanished without stopping "
                "(killed, or its host is gone?)"
            )
        problem(
            "no_daemon",
            f"replies due and no daemon running for {format_age(limits.daemon_s)}: "
            f"{stalled['due']} due, the oldest since {_at(stalled['oldest_due_at'])}; "
            f"{last_daemon}",
            stalled,
        )
    return problems


def _at(when: datetime) -> str:
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Replies by state, the oldest pending one, the next wake, jobs, and daemons seen."""
    from birddog.display import dump_json  # noqa: PLC0415 - keeps --help fast

    report = with_services(ctx, status_report)
    click.echo(dump_json(report) if as_json else render_status(report))


@main.command()
@click.option(
    "--limit", type=click.IntRange(1, LIST_LIMIT_MAX), default=50, help="Show at most this many."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_context
def pending(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Replies still owed: to whom, since when, attempts, last error, next try."""
    rows = with_services(ctx, lambda s: s.outbox.list_pending(limit=limit))
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
    rows = with_services(ctx, lambda s: s.outbox.list_dead(limit=limit))
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
    """Put a dead letter (KEY) or all of a recipient's back to pending, attempts reset.

    Refused, saying what to fix, while a recipient's cause still holds: it has no route
    yet, its route is held, or its URL is refused by the egress policy.
    """
    if (key is None) == (agent_id is None):
        raise click.UsageError("give exactly one of KEY or --agent")
    keys = with_services(ctx, lambda s: s.replay.replay(key=key, agent_id=agent_id))
    if not keys:
        what = (
            f"key {shown_key(key)}" if key is not None else f"recipient {shown_key(agent_id or '')}"
        )
        click.echo(f"Error: no dead letter with {what}; see `birddog dead`", err=True)
        sys.exit(EXIT_ALARM)
    click.echo(f"replayed {len(keys)} dead letter(s)")
    for replayed in keys:
        click.echo(printable(replayed))


@main.command()
@click.option(
    "--pending-s", type=duration, default=None, help="Alarm when a reply is pending longer (7200)."
)
@click.option(
    "--dead-s", type=duration, default=None, help="Alarm on a dead letter this new (3600)."
)
@click.option(
    "--job-queued-s",
    type=duration,
    default=None,
    help="Alarm when interactive mail (a task, an escalation) is queued longer "
    "(BIRDDOG_STALE_INTERACTIVE_S, 7200); reports and receipts only once this long past "
    "their digest.",
)
@click.option(
    "--lease-overdue-s",
    type=duration,
    default=None,
    help="Alarm when a job runs this long past its lease (60).",
)
@click.option(
    "--hold-s", type=duration, default=None, help="Alarm when a recipient is held longer (86400)."
)
@click.option(
    "--daemon-s",
    type=duration,
    default=None,
    help="Alarm when replies are due and no daemon beat for this long (120).",
)
@click.option(
    "--spool-s",
    type=duration,
    default=None,
    help="Alarm when mail waits in this host's spool longer (600).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the problems as JSON.")
@click.pass_context
def check(
    ctx: click.Context,
    pending_s: float | None,
    dead_s: float | None,
    job_queued_s: float | None,
    lease_overdue_s: float | None,
    hold_s: float | None,
    daemon_s: float | None,
    spool_s: float | None,
    as_json: bool,
) -> None:
    """Exit 1, one line per problem, when anything is stuck, dead, held or unserved.

    Replies pending too long, new dead letters, jobs no worker claimed, jobs running past
    their lease, holds that last too long, replies due while no daemon runs, and this
    host's spool: mail waiting while the database answers or for too long, mail
    quarantined. An unreachable database is a problem line too. Wire it to your
    alerting; --json gives the same facts.
    """
    from birddog.display import dump_json  # noqa: PLC0415 - keeps --help fast

    settings = settings_of(ctx)

    def given(value: float | None, default: float) -> float:
        return default if value is None else value

    limits = CheckLimits(
        pending_s=given(pending_s, settings.check_pending_s),
        dead_s=given(dead_s, settings.check_dead_s),
        job_queued_s=given(
            job_queued_s,
            settings.check_job_queued_s
            if settings.check_job_queued_s is not None
            else settings.stale_interactive_s,
        ),
        lease_overdue_s=given(lease_overdue_s, settings.check_lease_overdue_s),
        hold_s=given(hold_s, settings.check_hold_s),
        daemon_s=given(daemon_s, settings.check_daemon_s),
        spool_s=given(spool_s, settings.check_spool_s),
    )

    async def report(adapters: Services) -> list[dict[str, Any]]:
        from birddog.core.errors import StoreUnavailable  # noqa: PLC0415 - keeps --help fast

        try:
            found = await check_report(adapters, limits)
        except StoreUnavailable as exc:
            away = {"check": "database", "message": f"database unreachable: {printable(str(exc))}"}
            return [away, *await spool_problems(adapters, limits, database_answers=False)]
        return found + await spool_problems(adapters, limits, database_answers=True)

    problems = with_services(ctx, report, lazy=True)
    if as_json:
        click.echo(dump_json({"ok": not problems, "problems": problems}))
    else:
        for found in problems:
            click.echo(found["message"])
        if not problems:
            click.echo("ok")
    if problems:
        sys.exit(EXIT_ALARM)


@main.command()
@click.option(
    "--timeout-s", type=duration, default=300.0, help="Deadline for the round trip (300)."
)
@click.option(
    "--drain", is_flag=True, help="Deliver the probe's reply itself instead of a running daemon."
)
@click.pass_context
def probe(ctx: click.Context, timeout_s: float, drain: bool) -> None:
    """A canary round trip, job to receipt, with a nonce; exit 0 only if it came back."""
    from birddog.cli import announcer, run  # noqa: PLC0415 - the probe only
    from birddog.processes.probe import probe_round_trip  # noqa: PLC0415 - keeps --help fast

    settings, told = settings_of(ctx), announcer(ctx)
    result = run(probe_round_trip(settings, timeout_s=timeout_s, drain=drain, announce=told))
    click.echo(result.message)
    sys.exit(EXIT_OK if result.ok else EXIT_ALARM)
