"""Runs the drain daemon (``birddog run``): the one file that runs it.

:func:`run_daemon` opens the adapters (waiting for the database), then holds the ``LISTEN``
connection, the metrics server and this process's row in ``birddog.daemons``, prints the
ready line, and runs the drain loop (:class:`birddog.daemon.DrainDaemon`, wired by
:func:`birddog.bootstrap.build_daemon`) with its side tasks beside it
(:class:`~birddog.processes.sides.ProcessTasks`): heartbeat, backlog gauges, the last
hour's turn gauges (every runner's turns, live sessions' included), the lease reaper,
the queued-job reaper, the spool's forwarder and, when retention is set, prune.
If a side task dies, the daemon stops loudly. With ``once`` the spool is forwarded first.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Final, NamedTuple

import structlog

from birddog.bootstrap import (
    HEARTBEAT_S,
    Adapters,
    Announce,
    StoppedBeforeStart,
    build_alerts,
    build_daemon,
    build_daemon_row,
    build_wake_listener,
    open_adapters,
)
from birddog.core.errors import BirdDogError
from birddog.core.turns import TURNS_WINDOW_S
from birddog.ports import DaemonRow
from birddog.processes.sides import (
    QUEUE_HEADS_CHECK_S,
    ProcessTasks,
    forward_spool,
    mark_stopped,
    metrics_server,
    reap_every_s,
    reap_expired_jobs,
    warn_if_push_egress_open,
)
from birddog.runtime import stop_on_signals
from birddog.settings import Settings

log = structlog.get_logger("birddog.processes.daemon")

__all__ = ["TURN_GAUGES_S", "DaemonRun", "ready_line", "run_daemon"]

TURN_GAUGES_S: Final = 15.0
"""How often the daemon refreshes its turn gauges (one query over the last hour's jobs)."""


class DaemonRun(NamedTuple):
    """What a drain daemon run did.

    Attributes:
        moved: what its stores did, by outcome (``delivered``, ``retried``, ``deferred``,
            ``dead``).
        left: with ``once``, what the outbox still held when it returned (``pending``,
            ``held``, ``in_flight``, ``next_due_at``; see ``PostgresOutbox.counts``), or None.
    """

    moved: dict[str, int]
    left: dict[str, Any] | None = None


async def run_daemon(
    settings: Settings,
    *,
    once: bool = False,
    migrate_first: bool = False,
    announce: Announce | None = None,
) -> DaemonRun:
    """Run the drain daemon until SIGTERM/SIGINT (or, with ``once``, until nothing is due).

    Args:
        settings: the settings.
        once: drain until nothing is due, then return (no side tasks, no metrics).
        migrate_first: upgrade the schema first.
        announce: told the ready line once the daemon is up (see :func:`ready_line`).

    Returns:
        What its deliveries did and, with ``once``, what it left in the outbox.

    Raises:
        InvalidSetting: the metrics port is taken (the message names the setting).
        DatabaseRefused: the database turned the connection away for good.
    """
    warn_if_push_egress_open(settings, announce)
    with stop_on_signals() as stop:
        try:
            async with open_adapters(
                settings, migrate_first=migrate_first, wait_until=stop
            ) as adapters:
                return await _drain_until_stopped(adapters, stop, once=once, announce=announce)
        except StoppedBeforeStart:
            log.info("daemon_stopped_before_start")
    return DaemonRun({})


async def _drain_until_stopped(
    adapters: Adapters, stop: asyncio.Event, *, once: bool, announce: Announce | None
) -> DaemonRun:
    settings = adapters.settings
    alerts = build_alerts(adapters)
    row = build_daemon_row(adapters, kind="drain")
    try:
        async with ProcessTasks(stop=stop, on_error=adapters.metrics.side_task_failed) as sides:
            back = asyncio.Event()
            listener = await sides.enter(build_wake_listener(adapters, on_reconnect=back.set))
            daemon = build_daemon(adapters, listener=listener, alerts=alerts, stop=stop)
            if once:
                await _forward_first(adapters)
                await daemon.run(once=True)
                return DaemonRun(dict(daemon.moved), await adapters.outbox.counts())
            metrics_url = None
            if settings.metrics_port:
                metrics_url = await sides.enter(
                    metrics_server(settings, adapters.metrics, lambda: daemon.healthy)
                )
            if announce is not None:
                announce(ready_line(adapters, metrics_url=metrics_url))
            _start_side_tasks(sides, adapters, row=row, back=back)
            # Marked stopped once the heartbeat has ended: a beat after the mark would bring
            # the row back, and the daemon would read as running.
            sides.at_end(lambda: mark_stopped(row))
            await daemon.run()
            return DaemonRun(dict(daemon.moved))
    finally:
        if alerts is not None:
            await alerts.close(timeout_s=settings.shutdown_grace_s)


async def _forward_first(adapters: Adapters) -> None:
    """Forward the spool once before a ``--once`` drain; a failure is logged, not fatal."""
    try:
        await adapters.sender.forward_waiting()
    except BirdDogError as exc:
        log.warning("spool_forward_failed", error=type(exc).__name__)


def _start_side_tasks(
    sides: ProcessTasks, adapters: Adapters, *, row: DaemonRow, back: asyncio.Event
) -> None:
    """The daemon's side tasks: heartbeat, gauges, turn gauges, reapers, the spool, prune (if set).

    ``back`` is set when the wake listener reconnects: the spool is forwarded then.
    """
    settings = adapters.settings

    async def heartbeat() -> None:
        await row.seen()
        if forgotten := await adapters.routes.forget_previous_secrets():
            log.info("previous_secrets_forgotten", routes=forgotten)

    async def gauges() -> None:
        counts = await adapters.outbox.counts()
        adapters.metrics.observe_backlog(
            pending=int(counts.get("pending", 0)),
            oldest=counts.get("oldest_pending_at"),
            now=adapters.clock.now(),
        )

    async def turn_gauges() -> None:
        since = adapters.clock.now() - timedelta(seconds=TURNS_WINDOW_S)
        adapters.metrics.observe_turns(await adapters.jobs.turns_since(since))

    async def reap() -> None:
        await reap_expired_jobs(adapters.jobs)

    async def bounce() -> None:
        for job_id, _ in await adapters.jobs.cancel_queued_too_long():
            log.warning("job_queued_too_long", job_id=job_id, outcome="cancelled")

    policy = settings.retention()

    async def prune() -> None:
        report = await adapters.retention.prune(policy)
        if report.total:
            log.info(
                "pruned",
                receipts=report.receipts,
                jobs=report.jobs,
                dead_letters=report.dead_letters,
                mailbox=report.mailbox,
            )

    every_s = reap_every_s(settings.job_lease_s)
    sides.every("heartbeat", HEARTBEAT_S, heartbeat, finish=True)
    sides.every("gauges", HEARTBEAT_S, gauges)
    sides.every("turn_gauges", TURN_GAUGES_S, turn_gauges)
    sides.every("reaper", every_s, reap)
    sides.every("queued_reaper", every_s, bounce)
    forward_spool(sides, adapters.sender, every_s=settings.spool_forward_s, back=back)
    sides.every("queue_heads", QUEUE_HEADS_CHECK_S, adapters.jobs.repair_queue_heads)
    if not policy.empty:
        sides.every("prune", settings.prune_every_s, prune)


def ready_line(adapters: Adapters, *, metrics_url: str | None) -> str:
    """The one line a daemon prints when it is up: metrics, data, how to look inside.

    Args:
        adapters: the open adapters.
        metrics_url: where ``/metrics`` is served, None when metrics are off.

    Returns:
        One line for the terminal.
    """
    metrics = f"metrics at {metrics_url}" if metrics_url else "metrics off"
    return f"birddog is ready: {metrics}; {adapters.data_location()}; look inside: birddog psql"
