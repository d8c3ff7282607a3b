"""The tasks callers took with ``next_task``: their claims, leases renewed, settled by ``answer``.

A live MCP session is a worker for its own queue: ``next_task`` claims the oldest job
queued for the caller's session (as the holder of the server's live sessions, so a job
the workers' claims leave to them is its to take) with a lease renewed every third of it
while the MCP connection that took it lives; ``answer`` settles it (a recorded
cancellation wins), its replies fanned out in the same transaction. One turn at a time
per caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from birddog.core.ask import address_text
from birddog.core.errors import JobNotFound, StaleClaim, StoreUnavailable
from birddog.core.jobs import check_content_size, decode_agent_job
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import AgentAddress, Outcome
from birddog.mcp.arguments import Arguments, ToolRefused
from birddog.mcp.texts import ToolResult, plural
from birddog.runtime import stop_task, wait_event
from birddog.service.timeouts import Deadline

if TYPE_CHECKING:
    from birddog.ports import ClaimedJobLike, JobStore, Notices

log = structlog.get_logger("birddog.mcp")

OnClose = Callable[[Callable[[], Awaitable[None]]], None]
"""Registers what to do when the caller's MCP connection ends."""


@dataclass
class _Turn:
    """A task a caller took: the claim, and the task renewing its lease."""

    claimed: ClaimedJobLike
    renewing: asyncio.Task[None] | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class TakenTasks:
    """The tasks callers took (``next_task``): their claims, leases renewed, settled by ``answer``.

    Args:
        jobs: the job store (claim, heartbeat, settle).
        notices: the process's listening connection (new tasks).
        lease_s: the lease a taken task holds between renewals.
        max_content_bytes: the largest answer accepted.
        holder: the worker id its claims carry: the holder of the live sessions this
            process announces (their jobs are never held back from it); None:
            ``mcp:SESSION``.
    """

    def __init__(
        self,
        *,
        jobs: JobStore,
        notices: Notices,
        lease_s: float,
        max_content_bytes: int,
        holder: str | None = None,
    ) -> None:
        self.holder = holder
        self.jobs = jobs
        self.notices = notices
        self.lease_s = lease_s
        self.max_content_bytes = max_content_bytes
        self._turns: dict[str, _Turn] = {}

    async def close(self) -> None:
        """Stop renewing every taken task (their leases then expire and recovery applies)."""
        for turn in list(self._turns.values()):
            await _stop(turn)
        self._turns.clear()

    async def take(
        self, args: Arguments, caller: AgentAddress, *, on_close: OnClose | None
    ) -> ToolResult:
        """``next_task``: claim the oldest task queued for ``caller`` and renew its lease."""
        wait_s = args.seconds("wait_s", default=0.0)
        text = address_text(caller)
        turn = self._turns.get(text)
        if turn is not None:
            if await self._still_held(turn):
                return _no_task("you hold a task already: answer it first")
            await _stop(turn)
            self._turns.pop(text, None)
        claimed = await self._claim(caller, wait_s)
        if claimed is None:
            return _no_task("no task is queued for your session")
        turn = _Turn(claimed)
        self._turns[text] = turn
        turn.renewing = asyncio.create_task(
            self._renew(turn), name=f"birddog-mcp-lease-{claimed.job.job_id}"
        )
        if on_close is not None:
            on_close(lambda: _stop(turn))
        mail = decode_agent_job(claimed.job).mail
        structured = {
            "status": "task",
            "job_id": claimed.job.job_id,
            "key": None if mail is None else mail.key,
            "from": None if mail is None else address_text(mail.from_),
            "content": "" if mail is None else mail.content,
        }
        sender = structured["from"] or "nobody"
        return ToolResult(
            structured,
            f"task {claimed.job.job_id} taken: from {sender}, key {structured['key']}; "
            "answer it with answer and this job_id",
        )

    async def _claim(self, caller: AgentAddress, wait_s: float) -> ClaimedJobLike | None:
        jobs = self.jobs
        queue = caller.session_id
        worker_id = self.holder or f"mcp:{queue}"
        deadline = Deadline(wait_s)
        with self.notices.subscribe("birddog_jobs", queue) as queued:
            while True:
                claimed = await jobs.claim(
                    queues=[queue], lease_s=self.lease_s, worker_id=worker_id
                )
                if claimed is not None or deadline.passed:
                    return claimed
                await queued.wait(min(deadline.left(), 1.0))

    async def _heartbeat(self, turn: _Turn) -> None:
        """Renew a taken task's lease now (StaleClaim: the claim has ended)."""
        await self.jobs.heartbeat(
            job_id=turn.claimed.job.job_id,
            claim_token=turn.claimed.claim_token,
            lease_s=self.lease_s,
        )

    async def _still_held(self, turn: _Turn) -> bool:
        try:
            await self._heartbeat(turn)
        except StaleClaim:
            return False
        return not turn.stopped.is_set()

    async def _renew(self, turn: _Turn) -> None:
        """Renew the lease every third of it until the turn ends or the connection does."""
        every_s = max(self.lease_s / 3, 0.05)
        while not turn.stopped.is_set():
            if await wait_event(turn.stopped, every_s):
                return
            try:
                await self._heartbeat(turn)
            except StaleClaim:
                return
            except StoreUnavailable as exc:
                log.warning("mcp_lease_renewal_failed", error=type(exc).__name__)

    async def answer(self, args: Arguments, caller: AgentAddress) -> ToolResult:
        """``answer``: settle the task ``caller`` took (a recorded cancellation wins)."""
        job_id = args.required_text("job_id")
        content = args.required_text("content")
        outcome_text = args.text("outcome", default="completed")
        diagnostic = args.text("diagnostic")
        if outcome_text not in ("completed", "failed"):
            raise ToolRefused("outcome: must be completed or failed")
        check_content_size(content, limit_bytes=self.max_content_bytes)
        text = address_text(caller)
        turn = self._turns.get(text)
        if turn is None or turn.claimed.job.job_id != job_id:
            raise await self._not_taken(job_id, caller)
        outcome = Outcome(outcome_text)
        try:
            finished = await self.jobs.finish(
                job_id=job_id,
                claim_token=turn.claimed.claim_token,
                event=SettleRequested(outcome, content, diagnostic),
            )
        except StaleClaim:
            await _stop(turn)
            self._turns.pop(text, None)
            raise ToolRefused(
                f"job_id: your claim on {job_id!r} ended (its lease expired and it was "
                "recovered, or it was settled); nothing was written"
            ) from None
        await _stop(turn)
        self._turns.pop(text, None)
        if finished.outcome == Outcome.CANCELLED:
            raise ToolRefused(
                f"job {job_id} was cancelled before your answer: the cancellation was "
                "sent to its correspondents, not your answer",
                {"status": "settled", "job_id": job_id, "replies": finished.keys},
            )
        return ToolResult(
            {"status": "settled", "job_id": job_id, "replies": finished.keys},
            f"settled {job_id}: {len(finished.keys)} "
            f"{plural(len(finished.keys), 'reply', 'replies')} on their way",
        )

    async def _not_taken(self, job_id: str, caller: AgentAddress) -> ToolRefused:
        """Why ``caller`` cannot answer ``job_id``: answered already, or never taken."""
        try:
            job = await self.jobs.get(job_id)
        except JobNotFound:
            job = None
        if job is not None and job.queue == caller.session_id and job.outcome is not None:
            return ToolRefused(
                f"job_id: {job_id!r} was already answered (it ended {job.outcome}); "
                "nothing was written"
            )
        return ToolRefused(
            f"job_id: {job_id!r} is not a task you took (next_task gives one); nothing was written"
        )


def _no_task(why: str) -> ToolResult:
    return ToolResult({"status": "none"}, f"no task: {why}")


async def _stop(turn: _Turn) -> None:
    turn.stopped.set()
    task = turn.renewing
    if task is not None and task is not asyncio.current_task():
        await stop_task(task)
