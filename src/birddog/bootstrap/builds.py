"""What each process runs, wired over an open :class:`~birddog.bootstrap.adapters.Adapters`.

The drain daemon, the job worker, the console, the MCP agent tools and the A2A services, and
the listeners, alerts and daemon row around them. Running them is
:mod:`birddog.processes`'s.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from birddog.ports import Listener, TokenBook
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.jobs import JOBS_CHANNEL
from birddog.postgres.wake import WakeListener

if TYPE_CHECKING:
    from aiohttp import web

    from birddog.a2a.server import A2AServices
    from birddog.cancels import CancelHints
    from birddog.console import Sessions
    from birddog.daemon import DrainDaemon
    from birddog.http.alerts import AlertCoalescer
    from birddog.mcp.tools import AgentTools
    from birddog.metrics import WorkerMetrics
    from birddog.service.live import LiveAnnouncer
    from birddog.turns import TurnHandler
    from birddog.worker import Handler, Worker

from birddog.bootstrap.adapters import Adapters

# ---- the drain daemon ----------------------------------------------------------------


def build_wake_listener(
    adapters: Adapters, *, on_reconnect: Callable[[], None] | None = None
) -> WakeListener:
    """``LISTEN birddog_wake`` on a connection of its own (enter it to connect).

    Args:
        adapters: the open adapters (``listen_dsn``).
        on_reconnect: told each time the connection is open again (the database is back).

    Returns:
        The listener, not yet connected.
    """
    return WakeListener(adapters.listen_dsn, on_reconnect=on_reconnect)


def build_alerts(adapters: Adapters) -> AlertCoalescer | None:
    """Dead-letter alerts, gathered per recipient into signed posts, when an alert URL is set.

    Args:
        adapters: the open adapters and their settings.

    Returns:
        The coalescer (``close()`` it when done), or None without ``BIRDDOG_ALERT_URL``.
    """
    settings = adapters.settings
    if not settings.alert_url:
        return None
    from birddog.http.alerts import AlertCoalescer, AlertPoster  # noqa: PLC0415 - the daemon's

    return AlertCoalescer(
        AlertPoster(settings.alert_url, settings.alert_signing_secret(), clock=adapters.clock),
        window_s=settings.alert_coalesce_s,
        clock=adapters.clock,
        on_failure=adapters.metrics.side_task_failed,
    )


def build_daemon_row(adapters: Adapters, *, kind: str) -> PostgresDaemons:
    """This process's row in ``birddog.daemons`` (``birddog status`` lists it).

    Args:
        adapters: the open adapters.
        kind: ``drain`` or ``worker``.

    Returns:
        The row's keeper: ``seen()`` renews it, ``gone()`` removes it.
    """
    return PostgresDaemons(adapters.pool, kind=kind)


def build_daemon(
    adapters: Adapters,
    *,
    listener: Listener,
    alerts: AlertCoalescer | None,
    stop: asyncio.Event,
) -> DrainDaemon:
    """Wire the drain daemon over ``adapters``: the mail room, wakes, alerts for dead letters.

    Args:
        adapters: the open adapters.
        listener: ``LISTEN birddog_wake`` on its own connection.
        alerts: gathers dead letters per recipient into signed alerts, when an alert URL
            is set.
        stop: set to stop the daemon.

    Returns:
        The daemon, ready to ``run``.
    """
    from birddog.daemon import DrainDaemon  # noqa: PLC0415 - the daemon's own

    return DrainDaemon(
        room=adapters.room,
        listener=listener,
        clock=adapters.clock,
        settings=adapters.settings,
        metrics=adapters.metrics,
        on_dead=alerts.dead_letter if alerts is not None else None,
        stop=stop,
    )


# ---- the job worker ------------------------------------------------------------------


def build_jobs_listener(
    adapters: Adapters,
    *,
    on_reconnect: Callable[[], None] | None = None,
    cancel_hints: CancelHints | None = None,
) -> WakeListener:
    """``LISTEN birddog_jobs`` on a connection of its own (enter it to connect).

    Args:
        adapters: the open adapters (``listen_dsn``).
        on_reconnect: told each time the connection is open again (the database is back).
        cancel_hints: told every notification, so a running job hears its cancellation
            at once (give the same to :func:`build_worker`).

    Returns:
        The listener, not yet connected.
    """
    return WakeListener(
        adapters.listen_dsn,
        channel=JOBS_CHANNEL,
        on_reconnect=on_reconnect,
        on_notify=None if cancel_hints is None else cancel_hints.heard,
    )


def build_worker(
    adapters: Adapters,
    handler: Handler | TurnHandler,
    *,
    listener: Listener,
    queues: Sequence[str] | None,
    stop: asyncio.Event,
    metrics: WorkerMetrics | None = None,
    agents: Sequence[str] | None = None,
    cancel_hints: CancelHints | None = None,
    batch: int = 1,
    live: bool = False,
) -> Worker:
    """Wire a job worker over the adapters' job store.

    Args:
        adapters: the open adapters.
        handler: the user's async handler.
        listener: ``LISTEN birddog_jobs`` on its own connection.
        queues: these queues (session ids); with ``agents``, None or empty for all.
        stop: set to stop the worker.
        metrics: the worker's metrics (default: a registry of its own).
        agents: every session of these agents as well.
        cancel_hints: the hints ``listener`` hears (:func:`build_jobs_listener`).
        batch: the most jobs of one session one turn takes.
        live: the worker serves a live session (``worker --live``; its turns ran live).

    Returns:
        The worker, ready to ``run``.
    """
    from birddog.worker import Worker  # noqa: PLC0415 - the worker's own

    settings = adapters.settings
    return Worker(
        jobs=adapters.jobs,
        handler=handler,
        listener=listener,
        queues=queues,
        agents=agents,
        concurrency=settings.worker_concurrency,
        handler_timeout_s=settings.handler_timeout_s,
        lease_s=settings.job_lease_s,
        shutdown_grace_s=settings.shutdown_grace_s,
        stop=stop,
        metrics=metrics,
        cancel_hints=cancel_hints,
        batch=batch,
        live=live,
    )


# ---- the operator's console ----------------------------------------------------------


def build_console(adapters: Adapters, *, sessions: Sessions, read_only: bool) -> web.Application:
    """Wire the operator's console over the adapters.

    Args:
        adapters: the open adapters.
        sessions: the start-up token and the sessions it opens.
        read_only: serve the pages only, no action.

    Returns:
        The web application, to serve on 127.0.0.1.
    """
    from birddog.console import make_app  # noqa: PLC0415 - the console's own

    return make_app(
        admin=adapters.admin,
        outbox=adapters.replay,
        routes=adapters.routes,
        jobs=adapters.jobs,
        clock=adapters.clock,
        sessions=sessions,
        read_only=read_only,
    )


# ---- the MCP server -----------------------------------------------------------------

MCP_POOL_SIZE = 10
"""The MCP server's pool: a waiting tool call holds none of its connections."""


