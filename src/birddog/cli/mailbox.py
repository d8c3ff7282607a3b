"""``birddog inbox``: the replies waiting in an agent's mailbox (mailbox routes)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import checked_id, main, with_services
from birddog.core.ask import address_text
from birddog.core.text import printable
from birddog.display import format_value

if TYPE_CHECKING:
    from birddog.core.mailbox import MailboxEntry
    from birddog.service.entry import Services


def entry_json(entry: MailboxEntry) -> dict[str, Any]:
    """One mailbox entry as JSON: camelCase names, like the envelopes."""
    sender = entry.sender
    return {
        "key": entry.key,
        "inReplyTo": entry.in_reply_to,
        "agentId": entry.agent_id,
        "sessionId": entry.session_id,
        "from": None if sender is None else sender.model_dump(mode="json"),
        "outcome": str(entry.outcome),
        "commandId": entry.command_id,
        "diagnostic": entry.diagnostic,
        "content": entry.content,
        "deliveredAt": entry.delivered_at.isoformat(),
        "readAt": None if entry.read_at is None else entry.read_at.isoformat(),
    }


def printable_lines(text: str) -> str:
    """Outside text for a terminal: each line made printable, line breaks kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def print_entry(entry: MailboxEntry, *, as_json: bool) -> None:
    """Print one entry: a JSON line, or a header line and the content indented below it."""
    if as_json:
        click.echo(json.dumps(entry_json(entry), ensure_ascii=True))
        return
    sender = entry.sender
    origin = "unknown sender" if sender is None else f"from {address_text(sender)}"
    click.echo(
        f"{printable(entry.key)}  {printable(str(entry.outcome))}  {printable(origin)}  "
        f"{format_value(entry.delivered_at)}"
    )
    for line in printable_lines(entry.content).split("\n"):
        click.echo(f"    {line}")
    if entry.diagnostic is not None:
        click.echo(f"    diagnostic: {printable(entry.diagnostic)}")
    click.echo("")


@main.command()
@click.argument("address", metavar="AGENT[:SESSION]")
@click.option("--follow", is_flag=True, help="Keep printing new replies until stopped (Ctrl-C).")
@click.option("--ack", is_flag=True, help="Mark what was printed as read.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, help="Most replies shown.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def inbox(
    ctx: click.Context, address: str, follow: bool, ack: bool, limit: int, as_json: bool
) -> None:
    """List the unread replies in AGENT's mailbox: key, outcome, content, diagnostic.

    Replies land in a mailbox when the agent's route is a mailbox
    (`birddog route add AGENT --mailbox`; `birddog ask` adds one for the asker). Listing
    reads nothing as read; --ack does, once the replies are printed.
    """
    agent_id, _, session = address.partition(":")
    if not agent_id or (":" in address and not session):
        raise click.BadParameter("must be AGENT or AGENT:SESSION", param_hint="AGENT[:SESSION]")
    checked_id(agent_id, "AGENT")
    if session:
        checked_id(session, "SESSION")
    session_id = session or None

    async def show(adapters: Services) -> None:
        if not follow:
            entries = await adapters.mailbox.read(agent_id, session_id, limit=limit)
            if not entries and not as_json:
                click.echo("no unread replies", err=True)
            await _emit(adapters, entries, ack=ack, as_json=as_json)
            return
        from birddog.runtime import stop_on_signals  # noqa: PLC0415 - keeps --help fast

        with stop_on_signals() as stop:
            async for batch in adapters.mailbox.follow(
                agent_id, session_id, stop=stop, limit=limit
            ):
                await _emit(adapters, batch, ack=ack, as_json=as_json)

    with_services(ctx, show)


async def _emit(
    adapters: Services, entries: list[MailboxEntry], *, ack: bool, as_json: bool
) -> None:
    for entry in entries:
        print_entry(entry, as_json=as_json)
    # Acknowledged only once printed: a reply is never marked read unseen.
    sys.stdout.flush()
    if ack:
        await adapters.mailbox.ack([entry.key for entry in entries])
