"""``birddog a2a``: every agent with a route answers A2A (JSON-RPC and HTTP+JSON)."""

from __future__ import annotations

import click

from birddog.cli import announcer, main, run, settings_of

DEFAULT_PORT = 9468
"""Where ``birddog a2a`` listens by default."""


@main.command("a2a")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port (0 picks a free one).",
)
@click.option(
    "--wait-s",
    type=click.FloatRange(0, 600),
    default=60.0,
    show_default=True,
    help="How long a blocking SendMessage waits for the task to end before returning it "
    "as it stands.",
)
@click.option(
    "--public-url",
    default=None,
    help="Where callers reach this server, for the Agent Cards' URLs (default: the "
    "address it listens on).",
)
@click.pass_context
def a2a(ctx: click.Context, host: str, port: int, wait_s: float, public_url: str | None) -> None:
    """Serve every agent with a route over A2A, each at /a2a/AGENT/.

    \b
    Agent Card:  GET /a2a/AGENT/.well-known/agent-card.json (public)
    Everything else needs a per-agent bearer token (birddog agent add / agent token);
    its agent session is the mail's from and replyTo.
    """  # noqa: D301 - "\b" is click's mark for a paragraph it must not rewrap
    try:
        import a2a as _sdk  # noqa: F401, PLC0415 - only to say what to install
    except ModuleNotFoundError:
        raise click.ClickException(
            "the A2A server needs the a2a extra: pip install 'birddog[a2a]'"
        ) from None
    from birddog.processes.a2a import run_a2a  # noqa: PLC0415 - keeps --help fast

    run(
        run_a2a(
            settings_of(ctx),
            host=host,
            port=port,
            wait_s=wait_s,
            public_url=public_url,
            announce=announcer(ctx),
        )
    )
