"""Serving an aiohttp app on loopback: the probe's and demo's inboxes, metrics, tests."""

from __future__ import annotations

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
