"""The executor side: claim agent jobs, run the user's handler, settle and fan out.

A handler is ``async def handle(payload: AgentJobPayload) -> str``; its text is the reply
content. With ``batch`` above 1 a worker claims up to that many jobs of one session as one
turn (:mod:`birddog.turns`), and a handler marked :func:`birddog.turns.turn_handler` takes
the whole turn at once. A raise settles ``failed`` with a bounded diagnostic; a result
that cannot be stored (not a string, a NUL, a lone surrogate, above the content limit)
settles ``failed`` at once with a diagnostic that says why, and the handler never runs
again for it; a handler cut short (timeout, shutdown) is cancelled and its job ``interrupted`` or
recovered by its policy; a recorded cancellation wins over whatever the handler returns.
The worker reports what happened as lifecycle events; the job store decides and stores.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from enum import Enum
from typing import Any

import structlog

from birddog import tracing
from birddog.cancels import CancelHints
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import (
    BirdDogError,
    InvalidJobPayload,
    StaleClaim,
    StoreUnavailable,
    WorkCancelled,
)
from birddog.core.jobs import AgentJobPayload, decode_agent_job
from birddog.core.lifecycle import (
    Cause,
    ClaimEvent,
    Finished,
    HandlerTimedOut,
    Keep,
    Requeue,
    Settle,
    SettleRequested,
    WorkerStopped,
)
from birddog.core.live import turn_how, turn_ran_by
from birddog.core.mail import Outcome
from birddog.core.turns import Turn
from birddog.metrics import WorkerMetrics
from birddog.ports import ClaimedJobLike, JobStore, Listener
from birddog.runtime import Backoff, cause_name, sleep_unless_stopped, stop_task
from birddog.turns import (
    TurnHandler,
    TurnRunner,
    group_turns,
    set_current_job,
    set_turn_recorder,
    takes_turns,
)

log = structlog.get_logger("birddog.worker")

Handler = Callable[[AgentJobPayload], Awaitable[str]]
"""What a worker runs for each agent job: the payload in, the reply content out."""


class HandlerNotFound(BirdDogError):
    """The handler could not be imported; give it as ``package.module:function``."""


def load_handler(spec: str) -> Handler:
    """Import ``package.module:function``.

    Args:
        spec: the handler's import path.

    Returns:
        The handler function.

    Raises:
        HandlerNotFound: the module or attribute is missing, or it is not callable.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise HandlerNotFound(f"handler {spec!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
        handler = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise HandlerNotFound(f"cannot load handler {spec!r}: {exc}") from exc
    if not callable(handler):
        raise HandlerNotFound(f"handler {spec!r} is not callable")
    return handler  # type: ignore[no-any-return]


class Worker:
    """Claims and runs agent jobs until stopped.

    Args:
        jobs: the job store.
        handler: the user's async handler.
        listener: reports ``NOTIFY birddog_jobs`` (new work) or reconnects.
        queues: these queues (session ids); with ``agents`` None too, every queue.
        concurrency: jobs run at once.
        handler_timeout_s: a handler running longer is cancelled and its job interrupted.
        lease_s: the job lease; heartbeats renew it every third of it.
        shutdown_grace_s: on stop, running handlers get this long before they are cancelled.
        backstop_s: the longest sleep without a notification.
        stop: set to stop the worker.
        metrics: where claims, settlements, handler times and the database's state are
            counted (default: a registry of its own, served by nobody).
        agents: every session of these agents as well (the job's mail is addressed to
            one of them).
        cancel_hints: the cancel hints the listener hears (:mod:`birddog.cancels`): a
            running job's heartbeat is sent at once on one, so a cancellation ends the
            turn now, not at the next beat (None: at the next beat).
        batch: the most jobs of one session one turn takes (1: a turn per job).
        live: this worker serves a live session (``worker --live``): its id starts with
            ``live:``, so its turns count as live ones.

    Attributes:
        worker_id: the claimer id its claims carry (``[live:]HOST:PID``).
        how: how its turns ran (``live`` or ``worker``; a worker's turn of informational
            mail ran ``digest``: :func:`~birddog.core.live.turn_ran_by`).
        finished: how the jobs this worker handled ended, by outcome (and ``requeued``).
        left: after a run with ``once``, how many jobs were still queued in its queues
            when it returned (None: not known, the database was away).
    """

    def __init__(
        self,
        *,
        jobs: JobStore,
        handler: Handler | TurnHandler,
        listener: Listener,
        queues: Sequence[str] | None = None,
        concurrency: int = 4,
        handler_timeout_s: float = 900.0,
        lease_s: float = 60.0,
        shutdown_grace_s: float = 10.0,
        backstop_s: float = 5.0,
        stop: asyncio.Event | None = None,
        metrics: WorkerMetrics | None = None,
        agents: Sequence[str] | None = None,
        cancel_hints: CancelHints | None = None,
        batch: int = 1,
        live: bool = False,
    ) -> None:
        self.jobs = jobs
        self.batch = max(1, batch)
        self.cancel_hints = cancel_hints if cancel_hints is not None else CancelHints()
        self.handler = handler
        self.listener = listener
        self.queues = list(queues) if queues else None
        self.agents = list(agents) if agents else None
        self.concurrency = concurrency
        self.handler_timeout_s = handler_timeout_s
        self.lease_s = lease_s
        self.shutdown_grace_s = shutdown_grace_s
        self.backstop_s = backstop_s
        self.stop = stop or asyncio.Event()
        # A worker --live's claims say so: its turns ran live (status, the metrics).
        self.worker_id = ("live:" if live else "") + f"{socket.gethostname()}:{os.getpid()}"
        self.how = turn_ran_by(self.worker_id)
        self.finished: Counter[str] = Counter()
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.left: int | None = None
        self._ended = 0  # jobs whose turn is over, settled or not

    @property
    def takes_every_queue(self) -> bool:
        """Whether this worker serves every session of every agent (no queue or agent named)."""
        return self.queues is None and self.agents is None

    @property
    def settled(self) -> int:
        """How many jobs this worker settled."""
        return sum(n for what, n in self.finished.items() if what != REQUEUED)

    async def run(self, *, once: bool = False) -> None:
        """Run jobs until stopped; with ``once``, until no job it may take is left.

        With ``once`` the worker returns only when, after its last job ended, a claim
        found nothing and no job is queued in its queues (one queued behind another
        worker's running job is waited for), or when stopped; :attr:`left` then says
        how many jobs were still queued.
        """
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        backoff = Backoff()
        log.info("worker_started", worker=self.worker_id, queues=self.queues, agents=self.agents)
        if self.takes_every_queue:
            # Every agent's mail, whatever its to.agentId: said once, so a handler written
            # for one agent is not found answering for another only afterwards.
            log.info("worker_takes_every_queue", worker=self.worker_id)
        try:
            while not self.stop.is_set():
                await slots.acquire()
                wanted = 1
                while not slots.locked():  # every other free slot, without waiting
                    await slots.acquire()
                    wanted += 1
                # The lease runs from before the claim was sent: the worker's own deadline
                # never outlasts the one the database keeps.
                asked_at = asyncio.get_running_loop().time()
                ended_before_claim = self._ended
                try:
                    claimed = await self.jobs.claim_many(
                        queues=self.queues,
                        agents=self.agents,
                        lease_s=self.lease_s,
                        worker_id=self.worker_id,
                        limit=wanted,
                        batch=self.batch,
                    )
                    backoff.reset()
                    self.metrics.database(up=True)
                except StoreUnavailable as exc:
                    _release(slots, wanted)
                    self.metrics.database(up=False)
                    log.warning("database_unavailable", error=cause_name(exc), reason=str(exc))
                    await sleep_unless_stopped(self.stop, backoff.next())
                    continue
                turns = group_turns(claimed, batch=self.batch)
                _release(slots, wanted - len(turns))
                for turn in turns:
                    self._claimed(turn, asked_at)
                    task = asyncio.create_task(
                        self._run_job(turn, slots, lease_until=asked_at + self.lease_s)
                    )
                    running.add(task)
                    task.add_done_callback(running.discard)
                if len(turns) == wanted:
                    continue  # every free slot filled: there may be more to take at once
                # A short claim took everything it could take now.
                if self._ended != ended_before_claim:
                    # A job that ended while the claim was out may have freed its
                    # session after the claim looked: look again.
                    continue
                if once and not running:
                    if await self._drained():
                        return
                    continue
                # A job of ours ending frees its session for the next one: wait for
                # that too, not only for new work.
                await self._wait_for_work(running)
        finally:
            if running:
                await asyncio.wait(running)
            if once and self.left != 0:  # stopped before it drained: what it left
                self.left = await self._queued()
            log.info("worker_stopped", worker=self.worker_id, left=self.left, **self.summary())

    async def _drained(self) -> bool:
        """With ``once``, nothing of its own running: whether no job it may take is left.

        Jobs still queued in its queues wait behind another worker's running job (or went
        back to their queue meanwhile): the worker waits a moment and claims again.
        """
        self.left = await self._queued()
        if self.left == 0:
            return True
        await self._wait_for_work(set(), timeout_s=min(self.backstop_s, ONCE_RECHECK_S))
        return False

    async def _queued(self) -> int | None:
        """How many jobs are queued that this worker may take; None when the database is away."""
        try:
            queued, _ = await self.jobs.queued_backlog(queues=self.queues, agents=self.agents)
        except StoreUnavailable as exc:
            log.warning("database_unavailable", error=cause_name(exc), reason=str(exc))
            return None
        return queued

    def _claimed(self, turn: Sequence[ClaimedJobLike], asked_at: float) -> None:
        """Count a turn's claimed jobs; for a traced job, record its ``birddog.claim`` span."""
        for claimed in turn:
            self.metrics.claimed.inc()
            if claimed.traceparent is None:
                continue
            since_s = asyncio.get_running_loop().time() - asked_at
            ids = {"job_id": claimed.job.job_id, "queue": claimed.job.queue}
            tracing.record("claim", parent=claimed.traceparent, since_s=since_s, attributes=ids)

    def summary(self) -> dict[str, int]:
        """How the jobs this worker handled ended: ``{"completed": 2, "failed": 1, ...}``."""
        return dict(sorted(self.finished.items()))

    async def _run_job(
        self, turn: Sequence[ClaimedJobLike], slots: asyncio.Semaphore, *, lease_until: float
    ) -> None:
        """Run one claimed turn to its end; never raises, so no task dies unobserved.

        A turn of one job for a one-mail handler runs as a job alone always has; any
        other turn runs through :class:`~birddog.turns.TurnRunner`.
        """
        if len(turn) > 1 or takes_turns(self.handler):
            try:
                await TurnRunner(self).run(turn, lease_until=lease_until)
            except Exception as exc:  # one turn's bug must not end the worker
                log.error("turn_crashed", error=type(exc).__name__)  # noqa: TRY400 - no text
            finally:
                self._ended += len(turn)
                slots.release()
            return
        [claimed] = turn
        bound = log.bind(job_id=claimed.job.job_id)
        try:
            try:
                payload = decode_agent_job(claimed.job)
            except InvalidJobPayload as exc:
                bound.warning("job_payload_invalid", field=exc.field)
                await self.finish_job(claimed, SettleRequested(Outcome.FAILED, "", str(exc)), bound)
                return
            await self._execute(claimed, payload, bound, lease_until=lease_until)
        except StaleClaim:
            bound.warning("claim_lost")
        except StoreUnavailable as exc:
            # The job stays running; its lease expiry gives it back (or settles it).
            self.metrics.database(up=False)
            bound.warning("settle_failed_database", error=cause_name(exc))
        except BirdDogError as exc:
            bound.error("job_finish_failed", error=type(exc).__name__)
        except Exception as exc:  # one job's bug must not end the worker
            bound.error("job_crashed", error=type(exc).__name__)
        finally:
            self._ended += 1
            slots.release()

    async def _call(self, claimed: ClaimedJobLike, payload: AgentJobPayload) -> object:
        """Run the handler in a task of its own for the job, timed, in its span if traced."""
        set_current_job(claimed.job)  # the task's own context: no reset needed
        set_turn_recorder(lambda turn: _spawned(self, claimed, payload, turn))
        kind = payload.kind.value
        self.metrics.turn(mails=1, kind=kind, how=turn_how(self.how, kind))
        began = time.perf_counter()
        try:
            ids = {"job_id": claimed.job.job_id}
            with tracing.span("handler", parent=claimed.traceparent, attributes=ids):
                return await self.handler(payload)  # type: ignore[arg-type]
        finally:
            self.metrics.handler_seconds.observe(time.perf_counter() - began)

    async def _execute(
        self, claimed: ClaimedJobLike, payload: AgentJobPayload, bound: Any, *, lease_until: float
    ) -> None:
        work = asyncio.create_task(self._call(claimed, payload))
        why = await self._supervise(work, claimed, bound, lease_until=lease_until)
        if why is Stopped.LEASE_LOST:
            # The heartbeats could not renew the lease: the reaper may give the job to
            # another worker at any moment, so this turn ends here, unreported.
            bound.warning("lease_lost")
            return
        if why is Stopped.CANCEL_REQUESTED:
            bound.info("job_cancelled")
            # The recorded cancellation wins whatever is reported.
            await self.finish_job(claimed, SettleRequested(Outcome.CANCELLED, ""), bound)
            return
        if why is not Stopped.DONE:
            timed_out = HandlerTimedOut(self.handler_timeout_s)
            stopped: ClaimEvent = WorkerStopped() if why is Stopped.SHUTDOWN else timed_out
            bound.warning("job_interrupted", why=type(stopped).__name__)
            await self.finish_job(claimed, stopped, bound)
            return
        if work.cancelled():
            await self.finish_job(claimed, WorkerStopped("handler was cancelled"), bound)
            return
        error = work.exception()
        if isinstance(error, WorkCancelled):
            bound.info("job_cancelled_where_it_ran")
            await self.finish_job(claimed, SettleRequested(Outcome.CANCELLED, error.content), bound)
            return
        if error is not None:
            bound.warning("handler_failed", error=type(error).__name__)
            event = SettleRequested(Outcome.FAILED, "", _describe(error))
            await self.finish_job(claimed, event, bound)
            return
        await self.finish_job(claimed, SettleRequested(Outcome.COMPLETED, work.result()), bound)

    async def _supervise(
        self, work: asyncio.Task[object], claimed: ClaimedJobLike, bound: Any, *, lease_until: float
    ) -> Stopped:
        """Heartbeat while the handler runs; say why the wait ended (the work is over then).

        Raises:
            StaleClaim: another claim holds the job; the handler was stopped.
        """
        loop = asyncio.get_running_loop()
        stopping = asyncio.ensure_future(self.stop.wait())
        deadline = loop.time() + self.handler_timeout_s
        stop_deadline: float | None = None
        why = Stopped.DONE
        hinted = self.cancel_hints.watch(claimed.job.job_id)
        try:
            while not work.done():
                now = loop.time()
                if self.stop.is_set() and stop_deadline is None:
                    stop_deadline = now + self.shutdown_grace_s
                limit = deadline if stop_deadline is None else min(deadline, stop_deadline)
                if now >= lease_until:
                    why = Stopped.LEASE_LOST
                elif now >= limit:
                    why = Stopped.SHUTDOWN if stop_deadline is not None else Stopped.TIMED_OUT
                if why is not Stopped.DONE:
                    break
                # A cancel hint sends the heartbeat now: its answer ends the turn.
                hint = asyncio.ensure_future(hinted.wait())
                await asyncio.wait(
                    {work, stopping, hint} if stop_deadline is None else {work, hint},
                    timeout=min(self.lease_s / 3, limit - now, lease_until - now),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                await stop_task(hint)
                hinted.clear()
                if work.done():
                    break
                sent_at = loop.time()
                try:
                    cancel_requested = await self.jobs.heartbeat(
                        job_id=claimed.job.job_id,
                        claim_token=claimed.claim_token,
                        lease_s=self.lease_s,
                    )
                except StoreUnavailable as exc:
                    bound.warning("heartbeat_failed", error=cause_name(exc))
                    continue
                lease_until = sent_at + self.lease_s
                if cancel_requested:
                    why = Stopped.CANCEL_REQUESTED
                    break
        finally:
            # Another claim holds the job (StaleClaim), or the wait is over: the work
            # must not run on unowned.
            self.cancel_hints.forget(claimed.job.job_id, hinted)
            await stop_task(stopping)
            await stop_task(work, insist=False)
        return why

    async def record_turn_of(self, claimed: ClaimedJobLike, turn: Turn) -> None:
        """Write where the job's turn runs on the job, under this claim; count the spawn."""
        try:
            await self.jobs.record_turn(
                job_id=claimed.job.job_id, claim_token=claimed.claim_token, turn=turn
            )
        except (StoreUnavailable, StaleClaim) as exc:
            # The supervisor still ends the turn with the worker; only the record is lost.
            log.warning("turn_not_recorded", job_id=claimed.job.job_id, error=cause_name(exc))

    async def finish_job(self, claimed: ClaimedJobLike, event: ClaimEvent, bound: Any) -> Finished:
        """Report how a claimed job ended to the store, count it and log it."""
        ids = {"job_id": claimed.job.job_id}
        with tracing.span("settle", parent=claimed.traceparent, attributes=ids) as settle:
            finished = await self.jobs.finish(
                job_id=claimed.job.job_id,
                claim_token=claimed.claim_token,
                event=event,
                traceparent=settle.traceparent,
            )
            if finished.outcome is not None:
                settle.note(outcome=finished.outcome.value)
        decision = finished.decision
        if isinstance(decision, Requeue):
            self._count(REQUEUED)
            bound.info("job_requeued")
        elif isinstance(decision, Settle) and decision.cause is Cause.UNSTORABLE_RESULT:
            self._count(decision.outcome.value)
            bound.warning(
                "job_result_unstorable",
                outcome=decision.outcome.value,
                diagnostic=decision.diagnostic,
                replies=len(finished.keys),
            )
        elif finished.outcome is not None:
            self._count(finished.outcome.value)
            bound.info(
                "job_settled",
                outcome=finished.outcome.value,
                replies=len(finished.keys),
                replay=isinstance(decision, Keep),
            )
        return finished

    def _count(self, what: str) -> None:
        """Count a job this worker finished: an outcome, or ``requeued``."""
        self.finished[what] += 1
        if what == REQUEUED:
            self.metrics.requeued.inc()
        else:
            self.metrics.settled.labels(what).inc()

    async def _wait_for_work(
        self, running: set[asyncio.Task[None]], *, timeout_s: float | None = None
    ) -> None:
        """Wait for new work (a notification, the backstop), a running job to end, or stop."""
        wait_s = self.backstop_s if timeout_s is None else timeout_s
        wake = asyncio.ensure_future(self.listener.wait(wait_s))
        stopped = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({wake, stopped, *running}, return_when=asyncio.FIRST_COMPLETED)
        await stop_task(wake)
        await stop_task(stopped)


class Stopped(Enum):
    """Why the worker stopped waiting for a handler."""

    DONE = "done"
    CANCEL_REQUESTED = "cancel_requested"
    SHUTDOWN = "shutdown"
    TIMED_OUT = "timed_out"
    LEASE_LOST = "lease_lost"


ONCE_RECHECK_S = 0.5
"""With ``once``, how soon a worker looks again at jobs queued behind another's running job."""

REQUEUED = "requeued"
"""The key of :attr:`Worker.finished` that counts jobs given back to their queue."""


async def _spawned(
    worker: Worker, claimed: ClaimedJobLike, payload: AgentJobPayload, turn: Turn
) -> None:
    """A one-job turn started a process: count it and record where it runs."""
    kind = payload.kind.value
    worker.metrics.spawn(kind=kind, how=turn_how(worker.how, kind))
    await worker.record_turn_of(claimed, turn)


def _release(slots: asyncio.Semaphore, count: int) -> None:
    """Give back ``count`` slots a claim did not fill."""
    for _ in range(count):
        slots.release()


def _describe(error: BaseException) -> str:
    """``Class: message`` of a handler's error, bounded; a broken ``__str__`` is no crash."""
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # a hostile __str__ must not end the worker
        text = type(error).__name__
    return bounded_diagnostic(text)
