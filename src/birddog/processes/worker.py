"""Runs the job worker (``birddog worker``): the one file that runs it.

:func:`run_worker` opens the adapters (waiting for the database), holds the ``LISTEN
birddog_jobs`` connection and the worker's metrics server, and runs the worker
(:class:`birddog.worker.Worker`, wired by :func:`birddog.bootstrap.build_worker`) with its
side tasks beside it (:class:`~birddog.processes.sides.ProcessTasks`): the heartbeat of its
row in ``birddog.daemons``, the lease reaper, the queue gauges, the spool's forwarder and,
with ``--live``, the beats of the live session it serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

import structlog

from birddog.bootstrap import (
    HEARTBEAT_S,
    Announce,
    StoppedBeforeStart,
    build_daemon_row,
    build_jobs_listener,
    build_live_announcer,
    build_worker,
    open_adapters,
)
from birddog.cancels import CancelHints
from birddog.core.digests import DigestWait
from birddog.core.errors import StoreUnavailable
from birddog.core.mail import AgentAddress
from birddog.metrics import WorkerMetrics
from birddog.ports import Clock, Digests, JobBacklog
from birddog.processes.sides import (
    QUEUE_HEADS_CHECK_S,
    ProcessTasks,
    forward_spool,
    mark_stopped,
    metrics_server,
    reap_every_s,
    reap_expired_jobs,
)
from birddog.runtime import stop_on_signals
from birddog.settings import Settings
from birddog.spawn import end_leftover_turns
from birddog.turns import TurnHandler
from birddog.worker import Handler

log = structlog.get_logger("birddog.processes.worker")

__all__ = ["QUEUE_GAUGES_S", "WorkerRun", "observe_queues", "run_worker"]

QUEUE_GAUGES_S = 5.0
"""How often a worker refreshes its queue gauges (one query over the queued jobs)."""


class WorkerRun(NamedTuple):
    """What a worker run did.

    Attributes:
        summary: how the jobs it handled ended, by outcome (and ``requeued``).
        left: with ``once``, the jobs still queued in its queues when it stopped (None:
            not known, or not run with ``once``).
        digests: with ``once``, the informational jobs of its queues left waiting for their
            digest (None: not known, or not run with ``once``).
    """

    summary: dict[str, int]
    left: int | None = None
    digests: DigestWait | None = None


async def run_worker(
    settings: Settings,
    handler: Handler | TurnHandler,
    *,
    queues: Sequence[str] | None = None,
    once: bool = False,
    announce: Announce | None = None,
    agents: Sequence[str] | None = None,
    batch: int = 1,
    live: AgentAddress | None = None,
) -> WorkerRun:
    """Run agent jobs with ``handler`` until SIGTERM/SIGINT (or, with ``once``, idle).

    Args:
        settings: the settings.
        handler: the user's async handler.
        queues: these queues (session ids); with ``agents``, None or empty for all.
        once: run queued jobs, then return (no metrics server).
        announce: told the embedded server's DSN.
        agents: every session of these agents as well.
        batch: the most jobs of one session one turn takes (:mod:`birddog.turns`).
        live: announce this agent session as live while the worker runs, as its holder
            (``worker --live``): its jobs are this worker's before any other's.

    Returns:
        How the jobs this worker handled ended and, with ``once``, what it left queued.

    Raises:
        InvalidSetting: the worker's metrics port is taken (the message names the setting).
    """
    result = WorkerRun({})
    metrics = WorkerMetrics()
    with stop_on_signals() as stop:
        try:
            async with (
                open_adapters(settings, announce=announce, wait_until=stop) as adapters,
                ProcessTasks(stop=stop, on_error=metrics.side_task_failed) as sides,
            ):
                back = asyncio.Event()  # the listener reconnected: forward the spool
                # A cancellation recorded on a job of ours is heard at once (birddog.cancels).
                hints = CancelHints()
                listener = await sides.enter(
                    build_jobs_listener(adapters, on_reconnect=back.set, cancel_hints=hints)
                )
                worker = build_worker(
                    adapters,
                    handler,
                    listener=listener,
                    queues=queues,
                    agents=agents,
                    stop=stop,
                    metrics=metrics,
                    cancel_hints=hints,
                    batch=batch,
                    live=live is not None,
                )
                # No job runs again here while a turn of it, whose worker died, still does.
                await end_leftover_turns(adapters.jobs, grace_s=settings.kill_grace_s)
                if not once and settings.worker_metrics_port:
                    url = await sides.enter(
                        metrics_server(settings, metrics, lambda: metrics.healthy, worker=True)
                    )
                    log.info("worker_metrics_serving", url=url)
                row = build_daemon_row(adapters, kind="worker")

                async def gauges() -> None:
                    await observe_queues(
                        adapters.jobs, metrics, queues=queues, agents=agents, clock=adapters.clock
                    )

                async def reap() -> None:
                    await reap_expired_jobs(adapters.jobs)

                # One beat before any work: a --once run may end before the side task's first.
                await row.seen()
                sides.every("heartbeat", HEARTBEAT_S, row.seen, finish=True)
                # A worker-only deployment still recovers jobs whose worker crashed, and so
                # frees their queues; one index probe when none expired.
                sides.every("reaper", reap_every_s(settings.job_lease_s), reap)
                sides.every("gauges", QUEUE_GAUGES_S, gauges)
                forward_spool(sides, adapters.sender, every_s=settings.spool_forward_s, back=back)
                sides.every("queue_heads", QUEUE_HEADS_CHECK_S, adapters.jobs.repair_queue_heads)
                if live is not None:
                    # Live while the worker runs; left (the last word but the row's) before
                    # the row is marked stopped.
                    announcer = build_live_announcer(adapters, holder=worker.worker_id)
                    await announcer.hold(live)
                    sides.every("live_sessions", announcer.every_s, announcer.beat, finish=True)
                    sides.at_end(announcer.leave_all)
                # The row is marked stopped by ProcessTasks once the heartbeat has ended: a beat
                # after the mark would bring the row back, and the worker would read healthy.
                sides.at_end(lambda: mark_stopped(row))
                try:
                    await worker.run(once=once)
                finally:
                    result = WorkerRun(worker.summary(), worker.left)
                if once:
                    waiting = await _digests_left(adapters.routes.digests, queues, agents)
                    result = result._replace(digests=waiting)
        except StoppedBeforeStart:
            log.info("worker_stopped_before_start")
    return result


async def _digests_left(
    digests: Digests, queues: Sequence[str] | None, agents: Sequence[str] | None
) -> DigestWait | None:
    """The informational jobs of the worker's queues left waiting for their digest."""
    try:
        return await digests.waiting(queues=queues or None, agents=agents or None)
    except StoreUnavailable as exc:
        log.warning("database_unavailable", error=type(exc).__name__, reason=str(exc))
        return None


async def observe_queues(
    jobs: JobBacklog,
    metrics: WorkerMetrics,
    *,
    queues: Sequence[str] | None,
    clock: Clock,
    agents: Sequence[str] | None = None,
) -> None:
    """Refresh a worker's queue gauges: jobs waiting in the queues it serves, oldest's age.

    One query; a failure marks the database down (``/healthz`` answers 503) and is raised
    for the side task to log and retry.

    Args:
        jobs: the job store.
        metrics: the worker's metrics.
        queues: the queues the worker serves; with ``agents``, None or empty for every
            queue but the reserved ones.
        clock: the time the age is measured at.
        agents: the agents the worker serves, every session of theirs.

    Raises:
        StoreUnavailable: the database could not be reached.
    """
    try:
        queued, oldest = await jobs.queued_backlog(queues=queues or None, agents=agents or None)
    except StoreUnavailable:
        metrics.database(up=False)
        raise
    metrics.database(up=True)
    metrics.observe_queue(queued=queued, oldest=oldest, now=clock.now())
