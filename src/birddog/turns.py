"""How a worker runs a batched turn: several jobs of one session, one turn of its agent.

A worker with ``batch`` above 1 claims up to that many jobs of one session in one claim
(:meth:`birddog.ports.JobStore.claim_many`); :class:`TurnRunner` runs them as one turn:

- a turn handler (:func:`turn_handler`) is called once with the :class:`MailTurn` and
  answers ``{job_id: content or TurnAnswer}``; a job it does not answer settles ``failed``
  (:data:`~birddog.core.batched.UNANSWERED`); a raise fails every job of the turn;
- a one-mail handler is called once per mail, in claim order, inside the turn; each
  job settles as it would alone;
- every job of the turn is heartbeaten while the turn runs; a cancellation recorded for
  one job wins for that job only (it is settled ``cancelled``, the turn goes on); a turn
  cut short (handler timeout, shutdown) reports every job it still holds as stopped, so
  each goes to its recovery policy; a lost lease ends the turn unreported.

The first job of the turn holds the session's slot (the database's one-turn-at-a-time
rule); it is settled last, so no other turn of the session starts while this one runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final, Protocol, TypeVar

import structlog

from birddog import tracing
from birddog.core.batched import UNANSWERED, MailTurn, TurnAnswer, TurnMail, answer_of
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidJobPayload, StaleClaim, StoreUnavailable, WorkCancelled
from birddog.core.jobs import Job, decode_agent_job
from birddog.core.lifecycle import ClaimEvent, HandlerTimedOut, SettleRequested, WorkerStopped
from birddog.core.live import turn_how
from birddog.core.mail import Outcome
from birddog.core.turns import Turn
from birddog.ports import ClaimedJobLike, JobStore
from birddog.runtime import cause_name, stop_task

__all__ = [
    "TURN_MARK",
    "TurnHandler",
    "TurnRunner",
    "current_job",
    "report_turn",
    "set_current_job",
    "set_turn_recorder",
    "takes_turns",
    "turn_handler",
]

log = structlog.get_logger("birddog.worker")

TurnHandler = Callable[[MailTurn], Awaitable[Mapping[str, "str | TurnAnswer"]]]
"""A handler of whole turns: the turn in, ``{job_id: content or TurnAnswer}`` out."""

TURN_MARK: Final = "birddog_takes_turns"
"""The attribute :func:`turn_handler` sets on the functions it marks."""

_F = TypeVar("_F", bound=Callable[..., Any])

_CURRENT_JOB: ContextVar[Job] = ContextVar("birddog_current_job")
_TURN_RECORDER: ContextVar[Callable[[Turn], Awaitable[None]]] = ContextVar("birddog_turn")


def set_current_job(job: Job) -> None:
    """Make ``job`` the current job of the calling task (the worker, for a handler)."""
    _CURRENT_JOB.set(job)


def set_turn_recorder(record: Callable[[Turn], Awaitable[None]]) -> None:
    """Make ``record`` what :func:`report_turn` calls in the calling task."""
    _TURN_RECORDER.set(record)


def current_job() -> Job | None:
    """The job the calling handler runs for; None outside a worker's handler.

    A handler gets the payload; this gives it (or what it calls, such as
    :func:`birddog.spawn.command_handler`) the job itself, for its id.
    """
    return _CURRENT_JOB.get(None)


async def report_turn(turn: Turn) -> None:
    """Record on the current job(s) where the turn's processes run (nothing outside a worker).

    :mod:`birddog.spawn` calls it once a supervisor runs, so that no second turn of the
    job starts while a process of this one lives (see :meth:`birddog.worker.Worker.run`).
    A record the database cannot take is logged; the turn goes on.

    Args:
        turn: the supervisor's host, boot, pid and start time.
    """
    record = _TURN_RECORDER.get(None)
    if record is not None:
        await record(turn)


class TurnWorker(Protocol):
    """What a :class:`TurnRunner` uses of its worker (:class:`birddog.worker.Worker`)."""

    jobs: JobStore
    handler: Any
    stop: asyncio.Event
    lease_s: float
    handler_timeout_s: float
    shutdown_grace_s: float
    metrics: Any
    how: str

    async def finish_job(self, claimed: ClaimedJobLike, event: ClaimEvent, bound: Any) -> Any:
        """Report how a job ended."""

    async def record_turn_of(self, claimed: ClaimedJobLike, turn: Turn) -> None:
        """Record where a job's turn runs."""


def turn_handler(function: _F) -> _F:
    """Mark ``async def handle_turn(turn: MailTurn) -> dict[str, str]`` as a turn handler.

    A worker then calls it once per turn with every mail of the turn, instead of once per
    mail (``birddog worker --handler module:handle_turn --batch 20``).

    Returns:
        The same function, marked.
    """
    setattr(function, TURN_MARK, True)
    return function


