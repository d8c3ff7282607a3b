"""``birddog listen AGENT``: a local inbox that prints each of AGENT's replies."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

import click

from birddog.cli import ConfigurationError, agent_id_argument, announce, main, run, with_services

if TYPE_CHECKING:
    from datetime import datetime

    from birddog.ports import Route
    from birddog.service.entry import Services


@main.command()
@click.argument("agent_id", callback=agent_id_argument)
@click.option("--port", type=click.IntRange(1, 65535), default=8080, help="The port to listen on.")
@click.option("--host", default="127.0.0.1", help="The address to listen on.")
@click.option(
    "--secret",
    default=None,
    help="The route's whsec_... secret; unset: read from AGENT_ID's route.",
)
@click.option(
    "--count", type=click.IntRange(min=1), default=None, help="Exit after this many replies."
)
@click.pass_context
def listen(
    ctx: click.Context,
    agent_id: str,
    port: int,
    host: str,
    secret: str | None,
    count: int | None,
) -> None:
    """Receive AGENT_ID's replies on a local inbox: verify, acknowledge, print each one."""
    from birddog.listen import Listening  # noqa: PLC0415 - keeps --help fast
    from birddog.listen import listen as serve_inbox  # noqa: PLC0415
    from birddog.runtime import stop_on_signals  # noqa: PLC0415

    secrets = [secret] if secret is not None else _route_secrets(ctx, agent_id)

    def listening(where: Listening) -> None:
        announce(
            f"listening for {where.agent_id}'s replies on {where.url} (any path); Ctrl-C to stop"
        )

    async def go() -> int:
        try:
            with stop_on_signals() as stop:
                return await serve_inbox(
                    agent_id,
                    secrets,
                    host=host,
                    port=port,
                    stop=stop,
                    echo=click.echo,
                    on_listening=listening,
                    count=count,
                )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(
                    f"{host}:{port} is already in use; choose another --port "
                    "(and point the route there: birddog route update AGENT --url ...)"
                ) from exc
            raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc

    run(go())


def _route_secrets(ctx: click.Context, agent_id: str) -> list[str]:
    """The signing secrets of AGENT_ID's route, or a one-line error saying what is missing."""
    from birddog.core.text import printable  # noqa: PLC0415 - keeps --help fast

    async def lookup(adapters: Services) -> tuple[Route | None, datetime]:
        return await adapters.routes.route(agent_id), adapters.clock.now()

    route, now = with_services(ctx, lookup)
    shown = printable(agent_id)
    if route is None:
        raise click.ClickException(
            f"no route for agent {shown!r}: add one first "
            f"(birddog route add {shown} http://127.0.0.1:8080/inbox), or give --secret"
        )
    if route.kind != "http":
        raise click.ClickException(
            f"{shown!r} takes its replies in its mailbox; read them with birddog inbox {shown}"
        )
    return route.signing_secrets(now)
