"""``birddog prune``: delete old receipts, settled jobs, dead letters, read mailbox replies."""

from __future__ import annotations

import json
from collections.abc import Callable

import click

from birddog.cli import main, with_services
from birddog.core.duration import parse_duration
from birddog.core.errors import InvalidInput
from birddog.core.retention import RetentionPolicy


def _duration(option: str) -> Callable[[click.Context, click.Parameter, str | None], float | None]:
    def convert(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
        if value is None:
            return None
        try:
            return parse_duration(value, field=option)
        except InvalidInput as exc:
            raise click.BadParameter(str(exc)) from None

    return convert


@main.command()
@click.option(
    "--receipts-older-than",
    "receipts_s",
    callback=_duration("--receipts-older-than"),
    help="Delete receipts delivered longer ago than this (e.g. 30d).",
)
@click.option(
    "--jobs-settled-older-than",
    "jobs_s",
    callback=_duration("--jobs-settled-older-than"),
    help="Delete jobs settled longer ago than this (e.g. 7d). A sender retrying a deleted "
    "job's id enqueues it anew.",
)
@click.option(
    "--dead-older-than",
    "dead_s",
    callback=_duration("--dead-older-than"),
    help="Delete dead letters that died longer ago than this (e.g. 30d).",
)
@click.option(
    "--mailbox-read-older-than",
    "mailbox_s",
    callback=_duration("--mailbox-read-older-than"),
    help="Delete mailbox replies read longer ago than this (their receipts stay).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.pass_context
def prune(
    ctx: click.Context,
    receipts_s: float | None,
    jobs_s: float | None,
    dead_s: float | None,
    mailbox_s: float | None,
    as_json: bool,
) -> None:
    """Delete rows older than the given ages, in small batches, and say what went.

    Nothing is deleted unless asked: receipts, jobs and dead letters are kept for ever by
    default. Durations read like 30d, 12h, 90m or 45s. The daemon does the same on its own
    when BIRDDOG_RETAIN_RECEIPTS_S, _JOBS_S, _DEAD_S or _MAILBOX_S are set.
    """
    policy = RetentionPolicy(
        receipts_s=receipts_s, jobs_settled_s=jobs_s, dead_s=dead_s, mailbox_read_s=mailbox_s
    )
    if policy.empty:
        raise click.UsageError(
            "say what to prune: --receipts-older-than, --jobs-settled-older-than, "
            "--dead-older-than or --mailbox-read-older-than"
        )
    report = with_services(ctx, lambda s: s.retention.prune(policy))
    counts = {
        "receipts": report.receipts,
        "jobs": report.jobs,
        "dead_letters": report.dead_letters,
        "mailbox": report.mailbox,
    }
    if as_json:
        click.echo(json.dumps(counts))
        return
    click.echo(
        f"pruned {report.receipts} receipt(s), {report.jobs} settled job(s), "
        f"{report.dead_letters} dead letter(s), {report.mailbox} read mailbox reply(ies)"
    )
