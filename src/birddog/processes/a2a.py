"""Runs the A2A server (``birddog a2a``): the one file that runs it.

:func:`run_a2a` opens the adapters, builds the SDK's application over the mail room
(:func:`birddog.a2a.app.a2a_app`) and serves it on ``host`` (127.0.0.1 by default)
until SIGTERM/SIGINT. Beside serving it forwards this host's spool
(:func:`~birddog.processes.sides.forward_spool`), where a message the database could not
take is kept.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version

import structlog

from birddog.bootstrap import A2A_POOL_SIZE, Announce, a2a_services, open_adapters
from birddog.http.server import listening_socket, serve_asgi, socket_url
from birddog.processes.sides import ProcessTasks, forward_spool, warn_if_push_egress_open
from birddog.runtime import stop_on_signals
from birddog.settings import Settings

log = structlog.get_logger("birddog.processes.a2a")

__all__ = ["run_a2a"]


async def run_a2a(
    settings: Settings,
    *,
    host: str,
    port: int,
    wait_s: float,
    public_url: str | None,
    announce: Announce,
) -> None:
    """Serve every agent with a route over A2A until SIGTERM/SIGINT.

    Args:
        settings: the settings.
        host: the address to listen on.
        port: the port (0 picks a free one).
        wait_s: how long a blocking ``SendMessage`` waits for a terminal state.
        public_url: where callers reach this server, for the Agent Cards (None: the
            address it listens on).
        announce: told the URL and the embedded server's DSN.
    """
    from birddog.a2a.app import a2a_app  # noqa: PLC0415 - an extra

    sock = listening_socket(host, port)
    url = public_url or socket_url(sock)
    with stop_on_signals() as stop:
        async with (
            open_adapters(settings, announce=announce, pool_size=A2A_POOL_SIZE) as adapters,
            ProcessTasks(stop=stop) as sides,
        ):
            services = a2a_services(adapters, wait_s=wait_s)
            warn_if_push_egress_open(settings, announce)
            app = a2a_app(services, public_url=url, version=version("birddog"))

            def ready(bound: str) -> None:
                log.info("a2a_listening", url=bound)
                announce(
                    f"BirdDog A2A server: {url}/a2a/AGENT/ "
                    "(cards at .../.well-known/agent-card.json)"
                )

            # The process's one listening connection says when the database is back.
            with adapters.notices.reconnects(asyncio.Event()) as back:
                forward_spool(sides, services.sender, every_s=settings.spool_forward_s, back=back)
                await serve_asgi(app, sock, ready=ready, stop=stop)
