"""``birddog spool``: the local spool of mail sent while the database was unreachable.

``status`` says what waits and what was set aside (no database needed), ``forward``
moves it into the database once, in order, and ``requeue`` gives quarantined mail
another try once what the database refused is fixed.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import EXIT_ALARM, main, run, settings_of, with_adapters
from birddog.core.text import printable

if TYPE_CHECKING:
    from birddog.bootstrap import Adapters
    from birddog.core.spool import SpoolStatus
    from birddog.service.forwarding import ForwardReport

QUARANTINE_SHOWN = 5
"""How many quarantined mails ``spool status`` names, with their reasons."""


@main.group()
def spool() -> None:
    """The local spool: mail accepted while the database could not be reached."""


def status_facts(status: SpoolStatus, now: datetime) -> dict[str, Any]:
    """The spool's status as plain facts (``spool status --json``, ``check``).

    Args:
        status: from the spool.
        now: the time ages are measured at.

    Returns:
        ``path``, ``mails``, ``quarantined``, ``bytes``, ``oldest_spooled_at``,
        ``oldest_age_s``, ``last_error``, ``last_error_at``, ``last_forward_at``.
    """
    age = status.oldest_age_s(now)
    return {
        "path": status.path,
        "mails": status.mails,
        "quarantined": status.quarantined,
        "bytes": status.bytes,
        "oldest_spooled_at": status.oldest_at,
        "oldest_age_s": None if age is None else round(age, 1),
        "last_error": status.last_error,
        "last_error_at": status.last_error_at,
        "last_forward_at": status.last_forward_at,
    }


@spool.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def spool_status(ctx: click.Context, as_json: bool) -> None:
    """Mails waiting, bytes, the oldest one's age, the last forward error, quarantine."""
    from birddog.bootstrap import CLOCK, open_spool  # noqa: PLC0415 - keeps --help fast
    from birddog.core.duration import format_age  # noqa: PLC0415
    from birddog.display import dump_json  # noqa: PLC0415

    local = open_spool(settings_of(ctx))

    async def look() -> tuple[SpoolStatus, list[dict[str, Any]]]:
        return await local.status(), await local.quarantined(limit=QUARANTINE_SHOWN)

    status, quarantined = run(look())
    facts = status_facts(status, CLOCK.now())
    if as_json:
        click.echo(dump_json({**facts, "quarantine": quarantined}))
        return
    age = facts["oldest_age_s"]
    oldest = (
        ""
        if age is None
        else f", the oldest spooled {_at(status.oldest_at)} ({format_age(age)} ago)"
    )
    click.echo(f"spool {printable(status.path)}")
    click.echo(f"{status.mails} {_mails(status.mails)} waiting{oldest}; {status.bytes} bytes")
    if status.last_error is not None:
        click.echo(
            f"last forward failed at {_at(status.last_error_at)}: {printable(status.last_error)}"
        )
    elif status.last_forward_at is not None:
        click.echo(f"last forward ran to its end at {_at(status.last_forward_at)}")
    if status.quarantined:
        click.echo(
            f"{status.quarantined} {_mails(status.quarantined)} quarantined "
            "(never forwarded; birddog spool requeue tries them again):"
        )
        for row in quarantined:
            click.echo(f"  {printable(row['key'] or '?')}: {printable(row['reason'])}")


@spool.command("forward")
@click.option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="How long to wait for another process that is forwarding this spool.",
)
@click.pass_context
def spool_forward(ctx: click.Context, wait_s: float) -> None:
    """Forward the spool into the database once, in order; exit 1 if anything is left.

    Each mail is written as its sender would have (the same checks and replay rules),
    then removed from the spool. A mail the database refuses is quarantined with the
    reason; while the database is unreachable everything stays.
    """

    async def forward(adapters: Adapters) -> ForwardReport:
        return await adapters.sender.forward(wait_s=wait_s)

    report = with_adapters(ctx, forward, lazy=True)
    if report.busy:
        click.echo(f"another process kept forwarding this spool for {wait_s:g} s", err=True)
        sys.exit(EXIT_ALARM)
    click.echo(f"forwarded {len(report.forwarded)} {_mails(len(report.forwarded))}")
    for key, reason in report.quarantined.items():
        click.echo(f"quarantined {printable(key)}: {printable(reason)}", err=True)
    if report.kept:
        click.echo(f"mail still waits in the spool: {printable(report.error or '')}", err=True)
    if report.kept or report.quarantined:
        sys.exit(EXIT_ALARM)


@spool.command("requeue")
@click.pass_context
def spool_requeue(ctx: click.Context) -> None:
    """Put quarantined mail back at the end of the spool, for the next forward to try."""
    from birddog.bootstrap import open_spool  # noqa: PLC0415 - keeps --help fast

    moved = run(open_spool(settings_of(ctx)).requeue())
    click.echo(f"requeued {moved} {_mails(moved)}")


def _mails(count: int) -> str:
    return "mail" if count == 1 else "mails"


def _at(when: datetime | None) -> str:
    from birddog.display import format_value  # noqa: PLC0415 - keeps --help fast

    return format_value(when)
