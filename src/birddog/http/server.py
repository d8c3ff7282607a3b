"""Serving on loopback: aiohttp apps and the protocol SDKs' ASGI apps.

aiohttp apps are the probe's and demo's inboxes, metrics and tests; the ASGI apps are
``birddog mcp --http`` and ``birddog a2a`` (Starlette, from the ``mcp`` and ``a2a-sdk``
SDKs, served by uvicorn).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web


async def serve(
    app: web.Application, *, host: str = "127.0.0.1", port: int = 0, **runner_options: Any
) -> tuple[web.AppRunner, str]:
    """Start serving ``app`` and return its runner and base URL.

    Args:
        app: the application.
        host: the address to bind; loopback unless the operator says otherwise.
        port: the port; 0 picks a free one.
        runner_options: passed to :class:`aiohttp.web.AppRunner` (``access_log`` is off
            unless given).

    Returns:
        The runner (``await runner.cleanup()`` stops it) and ``http://host:port``.
    """
    runner_options.setdefault("access_log", None)
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound: int = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}"


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port), for :func:`serve_asgi`.

    Bound before the app is built, so an app that must know its own port (allowed Host
    headers, its Agent Card's URLs) gets the one it will serve on.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def socket_url(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


async def serve_asgi(
    app: Any,
    sock: socket.socket,
    *,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve an ASGI application (the protocol SDKs' Starlette apps) until ``stop`` is set.

    Uvicorn's own ``serve()`` would take SIGTERM and SIGINT over; the process's stop event
    decides here, so its steps are run one by one. Open requests get five seconds to
    finish once ``stop`` is set.

    Args:
        app: the ASGI application (its lifespan is run).
        sock: the bound socket (:func:`listening_socket`); closed when serving ends.
        ready: told ``http://host:port`` once the server listens.
        stop: set to stop serving (None: serve until cancelled).
    """
    import uvicorn  # noqa: PLC0415 - the protocol SDKs' HTTP server, an extra's dependency

    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    config.load()
    server.lifespan = config.lifespan_class(config)
    try:
        await server.startup(sockets=[sock])
        if server.should_exit:
            return
        if ready is not None:
            ready(socket_url(sock))
        serving = asyncio.create_task(server.main_loop())
        try:
            if stop is None:
                await serving
            else:
                waiting = asyncio.create_task(stop.wait())
                await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
        finally:
            server.should_exit = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(serving), 5)
            await server.shutdown(sockets=[sock])
    finally:
        sock.close()
