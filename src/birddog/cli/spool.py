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

from birddog.cli import EXIT_ALARM, main, run, settings_of, with_services
from birddog.core.text import printable

if TYPE_CHECKING:
    from birddog.core.spool import SpoolStatus
    from birddog.service.entry import Services
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
        ``path``, ``mails``, ``elsewhere`` (the mail meant for another database, by
        destination), ``quarantined``, ``bytes``, ``oldest_spooled_at``,
        ``oldest_age_s``, ``last_error``, ``last_error_at``, ``last_forward_at``.
    """
    age = status.oldest_age_s(now)
    return {
        "path": status.path,
        "mails": status.mails,
        "elsewhere": [
            {"destination": name, "mails": count, "oldest_spooled_at": oldest}
            for name, count, oldest in status.elsewhere
        ],
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
        own_name = None if local.destination is None else local.destination.describe()
        click.echo(dump_json({**facts, "database": own_name, "quarantine": quarantined}))
        return
    age = facts["oldest_age_s"]
    oldest = (
        ""
        if age is None
        else f", the oldest spooled {_at(status.oldest_at)} ({format_age(age)} ago)"
    )
    own = local.destination
    click.echo(f"spool {printable(status.path)}")
    click.echo(f"{status.mails} {_mails(status.mails)} waiting{oldest}; {status.bytes} bytes")
    if own is not None:
        click.echo(f"this database: {printable(own.describe())}")
    if status.elsewhere:
        click.echo(
            "meant for another database, never forwarded here (forward them with that "
            "DATABASE_URL, or into this one with birddog spool forward --adopt):"
        )
        for name, count, first in status.elsewhere:
            click.echo(f"  {printable(name)}: {count} {_mails(count)}, since {_at(first)}")
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
@click.option(
    "--adopt",
    is_flag=True,
    help="Also forward, into this database and under this login, the mail meant for "
    "another database or that records none (spooled by an older BirdDog).",
)
@click.pass_context
def spool_forward(ctx: click.Context, wait_s: float, adopt: bool) -> None:
    """Forward the spool into the database once, in order; exit 1 if anything is left.

    Only the mail meant for this database (the same login, host, port and database, and
    server when known) goes: the rest stays for a forwarder of its own database, listed
    by `spool status`, unless --adopt. Each mail is written as its sender would have
    (the same checks and replay rules), then removed from the spool. A mail the database
    refuses is quarantined with the reason; while the database is unreachable
    everything stays.
    """

    async def forward(adapters: Services) -> tuple[ForwardReport, SpoolStatus]:
        done = await adapters.sender.forward(wait_s=wait_s, adopt=adopt)
        return done, await adapters.spool.status()

    report, left = with_services(ctx, forward, lazy=True)
    if report.busy:
        click.echo(f"another process kept forwarding this spool for {wait_s:g} s", err=True)
        sys.exit(EXIT_ALARM)
    click.echo(f"forwarded {len(report.forwarded)} {_mails(len(report.forwarded))}")
    for key, reason in report.quarantined.items():
        click.echo(f"quarantined {printable(key)}: {printable(reason)}", err=True)
    if report.kept:
        click.echo(f"mail still waits in the spool: {printable(report.error or '')}", err=True)
    for name, count, _ in left.elsewhere:
        click.echo(
            f"left {count} {_mails(count)} meant for {printable(name)} (not this database)",
            err=True,
        )
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
