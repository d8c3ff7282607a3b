"""Job administration and one mail's story: ``jobs list|show|cancel`` and ``show KEY``."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import EXIT_ALARM, main, with_services
from birddog.core.digests import shown_state
from birddog.core.jobs import JobState
from birddog.core.mail import Outcome
from birddog.display import dump_json, format_value, render_record, render_table

if TYPE_CHECKING:
    from birddog.ports import Story

JOB_COLUMNS = [
    "job_id",
    "queue",
    "state",
    "kind",
    "outcome",
    "priority",
    "created_at",
    "not_before",
    "settled_at",
    "mail_key",
    "sender_agent_id",
]
JOB_HEADERS = [
    "job",
    "queue",
    "state",
    "kind",
    "outcome",
    "prio",
    "created",
    "not before",
    "settled",
    "mail",
    "from",
]

ATTEMPT_COLUMNS = ["at", "result", "status", "ms", "error"]


def _shown(job: dict[str, Any]) -> str:
    """The job's state for people: ``queued, waiting for digest (at ...)`` while it waits."""
    return shown_state(job["state"], job.get("digest_at"), datetime.now(UTC))


def _job_record(job: dict[str, Any]) -> list[tuple[str, object]]:
    mail = job.get("mail") or {}
    sender = mail.get("from") or {}
    to = mail.get("to") or {}
    reply_to = mail.get("replyTo") or []
    pairs: list[tuple[str, object]] = [
        ("job", job["job_id"]),
        ("queue", job["queue"]),
        ("lane", job["lane"]),
        ("priority", job["priority"]),
        ("state", _shown(job)),
        ("kind", job.get("kind", "task")),
        ("outcome", job["outcome"]),
        ("agent", job["agent_id"]),
        ("created", job["created_at"]),
        ("not before", job["not_before"]),
        ("expires", job["expires_at"]),
        ("digest", job.get("digest_at")),
        ("started", job["started_at"]),
        ("settled", job["settled_at"]),
        ("lease until", job["lease_expires_at"]),
        ("worker", job["worker_id"]),
        ("recoveries", job["recovery_count"]),
        ("cancel asked", job["cancel_requested_at"]),
        ("diagnostic", job["diagnostic"]),
        ("command", job["command_fact_id"]),
        ("mail key", job["mail_key"]),
    ]
    if mail:
        pairs += [
            ("from", f"{sender.get('agentId')}:{sender.get('sessionId')}"),
            ("to", f"{to.get('agentId')}:{to.get('sessionId')}"),
            ("reply to", ", ".join(f"{a.get('agentId')}:{a.get('sessionId')}" for a in reply_to)),
            ("content", _preview(job["content_preview"], job["content_chars"])),
        ]
    if job["result_chars"] is not None:
        pairs.append(("result", _preview(job["result_preview"], job["result_chars"])))
    return pairs


def _preview(text: str | None, chars: int | None) -> str | None:
    if text is None or chars is None:
        return None
    return text if len(text) >= chars else f"{text}… ({chars} characters)"


@main.group()
def jobs() -> None:
    """Jobs: list them by state and queue, show one, cancel one."""