def takes_turns(handler: object) -> bool:
    """Whether ``handler`` was marked with :func:`turn_handler`."""
    return getattr(handler, TURN_MARK, False) is True


def group_turns(claimed: Sequence[ClaimedJobLike], *, batch: int) -> list[list[ClaimedJobLike]]:
    """A claim's jobs as turns: with ``batch`` above 1 the jobs of each queue together."""
    if batch <= 1:
        return [[job] for job in claimed]
    turns: dict[tuple[str | None, str], list[ClaimedJobLike]] = {}
    for job in claimed:
        turns.setdefault(_queue_of(job.job), []).append(job)
    return list(turns.values())


def _queue_of(job: Job) -> tuple[str | None, str]:
    """The queue a job is in: its mail's agent (as the store keys it) and its session.

    Two agents may each have a session of one id; their jobs are two queues, so never one
    turn.
    """
    mail = job.payload.get("mail")
    to = mail.get("to") if isinstance(mail, dict) else None
    agent = to.get("agentId") if isinstance(to, dict) else None
    return (agent if isinstance(agent, str) else None, job.queue)


class TurnRunner:
    """Runs the batched turns of one worker (see the module's docstring).

    Args:
        worker: the worker whose store, handler, timeouts and metrics it uses.
    """

    def __init__(self, worker: TurnWorker) -> None:
        self.worker = worker
        self._held: dict[str, ClaimedJobLike] = {}
        self.answered: dict[str, ClaimEvent] = {}
        self.cancelled: set[str] = set()

    async def run(self, claimed: Sequence[ClaimedJobLike], *, lease_until: float) -> None:
        """Run one turn to its end; never raises, so no task dies unobserved."""
        worker = self.worker
        mails: list[TurnMail] = []
        by_id: dict[str, ClaimedJobLike] = {}
        for job in claimed:
            try:
                mails.append(TurnMail(job.job.job_id, decode_agent_job(job.job)))
                by_id[job.job.job_id] = job
            except InvalidJobPayload as exc:
                log.warning("job_payload_invalid", job_id=job.job.job_id, field=exc.field)
                await self._finish(job, SettleRequested(Outcome.FAILED, "", str(exc)))
        if not mails:
            return
        turn = MailTurn(claimed[0].job.queue, tuple(mails))
        first = mails[0].kind.value
        worker.metrics.turn(mails=len(mails), kind=first, how=turn_how(worker.how, first))
        self._held = by_id
        bound = log.bind(queue=turn.session_id, jobs=len(mails))
        bound.info("turn_started")
        work = asyncio.create_task(self._call(turn))
        try:
            why = await self._supervise(work, lease_until=lease_until)
        except StoreUnavailable as exc:
            bound.warning("turn_store_unavailable", error=cause_name(exc))
            return
        await self._settle_all(turn, work, why)
        bound.info("turn_ended", why=why)

    async def _call(self, turn: MailTurn) -> None:
        """Run the handler over the turn, keeping each job's answer in :attr:`answered`."""
        worker = self.worker
        began = time.perf_counter()
        set_turn_recorder(self.record_turn)
        try:
            if takes_turns(worker.handler):
                answers = await worker.handler(turn)
                if not isinstance(answers, Mapping):
                    raise TypeError(f"a turn handler answers a dict, not {type(answers).__name__}")
                for job_id, value in answers.items():
                    if job_id in self._held and job_id not in self.answered:
                        self.answered[job_id] = _event_of(answer_of(value, job_id=job_id))
                return
            for mail in turn.mails:
                if mail.job_id in self.cancelled or mail.job_id not in self._held:
                    continue
                self.answered[mail.job_id] = await self._one(mail)
        finally:
            worker.metrics.handler_seconds.observe(time.perf_counter() - began)

    async def _one(self, mail: TurnMail) -> ClaimEvent:
        """The one-mail handler for one mail of the turn, as its own job would run it."""
        claimed = self._held[mail.job_id]
        set_current_job(claimed.job)
        ids = {"job_id": mail.job_id}
        try:
            with tracing.span("handler", parent=claimed.traceparent, attributes=ids):
                content = await self.worker.handler(mail.payload)
        except WorkCancelled as exc:
            return SettleRequested(Outcome.CANCELLED, exc.content)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one mail's failure is its own
            log.warning("handler_failed", job_id=mail.job_id, error=type(exc).__name__)
            return SettleRequested(Outcome.FAILED, "", _describe(exc))
        return SettleRequested(Outcome.COMPLETED, content)

    async def _supervise(self, work: asyncio.Task[None], *, lease_until: float) -> str:
        """Heartbeat every held job while the turn runs; say why the wait ended."""
        worker = self.worker
        loop = asyncio.get_running_loop()
        stopping = asyncio.ensure_future(worker.stop.wait())
        deadline = loop.time() + worker.handler_timeout_s
        stop_deadline: float | None = None
        why = "done"
        try:
            while not work.done():
                now = loop.time()
                if worker.stop.is_set() and stop_deadline is None:
                    stop_deadline = now + worker.shutdown_grace_s
                limit = deadline if stop_deadline is None else min(deadline, stop_deadline)
                if now >= lease_until:
                    why = "lease_lost"
                elif now >= limit:
                    why = "shutdown" if stop_deadline is not None else "timed_out"
                if why != "done":
                    break
                waits: set[asyncio.Future[Any]] = {work}
                if stop_deadline is None:
                    waits.add(stopping)
                await asyncio.wait(
                    waits,
                    timeout=min(worker.lease_s / 3, limit - now, lease_until - now),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if work.done():
                    break
                sent_at = loop.time()
                if await self._beat():
                    lease_until = sent_at + worker.lease_s
                if not self._held:
                    why = "lease_lost"
                    break
        finally:
            await stop_task(stopping)
            await stop_task(work, insist=False)
        return why

    async def _beat(self) -> bool:
        """Renew every held job's lease; True when the leases were renewed.

        A job another claim holds now leaves the turn; a cancellation recorded for a job
        is kept in :attr:`cancelled` (that job alone settles cancelled).
        """
        worker = self.worker
        held = list(self._held.values())
        beats = await asyncio.gather(
            *(
                worker.jobs.heartbeat(
                    job_id=job.job.job_id, claim_token=job.claim_token, lease_s=worker.lease_s
                )
                for job in held
            ),
            return_exceptions=True,
        )
        renewed = True
        for job, beat in zip(held, beats, strict=True):
            if isinstance(beat, StaleClaim):
                log.warning("claim_lost", job_id=job.job.job_id)
                self._held.pop(job.job.job_id, None)
            elif isinstance(beat, StoreUnavailable):
                log.warning("heartbeat_failed", job_id=job.job.job_id, error=cause_name(beat))
                renewed = False
            elif isinstance(beat, BaseException):
                raise beat
            elif beat:
                self.cancelled.add(job.job.job_id)
        return renewed

    async def _settle_all(self, turn: MailTurn, work: asyncio.Task[None], why: str) -> None:
        """Settle every job the turn still holds, the slot's holder (the first) last."""
        if why == "lease_lost":
            log.warning("lease_lost", queue=turn.session_id)
            return
        failure = None if not work.done() or work.cancelled() else work.exception()
        ordered = [*turn.job_ids[1:], turn.job_ids[0]]
        for job_id in ordered:
            claimed = self._held.get(job_id)
            if claimed is None:
                continue
            event = self._event_for(job_id, why, failure)
            try:
                await self._finish(claimed, event)
            except StaleClaim:
                log.warning("claim_lost", job_id=job_id)
            except StoreUnavailable as exc:
                log.warning("settle_failed_database", job_id=job_id, error=cause_name(exc))

    def _event_for(self, job_id: str, why: str, failure: BaseException | None) -> ClaimEvent:
        """What to report for one job of the turn, given how the turn ended."""
        if job_id in self.cancelled:
            return SettleRequested(Outcome.CANCELLED, "")  # the recorded cancellation wins
        answered = self.answered.get(job_id)
        if answered is not None:
            return answered
        if why == "shutdown":
            return WorkerStopped()
        if why == "timed_out":
            return HandlerTimedOut(self.worker.handler_timeout_s)
        if failure is not None:
            return SettleRequested(Outcome.FAILED, "", _describe(failure))
        return SettleRequested(Outcome.FAILED, "", UNANSWERED)

    async def _finish(self, claimed: ClaimedJobLike, event: ClaimEvent) -> None:
        await self.worker.finish_job(claimed, event, log.bind(job_id=claimed.job.job_id))

    async def record_turn(self, turn: Turn) -> None:
        """Record where the turn's processes run on every job it holds; count the spawn."""
        held = list(self._held.values())
        if held:
            first = decode_agent_job(held[0].job)
            how = turn_how(self.worker.how, first.kind.value)
            self.worker.metrics.spawn(kind=first.kind.value, how=how)
        for claimed in held:
            await self.worker.record_turn_of(claimed, turn)


def _event_of(answer: TurnAnswer) -> ClaimEvent:
    """The settlement a turn's answer asks for."""
    if answer.outcome is Outcome.FAILED:
        return SettleRequested(Outcome.FAILED, answer.content, answer.diagnostic or "")
    return SettleRequested(Outcome.COMPLETED, answer.content)


def _describe(error: BaseException) -> str:
    """``Class: message`` of a handler's error, bounded."""
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # a hostile __str__ must not end the worker
        text = type(error).__name__
    return bounded_diagnostic(text)