def build_agent_tools(adapters: Adapters) -> AgentTools:
    """The MCP tools over the adapters (one set per server process).

    Args:
        adapters: the open adapters.

    Returns:
        The agent tools; ``close()`` it when the server stops.
    """
    from birddog.mcp.tools import AgentTools, Services  # noqa: PLC0415 - the MCP server only

    live = build_live_announcer(adapters, holder=f"mcp:{socket.gethostname()}:{os.getpid()}")
    return AgentTools(
        Services(
            sender=adapters.sender,
            mailbox=adapters.mailbox,
            asks=adapters.asks,
            jobs=adapters.jobs,
            admin=adapters.admin,
            routes=adapters.routes,
            notices=adapters.notices,
            lease_s=adapters.settings.job_lease_s,
            max_content_bytes=adapters.settings.max_content_bytes,
            live=live,
        )
    )


def build_live_announcer(adapters: Adapters, *, holder: str) -> LiveAnnouncer:
    """The live sessions a process announces, as ``holder`` (its claims' worker id).

    Args:
        adapters: the open adapters.
        holder: the process's claimer id.

    Returns:
        The announcer; the process beats it (:meth:`LiveAnnouncer.beat`) and leaves at
        its end (:meth:`LiveAnnouncer.leave_all`).
    """
    from birddog.service.live import LiveAnnouncer  # noqa: PLC0415 - live processes only

    return LiveAnnouncer(adapters.live, holder=holder)


# ---- the HTTP endpoints' callers ---------------------------------------------------------


def token_book(adapters: Adapters) -> TokenBook:
    """Who each bearer token of the HTTP endpoints is (MCP over HTTP, A2A).

    Args:
        adapters: the open adapters.

    Returns:
        The per-agent tokens of ``birddog agent add`` / ``birddog agent token``.
    """
    return adapters.agents


# ---- the A2A endpoint -------------------------------------------------------------------

A2A_POOL_SIZE = 10
"""The A2A server's pool: a waiting ``SendMessage`` holds none of its connections."""


def a2a_services(adapters: Adapters, *, wait_s: float) -> A2AServices:
    """What ``birddog a2a`` calls, over the adapters.

    Args:
        adapters: the open adapters.
        wait_s: how long a blocking ``SendMessage`` waits for a terminal state.

    Returns:
        The services of the A2A request handler.
    """
    from birddog.a2a.server import A2AServices  # noqa: PLC0415 - the A2A server only
    from birddog.postgres.push_routes import PostgresPushRoutes  # noqa: PLC0415
    from birddog.postgres.tasks import PostgresSentJobs  # noqa: PLC0415

    return A2AServices(
        sender=adapters.sender,
        sent=PostgresSentJobs(adapters.pool, max_content_bytes=adapters.settings.max_content_bytes),
        routes=PostgresPushRoutes(
            adapters.pool, push_egress=adapters.routes.push_egress, box=adapters.routes.box
        ),
        tokens=token_book(adapters),
        wait_s=wait_s,
        max_content_bytes=adapters.settings.max_content_bytes,
        push_egress=adapters.routes.push_egress,
    )
