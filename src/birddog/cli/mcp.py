"""``birddog mcp``: the mail room as MCP tools, over stdio or streamable HTTP."""

from __future__ import annotations

import click

from birddog.cli import announcer, main, run, settings_of

DEFAULT_PORT = 9467
"""Where ``--http`` listens on 127.0.0.1 by default."""


@main.command("mcp")
@click.option(
    "--as",
    "caller",
    metavar="AGENT:SESSION",
    default=None,
    help="Who every tool call acts as (its replies land in its mailbox; it gets one when "
    "it has no route). Required over stdio; over HTTP without it, each request's "
    "per-agent token names its caller.",
)
@click.option(
    "--http",
    is_flag=True,
    help="Serve streamable HTTP at http://127.0.0.1:PORT/mcp (bearer tokens) instead of stdio; "
    "a request without a token is answered 401 naming /.well-known/oauth-protected-resource.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The HTTP port on 127.0.0.1 (with --http; 0 picks a free one).",
)
@click.option(
    "--token",
    envvar="BIRDDOG_MCP_TOKEN",
    default=None,
    help="With --http and --as: the bearer token clients must send (unset: a fresh one, "
    "printed at start).",
)
@click.option(
    "--insecure-test-mode",
    "insecure_as",
    metavar="AGENT:SESSION",
    default=None,
    help="With --http, on 127.0.0.1 only: every request acts as AGENT:SESSION and no token "
    "is checked (for tools that cannot send a header, such as the MCP conformance suite). "
    "Announced loudly at start; never for real agents.",
)
@click.option(
    "--channel",
    is_flag=True,
    help="Declare Claude Code's claude/channel capability and push a notification when a "
    "reply lands in the mailbox or a task is queued for the session.",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    caller: str | None,
    http: bool,
    port: int,
    token: str | None,
    insecure_as: str | None,
    channel: bool,
) -> None:
    """Serve the mail room as MCP tools, over stdio or streamable HTTP.

    The tools: send, ask, wait, inbox, read, ack, next_task, answer, status, agents.

    \b
    Claude Code:  claude mcp add birddog -- birddog mcp --as me:s-me
    Over stdio nothing but JSON-RPC is written to stdout; logs go to stderr as JSON.
    """  # noqa: D301 - "\b" is click's mark for a paragraph it must not rewrap
    from birddog.logs import configure, json_stdlib_logs  # noqa: PLC0415
    from birddog.processes.mcp import run_mcp  # noqa: PLC0415 - keeps --help fast

    settings = settings_of(ctx)
    if not http:
        # Stdout is the protocol: every log line is JSON on stderr.
        configure(log_format="json", level=settings.log_level)
        json_stdlib_logs()
    try:
        import mcp as _sdk  # noqa: F401, PLC0415 - only to say what to install
    except ModuleNotFoundError:
        raise click.ClickException(
            "the MCP server needs the mcp extra: pip install 'birddog[mcp]'"
        ) from None
    run(
        run_mcp(
            settings,
            caller=caller,
            http=http,
            port=port,
            channel=channel,
            token=token,
            announce=announcer(ctx),
            insecure_as=insecure_as,
        )
    )
