"""The one way a process runs what goes on beside its main loop: its side tasks.

Every process (the drain daemon, the worker, the console, and those to come) holds its
side tasks in one :class:`ProcessTasks`, under one :class:`asyncio.TaskGroup`::

    async with ProcessTasks(stop=stop, on_error=metrics.side_task_failed) as sides:
        listener = await sides.enter(build_wake_listener(adapters))
        url = await sides.enter(metrics_server(settings, metrics, healthy))
        sides.every("heartbeat", HEARTBEAT_S, heartbeat)
        sides.every("reaper", reap_every_s, reap)
        await main_loop(listener)

- :meth:`ProcessTasks.every`: a periodic task (heartbeat, gauges, reapers, prune). A failure
  is logged (``side_task_failed``), counted (``on_error``, the metrics'
  ``side_task_failed``) and retried with backoff (:func:`birddog.runtime.every`); it
  never ends the process.
- :meth:`ProcessTasks.run`: a task that lasts as long as the process (a server, a
  forwarder). If it dies, the process stops loudly: the main loop is cancelled and the
  error (logged ``side_task_died``) is raised out of the ``async with``.
- :meth:`ProcessTasks.enter`: something the process holds while it runs (the ``LISTEN``
  connection, the metrics server), closed after the tasks have ended, last one first.
- :meth:`ProcessTasks.at_end`: the process's last word (its row marked stopped), said once
  every side task has ended, so that no heartbeat can come after it.

When the body of the ``async with`` ends, the periodic tasks started with ``finish=True``
(the heartbeat) end their run in progress, if any, and stop (within
:data:`LAST_RUN_S`); then every side task is cancelled and awaited, then the last words
are said, then what was entered is closed. A heartbeat is never cancelled mid-statement:
a statement whose caller was cancelled may still commit on the server after the last
word, and bring the row back. An error of the body itself goes up unchanged.

Side actions more than one process runs live here too (:func:`reap_expired_jobs`,
:func:`forward_spool`, :func:`metrics_server`, :func:`warn_if_push_egress_open`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

import structlog

from birddog.core.errors import InvalidSetting
from birddog.metrics import Registry, start_server
from birddog.ports import DaemonRow, JobReaper
from birddog.runtime import error_class, every
from birddog.service.mail import MailService
from birddog.settings import Settings

log = structlog.get_logger("birddog.processes")

T = TypeVar("T")

LAST_RUN_S = 10.0
"""At a stop, how long a ``finish=True`` task's run in progress may take to end (a beat is
one or two short statements); one still running then is cancelled."""


class ProcessTasks:
    """Named side tasks of one process, under one :class:`asyncio.TaskGroup`.

    Use as an async context manager around the process's main loop (see the module).

    Args:
        stop: the process's stop event; periodic tasks end when it is set.
        on_error: told a task's name after each failure of a periodic task (a metrics
            counter).

    Attributes:
        names: the names of the tasks started, in order.
    """

    def __init__(
        self, *, stop: asyncio.Event, on_error: Callable[[str], None] | None = None
    ) -> None:
        self.stop = stop
        self.on_error = on_error
        self.names: list[str] = []
        self._group = asyncio.TaskGroup()
        self._held = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._finishing: list[asyncio.Task[None]] = []
        self._ending = asyncio.Event()
        self._last: list[Callable[[], Awaitable[None]]] = []

    async def __aenter__(self) -> Self:
        await self._held.__aenter__()
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The tasks that must not be cut mid-run end their run, then stop, before the rest
        # are cancelled (and before the last words).
        self._ending.set()
        if self._finishing:
            await asyncio.wait(self._finishing, timeout=LAST_RUN_S)
        for task in self._tasks:
            task.cancel()
        try:
            try:
                if exc_type is None or issubclass(exc_type, asyncio.CancelledError):
                    # A cancellation may be the group's own (a side task died): it turns it
                    # into the side task's error.
                    await self._group.__aexit__(exc_type, exc, tb)
                else:
                    # The body's own error (a port taken, say) goes up as it is, not
                    # wrapped in an exception group; one from a side task still wins.
                    await self._group.__aexit__(None, None, None)
            finally:
                # Every side task has ended (or the group failed): nothing can speak after.
                for action in self._last:
                    await action()
        except BaseException as failure:
            await self._held.__aexit__(type(failure), failure, failure.__traceback__)
            raise
        await self._held.__aexit__(exc_type, exc, tb)

    def every(
        self,
        name: str,
        seconds: float,
        action: Callable[[], Awaitable[Any]],
        *,
        kick: asyncio.Event | None = None,
        finish: bool = False,
    ) -> None:
        """Run ``action`` every ``seconds`` until the process stops; no failure ends it.

        Args:
            name: the task's name, for logs and metrics (``heartbeat``, ``reaper``).
            seconds: the pause between runs.
            action: one run of the task.
            kick: set to run it again at once (the pause, or a backoff, ends).
            finish: at the end, let a run in progress finish rather than cancel it (the
                heartbeat: see the module); it runs until the body of the ``async with``
                ends, and beats on while the process finishes its work after a stop.
        """
        task = self._start(
            name,
            every(
                seconds,
                action,
                stop=self._ending if finish else self.stop,
                name=name,
                on_error=self.on_error,
                kick=kick,
            ),
        )
        if finish:
            self._finishing.append(task)

    def run(self, name: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` beside the main loop; if it raises, the process stops loudly.

        Args:
            name: the task's name, for the log.
            work: the task; it may return early (nothing else stops then).
        """

        async def watched() -> None:
            try:
                await work()
            except Exception as exc:
                # Raised on at once: the traceback is shown once, where it ends the process.
                log.error("side_task_died", task=name, error=error_class(exc))  # noqa: TRY400
                raise

        self._start(name, watched())

    async def enter(self, context: contextlib.AbstractAsyncContextManager[T]) -> T:
        """Enter ``context`` now and keep it until the side tasks have ended.

        Args:
            context: e.g. the ``LISTEN`` connection, the metrics server.

        Returns:
            What entering it gave.
        """
        return await self._held.enter_async_context(context)

    def at_end(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action`` once every side task has ended, before what was entered closes.

        Args:
            action: the process's last word (e.g. marking its row stopped); it must not
                raise (:func:`mark_stopped` never does).
        """
        self._last.append(action)

    def _start(self, name: str, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        self.names.append(name)
        task = self._group.create_task(coroutine, name=name)
        self._tasks.append(task)
        return task


QUEUE_HEADS_CHECK_S = 60.0
"""How often the daemon and each worker compare the queue heads with the jobs (one pass over
the queued and running jobs; it repairs only what SQL written by hand broke)."""


REAP_EVERY_S = 2.0
"""The lease reaper runs at least this often. A lease is the claimer's (a worker's
``BIRDDOG_JOB_LEASE_S``, an MCP server's tasks, a probe's timeout), not this process's, so a
reaper paced by its own lease alone would find a shorter one late; one index probe when
none expired."""


def reap_every_s(job_lease_s: float) -> float:
    """How often a process runs the lease reaper: half its own lease, at most :data:`REAP_EVERY_S`.

    Args:
        job_lease_s: this process's ``BIRDDOG_JOB_LEASE_S``.
    """
    return min(max(0.1, job_lease_s / 2), REAP_EVERY_S)


async def reap_expired_jobs(jobs: JobReaper) -> None:
    """The lease reaper: give back, or settle, running jobs whose worker is gone.

    Args:
        jobs: the job store.
    """
    for job_id, what in await jobs.recover_expired():
        log.warning("job_lease_expired", job_id=job_id, outcome=what)


def forward_spool(
    sides: ProcessTasks, sender: MailService, *, every_s: float, back: asyncio.Event | None = None
) -> None:
    """Forward this host's local spool at start, after every reconnect, and every ``every_s``.

    An empty spool (or none) costs a look at one file. ``back`` is set by the process's
    listening connection each time it is open again after the database was away (see
    :class:`~birddog.postgres.wake.WakeListener`'s ``on_reconnect``): the mail spooled
    meanwhile, by this process or any other on the host, is forwarded then, not a period
    later. While the database is away nothing runs but the listener's own reconnection
    attempts (with backoff) and, while mail waits, this task's retries (with backoff).

    Args:
        sides: the process's side tasks.
        sender: the process's mail service (its spool and forwarder).
        every_s: ``BIRDDOG_SPOOL_FORWARD_S``.
        back: set when the database is back; None: at start and every ``every_s`` only.
    """

    async def forward() -> None:
        report = await sender.forward_waiting()
        if report.quarantined:
            log.error("spool_quarantined", mails=len(report.quarantined))

    sides.every("spool_forward", every_s, forward, kick=back)


async def mark_stopped(row: DaemonRow) -> None:
    """Mark this process's row stopped on a clean stop; never raises (the stop goes on).

    A database away leaves the row as it was: it then reads as a process that vanished,
    and expires like one.

    Args:
        row: the process's row in ``birddog.daemons``.
    """
    try:
        await row.gone()
    except Exception as exc:  # the stop goes on whatever the database says
        log.warning("daemon_row_left", error=type(exc).__name__)


@contextlib.asynccontextmanager
async def metrics_server(
    settings: Settings,
    metrics: Registry,
    healthy: Callable[[], bool],
    *,
    worker: bool = False,
) -> AsyncIterator[str]:
    """Serve ``/metrics`` and ``/healthz`` where the settings say, until exit.

    Args:
        settings: ``metrics_host`` and ``metrics_port`` (a worker's: ``worker_metrics_*``).
        metrics: what to expose.
        healthy: whether the process is healthy, for ``/healthz``.
        worker: serve a worker's metrics, on the worker's host and port.

    Yields:
        The ``/metrics`` URL.

    Raises:
        InvalidSetting: the address is taken or cannot be bound; the message names
            ``BIRDDOG_METRICS_PORT`` (or ``BIRDDOG_METRICS_HOST``; for a worker,
            ``BIRDDOG_WORKER_METRICS_PORT`` or ``BIRDDOG_WORKER_METRICS_HOST``).
    """
    if worker:
        host, port, prefix, who = (
            settings.worker_metrics_host,
            settings.worker_metrics_port,
            "BIRDDOG_WORKER_METRICS",
            "worker",
        )
    else:
        host, port, prefix, who = (
            settings.metrics_host,
            settings.metrics_port,
            "BIRDDOG_METRICS",
            "daemon",
        )
    try:
        runner = await start_server(metrics, host=host, port=port, healthy=healthy)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InvalidSetting(
                f"the metrics port {host}:{port} is already in use (another {who}?); "
                f"set {prefix}_PORT to a free port for each {who} on this host, "
                "or to 0 to turn metrics off",
                field=f"{prefix}_PORT",
            ) from exc
        raise InvalidSetting(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; "
            f"check {prefix}_HOST and {prefix}_PORT",
            field=f"{prefix}_HOST",
        ) from exc
    try:
        yield f"http://{host}:{port}/metrics"
    finally:
        await runner.cleanup()


def warn_if_push_egress_open(settings: Settings, announce: Callable[[str], None] | None) -> None:
    """Say loudly at start that A2A pushes may reach private and loopback addresses.

    ``BIRDDOG_PUSH_EGRESS=internal`` lets a caller's push config point at this host and
    its network; the drain daemon (which posts the pushes) and ``birddog a2a`` (which
    takes the configs) each say so, on stderr and in the log (``push_egress_open``).

    Args:
        settings: the process's settings.
        announce: where the process's start lines go (None: the log only).
    """
    if settings.push_egress == "public":
        return
    log.warning("push_egress_open", mode=settings.push_egress)
    if announce is not None:
        announce(
            "WARNING: BIRDDOG_PUSH_EGRESS=internal: A2A push configs may point at private "
            "and loopback addresses (this host, its network)"
        )
