"""Runs the operator's console (``birddog console``): the one file that runs it.

:func:`run_console` opens the adapters, serves the console (wired by
:func:`birddog.bootstrap.build_console`) on 127.0.0.1 and announces the URL that signs a
browser in, until SIGTERM/SIGINT.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from birddog.bootstrap import Announce, build_console, open_adapters
from birddog.console import Sessions
from birddog.core.errors import InvalidSetting
from birddog.http.server import serve
from birddog.processes.sides import ProcessTasks
from birddog.runtime import stop_on_signals
from birddog.settings import Settings

log = structlog.get_logger("birddog.processes.console")

__all__ = ["run_console"]


async def run_console(
    settings: Settings, *, port: int, read_only: bool = False, announce: Announce
) -> None:
    """Serve the console on 127.0.0.1 until SIGTERM/SIGINT; ``announce`` gets its URL.

    The URL carries the token that signs a browser in, so only who can read this
    process's output can use the console.

    Args:
        settings: the settings.
        port: the port on 127.0.0.1 (0 picks a free one).
        read_only: serve the pages only, no action.
        announce: told the URL to open (with the token) and the embedded server's DSN.

    Raises:
        InvalidSetting: the port cannot be listened on (taken, or not allowed).
    """
    sessions = Sessions()
    with stop_on_signals() as stop:
        async with (
            open_adapters(settings, announce=announce, pool_size=4) as adapters,
            ProcessTasks(stop=stop) as sides,
        ):
            app = build_console(adapters, sessions=sessions, read_only=read_only)
            url, bound = await sides.enter(_serving(app, port=port))
            mode = " (read-only)" if read_only else ""
            announce(f"BirdDog console{mode}: {url}/?token={sessions.token}")
            log.info("console_started", port=bound, read_only=read_only)
            await stop.wait()


@contextlib.asynccontextmanager
async def _serving(app: web.Application, *, port: int) -> AsyncIterator[tuple[str, int]]:
    """Serve ``app`` on 127.0.0.1 until exit; yields its base URL and the bound port."""
    try:
        runner, url = await serve(app, port=port, shutdown_timeout=1.0)
    except OSError as exc:
        raise InvalidSetting(
            f"the console cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; "
            "choose another port with --port (or BIRDDOG_CONSOLE_PORT)",
            field="BIRDDOG_CONSOLE_PORT",
        ) from exc
    try:
        yield url, runner.addresses[0][1]
    finally:
        await runner.cleanup()
