"""``birddog send``: enqueue an agent job with mail, as a sender's transaction would."""

from __future__ import annotations

import sys
from typing import Any

import click

from birddog.cli import main, parse_address, settings_of, with_stack


@main.command()
@click.option("--job-id", required=True, help="The job id (a replay with the same id must match).")
@click.option("--to", "to", required=True, help="Target AGENT_ID:SESSION_ID.")
@click.option("--from", "from_", required=True, help="Sender AGENT_ID:SESSION_ID.")
@click.option("--reply-to", "reply_to", multiple=True, help="AGENT_ID:SESSION_ID, repeatable.")
@click.option("--key", required=True, help="The mail key (stable across retries).")
@click.option("--command-id", required=True, help="The command fact id.")
@click.option("--content", default=None, help="The mail content; '-' or unset reads stdin.")
@click.option("--max-recoveries", type=int, default=None, help="Recovery budget of the job.")
@click.pass_context
def send(
    ctx: click.Context,
    job_id: str,
    to: str,
    from_: str,
    reply_to: tuple[str, ...],
    key: str,
    command_id: str,
    content: str | None,
    max_recoveries: int | None,
) -> None:
    """Enqueue an agent job with mail, as a sender's transaction would."""
    from birddog.bootstrap import CLOCK  # noqa: PLC0415 - keeps --help fast
    from birddog.clock import epoch_ms  # noqa: PLC0415
    from birddog.core.errors import InvalidInput  # noqa: PLC0415
    from birddog.core.jobs import AgentWork, agent_job, check_content_size  # noqa: PLC0415
    from birddog.core.mail import Mail  # noqa: PLC0415

    settings = settings_of(ctx)
    # Bytes decoded here, not by the locale's codec: invalid UTF-8 becomes lone surrogates,
    # which Mail refuses naming ``content``, instead of a UnicodeDecodeError traceback.
    text = (
        sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
        if content in (None, "-")
        else content
    )
    target = parse_address(to, "--to")
    work_fields: dict[str, Any] = {
        "jobId": job_id,
        "sessionId": target["sessionId"],
        "commandFactId": command_id,
    }
    if max_recoveries is not None:
        work_fields["recovery"] = {"maxRecoveries": max_recoveries}
    try:
        mail = Mail.model_validate(
            {
                "key": key,
                "to": target,
                "from": parse_address(from_, "--from"),
                "replyTo": [parse_address(value, "--reply-to") for value in reply_to],
                "content": text,
                "createdAt": epoch_ms(CLOCK.now()),
            }
        )
        check_content_size(mail.content, limit_bytes=settings.max_content_bytes)
        job = agent_job(
            AgentWork.model_validate(work_fields),
            mail,
            max_content_bytes=settings.max_content_bytes,
        )
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from exc

    [inserted] = with_stack(ctx, lambda stack: stack.enqueue([job]))
    click.echo(f"{'enqueued' if inserted else 'already enqueued (identical replay)'}: {job_id}")
