"""The executor side: claim agent jobs, run the user's handler, settle and fan out.

A handler is ``async def handle(payload: AgentJobPayload) -> str``; its text is the reply
content. A raise settles ``failed`` with a bounded diagnostic; a handler cut short (timeout,
shutdown) is cancelled and its job ``interrupted`` or recovered by its policy; a recorded
cancellation wins over whatever the handler returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import BirdDogError, InvalidJobPayload, StaleClaim
from birddog.core.jobs import AgentJobPayload, decode_agent_job
from birddog.core.mail import Outcome
from birddog.ports import ClaimedJobLike, JobStore, Listener
from birddog.runtime import Backoff, database_errors, sleep_unless_stopped

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
        queues: only these queues (session ids); None for all.
        concurrency: jobs run at once.
        handler_timeout_s: a handler running longer is cancelled and its job interrupted.
        lease_s: the job lease; heartbeats renew it every third of it.
        shutdown_grace_s: on stop, running handlers get this long before they are cancelled.
        backstop_s: the longest sleep without a notification.
        stop: set to stop the worker.
    """

    def __init__(
        self,
        *,
        jobs: JobStore,
        handler: Handler,
        listener: Listener,
        queues: Sequence[str] | None = None,
        concurrency: int = 4,
        handler_timeout_s: float = 900.0,
        lease_s: float = 60.0,
        shutdown_grace_s: float = 10.0,
        backstop_s: float = 5.0,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.jobs = jobs
        self.handler = handler
        self.listener = listener
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency
        self.handler_timeout_s = handler_timeout_s
        self.lease_s = lease_s
        self.shutdown_grace_s = shutdown_grace_s
        self.backstop_s = backstop_s
        self.stop = stop or asyncio.Event()
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.settled = 0
        self._errors = database_errors()

    async def run(self, *, once: bool = False) -> None:
        """Run jobs until stopped; with ``once``, until no job is queued and none runs."""
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        backoff = Backoff()
        log.info("worker_started", worker=self.worker_id, queues=self.queues)
        try:
            while not self.stop.is_set():
                await slots.acquire()
                try:
                    claimed = await self.jobs.claim(
                        queues=self.queues, lease_s=self.lease_s, worker_id=self.worker_id
                    )
                    backoff.reset()
                except self._errors as exc:
                    slots.release()
                    log.warning("database_unavailable", error=type(exc).__name__)
                    await sleep_unless_stopped(self.stop, backoff.next())
                    continue
                if claimed is None:
                    slots.release()
                    if once and not running:
                        return
                    if once:
                        await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                        continue
                    await self._wait_for_work()
                    continue
                task = asyncio.create_task(self._run_job(claimed, slots))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            if running:
                await asyncio.wait(running)
            log.info("worker_stopped", worker=self.worker_id, settled=self.settled)

    async def _run_job(self, claimed: ClaimedJobLike, slots: asyncio.Semaphore) -> None:
        job_id = claimed.job.job_id
        token = claimed.claim_token
        bound = log.bind(job_id=job_id)
        try:
            try:
                payload = decode_agent_job(claimed.job)
            except InvalidJobPayload as exc:
                bound.warning("job_payload_invalid", field=exc.field)
                await self._settle(job_id, token, Outcome.FAILED, "", str(exc))
                return
            await self._execute(job_id, token, payload, bound)
        except StaleClaim:
            bound.warning("claim_lost")
        except self._errors as exc:
            bound.warning("settle_failed_database", error=type(exc).__name__)
        finally:
            slots.release()

    async def _execute(self, job_id: str, token: str, payload: AgentJobPayload, bound: Any) -> None:
        async def call() -> str:
            return await self.handler(payload)

        work = asyncio.create_task(call())
        cancel_requested = False
        deadline = asyncio.get_running_loop().time() + self.handler_timeout_s
        stop_deadline: float | None = None
        while not work.done():
            now = asyncio.get_running_loop().time()
            if self.stop.is_set() and stop_deadline is None:
                stop_deadline = now + self.shutdown_grace_s
            limit = min(deadline, stop_deadline or deadline)
            if now >= limit:
                break
            step = min(self.lease_s / 3, limit - now)
            stop_wait = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait(
                {work, stop_wait} if stop_deadline is None else {work},
                timeout=step,
                return_when=asyncio.FIRST_COMPLETED,
            )
            stop_wait.cancel()
            if work.done():
                break
            try:
                cancel_requested = await self.jobs.heartbeat(
                    job_id=job_id, claim_token=token, lease_s=self.lease_s
                )
            except StaleClaim:
                # Another claim holds the job now: this run's result would be refused, so
                # stop the work rather than let it run on unowned.
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work
                raise
            except self._errors as exc:
                bound.warning("heartbeat_failed", error=type(exc).__name__)
            if cancel_requested:
                break
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            if cancel_requested:
                bound.info("job_cancelled")
                await self._settle(job_id, token, Outcome.CANCELLED, "", None)
                return
            why = (
                "worker shut down before the handler finished"
                if self.stop.is_set()
                else f"handler timed out after {self.handler_timeout_s:g} s"
            )
            bound.warning("job_interrupted", why=why)
            await self.jobs.interrupt(job_id=job_id, claim_token=token, diagnostic=why)
            return
        if work.cancelled():
            await self.jobs.interrupt(
                job_id=job_id, claim_token=token, diagnostic="handler was cancelled"
            )
            return
        error = work.exception()
        if error is not None:
            bound.warning("handler_failed", error=type(error).__name__)
            await self._settle(
                job_id,
                token,
                Outcome.FAILED,
                "",
                bounded_diagnostic(f"{type(error).__name__}: {error}"),
            )
            return
        content = work.result()
        if not isinstance(content, str):
            await self._settle(
                job_id,
                token,
                Outcome.FAILED,
                "",
                f"handler returned {type(content).__name__}, not str",
            )
            return
        await self._settle(job_id, token, Outcome.COMPLETED, content, None)

    async def _settle(
        self, job_id: str, token: str, outcome: Outcome, content: str, diagnostic: str | None
    ) -> None:
        keys = await self.jobs.settle(
            job_id=job_id,
            claim_token=token,
            outcome=outcome,
            content=content,
            diagnostic=diagnostic,
        )
        self.settled += 1
        log.info("job_settled", job_id=job_id, outcome=outcome.value, replies=len(keys))

    async def _wait_for_work(self) -> None:
        wake = asyncio.ensure_future(self.listener.wait(self.backstop_s))
        stopped = asyncio.ensure_future(self.stop.wait())
        _done, pending = await asyncio.wait({wake, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *self._errors):
                await task
