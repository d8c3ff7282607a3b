"""``birddog send``: enqueue an agent job with mail, or spool it while the database is away."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import click

from birddog.cli import announce, main, settings_of, with_adapters
from birddog.core.text import printable

if TYPE_CHECKING:
    from birddog.bootstrap import Adapters
    from birddog.service.asked import Asked


priority_option = click.option(
    "--priority",
    type=click.IntRange(-32768, 32767),
    default=0,
    show_default=True,
    help="Higher runs first among the queued jobs of the session sent to.",
)
"""``--priority N`` of ``send`` and ``ask``: the job's priority, -32768 to 32767."""


_Command = TypeVar("_Command", bound=Callable[..., Any])


def _kind(
    interactive_only: bool,
) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    def check(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        from birddog.core.errors import InvalidInput  # noqa: PLC0415 - keeps --help fast
        from birddog.core.kinds import check_interactive, parse_kind  # noqa: PLC0415

        if value is None:
            return None
        try:
            kind = parse_kind(value, field="--kind")
            if interactive_only:
                check_interactive(kind, field="--kind")
        except InvalidInput as exc:
            raise click.BadParameter(f"{exc}; nothing was sent") from None
        return kind.value

    return check


def kind_option(*, interactive_only: bool) -> Callable[[_Command], _Command]:
    """``--kind`` of ``send`` (any of the four) and ``ask`` (an interactive one).

    Args:
        interactive_only: say that only ``task`` and ``escalation`` are taken (an ask).
    """
    kinds = "task or escalation" if interactive_only else "task, escalation, report or receipt"
    return click.option(
        "--kind",
        default=None,
        metavar="KIND",
        callback=_kind(interactive_only),
        help=f"What the mail is for: {kinds} (default task). Kept in the job, not the mail.",
    )


EXIT_REFUSED = 3
"""Nothing was sent: the target is an agent BirdDog does not know (or --strict refused)."""


class _Refused(click.ClickException):
    exit_code = EXIT_REFUSED


@main.command()
@click.option(
    "--job-id",
    default=None,
    help="The job id; the same mail sent again is a replay. Unset: made from the key.",
)
@click.option("--to", "to", required=True, help="Target AGENT_ID:SESSION_ID.")
@click.option("--from", "from_", required=True, help="Sender AGENT_ID:SESSION_ID.")
@click.option("--reply-to", "reply_to", multiple=True, help="AGENT_ID:SESSION_ID, repeatable.")
@click.option(
    "--key",
    default=None,
    help="The mail key (stable across retries). Unset: a new one, printed on stderr.",
)
@click.option("--command-id", default=None, help="The command fact id. Unset: the job id.")
@click.option(
    "--content",
    default=None,
    help="The mail content; '-' reads stdin, as does leaving it out with stdin piped. "
    "Empty content needs --content ''.",
)
@click.option("--max-recoveries", type=int, default=None, help="Recovery budget of the job.")
@priority_option
@kind_option(interactive_only=False)
@click.option(
    "--not-before",
    "not_before",
    default=None,
    metavar="TIME|DURATION",
    help="Not claimed before then: a time with its timezone (2026-12-02T09:00:00Z) or a "
    "duration from now (90s, 2h).",
)
@click.option(
    "--expires-in",
    "expires_in",
    default=None,
    metavar="DURATION",
    help="If no worker took it this long after it was sent (30s, 10m), it is cancelled and "
    "its replies say so.",
)
@click.option(
    "--created-at",
    "created_at",
    type=click.IntRange(min=0),
    default=None,
    help="The mail's createdAt (ms since the epoch). Unset: now, or the stored mail's when "
    "this job id was sent before, so an identical send is a replay.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse, before anything is written, a --reply-to agent without a route (its "
    "reply would die unknown_recipient). Without it: a warning on stderr.",
)
@click.option(
    "--allow-unknown",
    "allow_unknown",
    is_flag=True,
    help="Queue the mail even when the target agent has no route and its session was "
    "never sent work (for a worker not started yet). Without it such a send is refused "
    "(exit 3), as the MCP send refuses it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_context
def send(
    ctx: click.Context,
    job_id: str | None,
    to: str,
    from_: str,
    reply_to: tuple[str, ...],
    key: str | None,
    command_id: str | None,
    content: str | None,
    max_recoveries: int | None,
    priority: int,
    kind: str | None,
    not_before: str | None,
    expires_in: str | None,
    created_at: int | None,
    strict: bool,
    allow_unknown: bool,
    as_json: bool,
) -> None:
    """Enqueue an agent job with mail; sending the same job again is a replay ("already sent").

    --to, --from and the content are enough: an unset --key is a new one, the job id is
    made from the key and the command id is the job id (each printed on stderr). A
    target agent with no route whose session was never sent work is refused (exit 3,
    nothing written), as the MCP send refuses it; --allow-unknown queues it anyway, for
    a worker not started yet. A --reply-to agent without a route gets a warning (its
    reply would die unknown_recipient: add the route first); --strict refuses the send
    instead.

    When the database cannot be reached, the mail is kept in the local spool (on disk
    when this says "spooled") and forwarded once it can be: by a daemon, worker or MCP
    server on this host, or by `birddog spool forward`.
    """
    from birddog.bootstrap import CLOCK  # noqa: PLC0415 - keeps --help fast
    from birddog.clock import epoch_ms  # noqa: PLC0415
    from birddog.core.ask import parse_address  # noqa: PLC0415
    from birddog.core.duration import (  # noqa: PLC0415
        parse_duration,
        parse_time,
        parse_time_or_duration,
    )
    from birddog.core.errors import (  # noqa: PLC0415
        InvalidInput,
        StoreBusy,
        StoreRefused,
        StoreUnavailable,
        UnknownAgent,
    )
    from birddog.core.jobs import AgentWork, Job, agent_job, check_content_size  # noqa: PLC0415
    from birddog.core.mail import Mail  # noqa: PLC0415

    settings = settings_of(ctx)
    key, job_id, command_id, _ = made = _made_ids(key, job_id, command_id, now=CLOCK.now())
    text = read_content(content)
    try:
        # Errors name the mail's fields, as the mail's own checks do: replyTo.1.agentId.
        target = parse_address(to, "to")
        sender = parse_address(from_, "from")
        replies = [parse_address(value, f"replyTo.{i}") for i, value in enumerate(reply_to)]
        start = (
            None
            if not_before is None
            else parse_time_or_duration(not_before, now=CLOCK.now(), field="--not-before")
        )
        expires_in_s = (
            None if expires_in is None else parse_duration(expires_in, field="--expires-in")
        )
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from exc
    work_fields: dict[str, Any] = {
        "jobId": job_id,
        "sessionId": target.session_id,
        "commandFactId": command_id,
        **({} if max_recoveries is None else {"recovery": {"maxRecoveries": max_recoveries}}),
    }
    mail_fields: dict[str, Any] = {
        "key": key,
        "to": target,
        "from": sender,
        "replyTo": replies,
        "content": text,
    }

    def build(stamp_ms: int, start_at: datetime | None = start) -> Job:
        mail = Mail.model_validate({**mail_fields, "createdAt": stamp_ms})
        check_content_size(mail.content, limit_bytes=settings.max_content_bytes)
        return agent_job(
            AgentWork.model_validate(work_fields),
            mail,
            max_content_bytes=settings.max_content_bytes,
            priority=priority,
            kind=kind,
            not_before=start_at,
            expires_in_s=expires_in_s,
        )

    try:
        job = build(created_at if created_at is not None else epoch_ms(CLOCK.now()))
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from exc

    async def enqueue(adapters: Adapters) -> tuple[Asked, list[str]]:
        chosen, unrouted = job, []
        try:
            unrouted = await adapters.routes.missing([reply.agent_id for reply in replies])
            if created_at is None:
                # A retried send stamps a new time; the stored mail's time makes the retry
                # the same mail, so an identical send is a replay and any other difference
                # a conflict. So does a not-before given as a duration: the stored job's
                # moment is kept.
                stored = await _stored_times(adapters, job_id)
                if stored is not None:
                    stamp, stored_start = stored
                    relative = not_before is not None and parse_time(not_before) is None
                    chosen = build(stamp, stored_start if relative else start)
        except (StoreRefused, StoreBusy):
            raise
        except StoreUnavailable:
            # The database is away: the sender spools the mail (or finds it back), and a
            # spooled mail takes the stored mail's time when it is forwarded. --strict
            # cannot check the routes without it: refused.
            if strict:
                raise
        if unrouted and strict:
            raise UnknownAgent(_unrouted(unrouted) + "; nothing was sent", field="replyTo")
        sent = await adapters.sender.enqueue(
            chosen, keep_stored_time=created_at is None, require_known=not allow_unknown
        )
        return sent, unrouted

    sent, unrouted = _send_or_refuse(ctx, enqueue)
    _report_sent(sent, made, unrouted, as_json=as_json)


def _send_or_refuse(
    ctx: click.Context, enqueue: Callable[[Adapters], Awaitable[tuple[Asked, list[str]]]]
) -> tuple[Asked, list[str]]:
    """Run the send; an unknown agent exits 3 (nothing was sent), naming --allow-unknown."""
    from birddog.core.errors import UnknownAgent  # noqa: PLC0415

    try:
        return with_adapters(ctx, enqueue, lazy=True)
    except click.ClickException as exc:
        cause = exc.__cause__
        if not isinstance(cause, UnknownAgent):
            raise
        hint = (
            "; or, for a worker not started yet, send again with --allow-unknown"
            if cause.field == "to"
            else ""
        )
        message = exc.format_message()
        if "nothing was sent" not in message:
            message += f"{hint}; nothing was sent"
        raise _Refused(message) from exc


class _Ids(NamedTuple):
    """A send's key, job id and command id, each as given or made; ``told``: what was made."""

    key: str
    job_id: str
    command_id: str
    told: str


def _made_ids(
    key: str | None, job_id: str | None, command_id: str | None, *, now: datetime
) -> _Ids:
    """The ids a send goes under: those given, the others made (as an MCP send makes them).

    An unset key is a new one; an unset job id is the key's (``send:<key>``, so the same
    key again is the same job); an unset command id is the job id.
    """
    import secrets  # noqa: PLC0415

    from birddog.core.ask import ask_job_id, new_mail_key  # noqa: PLC0415

    made: list[str] = []
    if key is None:
        key = new_mail_key(now, secrets.token_hex(4), asking=False)
        made.append(f"key {key}")
    if job_id is None:
        job_id = ask_job_id(key)
        made.append(f"job id {job_id}")
    if command_id is None:
        command_id = job_id
        made.append(f"command id {command_id}")
    told = ""
    if made:
        told = f"sent as {', '.join(made)} (--key {key} sends the same again)"
    return _Ids(key, job_id, command_id, told)


def _report_sent(sent: Asked, ids: _Ids, unrouted: list[str], *, as_json: bool) -> None:
    """Say what ``send`` did: the ids it made, sent, already sent or spooled, the unrouted."""
    if ids.told and not as_json:
        announce(ids.told)
    if unrouted:
        announce(f"warning: {_unrouted(unrouted)}")
    status = "spooled" if sent.spooled else "already sent" if sent.replay else "sent"
    job_id = ids.job_id
    if as_json:
        click.echo(
            json.dumps(
                {
                    "status": status,
                    "jobId": job_id,
                    "key": ids.key,
                    "commandId": ids.command_id,
                    "unroutedReplyTo": unrouted,
                    **({"spooled": sent.spooled} if sent.spooled else {}),
                }
            )
        )
    elif sent.spooled:
        click.echo(f"spooled ({sent.spooled}): {job_id}")
    elif sent.replay:
        click.echo(f"already sent: {job_id} (identical to the stored job; nothing written)")
    else:
        click.echo(f"sent: {job_id}")


def _unrouted(agent_ids: list[str]) -> str:
    """What a reply to agents without a route would do, and the fix."""
    named = ", ".join(printable(agent) for agent in agent_ids)
    first = printable(agent_ids[0])
    return (
        f"no route for reply-to {named}: its reply would die unknown_recipient; add one "
        f"first (birddog route add {first} URL, or --mailbox)"
    )


def read_content(
    content: str | None, *, how: str = "--content TEXT", empty: str = "--content ''"
) -> str:
    """The mail content as given, or from stdin; refuses a terminal and an empty pipe.

    Args:
        content: the value given on the command line; None or ``-`` reads stdin.
        how: how content is given on the command line, for the messages.
        empty: how empty content is given on the command line, for the messages.

    Returns:
        The content; empty only when given explicitly as ``''``.

    Raises:
        click.UsageError: nothing given and stdin is a terminal, or stdin was empty.
    """
    if content is not None and content != "-":
        return content
    if content is None and sys.stdin.isatty():
        raise click.UsageError(
            f"no content: give {how} or pipe it on stdin (empty content needs {empty})"
        )
    # Bytes decoded here, not by the locale's codec: invalid UTF-8 becomes lone surrogates,
    # which Mail refuses naming ``content``, instead of a UnicodeDecodeError traceback.
    text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    if not text:
        raise click.UsageError(f"stdin was empty: empty content needs {empty}")
    return text


async def _stored_times(adapters: Adapters, job_id: str) -> tuple[int, datetime | None] | None:
    """The mail's ``createdAt`` and the not-before of the agent job stored under ``job_id``."""
    from birddog.core.errors import InvalidJobPayload, JobNotFound  # noqa: PLC0415
    from birddog.core.jobs import decode_agent_job  # noqa: PLC0415

    try:
        stored = await adapters.jobs.get(job_id)
        payload = decode_agent_job(stored)
    except (JobNotFound, InvalidJobPayload):
        return None
    return None if payload.mail is None else (payload.mail.created_at, stored.not_before)