@jobs.command("list")
@click.option(
    "--state", type=click.Choice([s.value for s in JobState]), default=None, help="Only this state."
)
@click.option("--queue", default=None, help="Only this queue (a session id).")
@click.option("--limit", type=int, default=50, show_default=True, help="Jobs per page (1 to 500).")
@click.option("--after", default=None, help="The cursor printed after the previous page.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def jobs_list(
    ctx: click.Context,
    state: str | None,
    queue: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """Jobs: running (longest first), then queued (oldest first), then settled (newest)."""
    page = with_services(
        ctx, lambda s: s.admin.jobs(state=state, queue=queue, after=after, limit=limit)
    )
    if as_json:
        click.echo(dump_json({"jobs": page.rows, "next_cursor": page.next_cursor}))
        return
    shown = [{**row, "state": _shown(row)} for row in page.rows]
    click.echo(render_table(shown, JOB_COLUMNS, headers=JOB_HEADERS))
    if page.next_cursor:
        click.echo(f"more: birddog jobs list --after {page.next_cursor}")


@jobs.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def jobs_show(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """One job: state, times, recoveries, its mail and result (previews)."""
    job = with_services(ctx, lambda s: s.admin.job(job_id))
    click.echo(dump_json(job) if as_json else render_record(_job_record(job)))


@jobs.command("cancel")
@click.argument("job_id")
@click.option(
    "--reason", default="", help="The text the job's replies carry (default: the standard text)."
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def jobs_cancel(ctx: click.Context, job_id: str, reason: str, as_json: bool) -> None:
    """Cancel a queued job now, or a running one when its worker stops it (exit 1: settled).

    A running job's lease is cut to the cancel grace (``birddog.limits.cancel_grace_s``,
    60 s): a worker that does not stop its turn by then loses it, and a reaper settles the
    job cancelled, so the queue it held moves on.
    """
    outcome = with_services(ctx, lambda s: s.jobs.cancel(job_id=job_id, content=reason))
    if outcome is None:
        state, message = (
            "running",
            "cancellation recorded; it settles cancelled when its worker stops it, or "
            "when its lease ends within the cancel grace (a worker that does not stop "
            "no longer holds the queue)",
        )
    elif outcome == Outcome.CANCELLED:
        state, message = "settled", "settled cancelled"
    else:
        state, message = "settled", f"had already settled {outcome}; nothing to cancel"
    if as_json:
        click.echo(dump_json({"job_id": job_id, "state": state, "outcome": outcome}))
    else:
        click.echo(f"job {format_value(job_id)}: {message}")
    if outcome is not None and outcome != Outcome.CANCELLED:
        sys.exit(EXIT_ALARM)


def render_story(story: Story) -> str:
    """A story as sections of records and tables, every value printable.

    Args:
        story: the story from :meth:`birddog.ports.Admin.story`.

    Returns:
        The text to print.
    """
    parts = [f"story of {format_value(story.key)}"]
    parts.append("mail: " + (", ".join(format_value(k) for k in story.mail_keys) or "-"))
    for job in story.jobs:
        parts += ["", render_record(_job_record(job))]
    parts += ["", "replies"]
    delivered = {row["key"]: row for row in story.receipts}
    read = {row["key"]: row for row in story.mailbox}
    rows = [
        {
            "key": row["key"],
            "to": f"{row['recipient_agent_id']}:{row['recipient_session_id']}",
            "state": row["state"] if row["state"] == "pending" else f"dead ({row['dead_reason']})",
            "attempts": row["attempts"],
            "when": row["due_at"] if row["state"] == "pending" else row["dead_at"],
            "last_error": row["last_error"],
        }
        for row in story.replies
    ] + [
        {
            "key": row["key"],
            "to": f"{row['recipient_agent_id']}:{row['recipient_session_id']}",
            "state": "delivered" + (" to mailbox" if row["key"] in read else ""),
            "attempts": row["attempts"],
            "when": row["delivered_at"],
        }
        for row in story.receipts
    ]
    parts.append(
        render_table(
            rows,
            ["key", "to", "state", "attempts", "when", "last_error"],
            headers=["key", "to", "state", "attempts", "due/died/delivered", "last error"],
        )
    )
    for row in [*story.replies, *delivered.values()]:
        if row["attempt_log"]:
            parts += ["", f"attempts of {format_value(row['key'])}"]
            parts.append(render_table(row["attempt_log"], ATTEMPT_COLUMNS))
    return "\n".join(parts)


@main.command("show")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, key: str, as_json: bool) -> None:
    """One mail's story by mail key, reply key or job id (exit 1: nothing found)."""
    story = with_services(ctx, lambda s: s.admin.story(key))
    if as_json:
        click.echo(dump_json(dataclasses.asdict(story)))
    elif story.found:
        click.echo(render_story(story))
    else:
        click.echo(f"nothing found for {format_value(key)}")
    if not story.found:
        sys.exit(EXIT_ALARM)
