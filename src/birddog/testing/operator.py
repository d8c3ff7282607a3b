"""The operator's side in memory: the pages and stories, sent jobs read back, a daemon row.

:class:`InMemoryAdmin` reads the outbox, job store and route book fakes as the console's
pages read the database (the same filters, orders and paging; a subset of the columns:
those the tools show). :class:`InMemorySentJobs` reads jobs back as their senders see
them (the A2A tasks); :class:`InMemoryDaemonRow` is a process's row in the daemons table.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from birddog.core.delivery import OutboxRow, RowState
from birddog.core.egress import shown_url
from birddog.core.errors import InvalidInput, JobNotFound
from birddog.core.jobs import JobState, decode_agent_job
from birddog.core.kinds import DEFAULT_KIND
from birddog.core.mail import AgentAddress, Mail, Outcome, mail_key_of
from birddog.core.tasks import SentJob
from birddog.core.text import shown_key
from birddog.ports import JOB_STATES, PENDING_STATUSES, PREVIEW_CHARS, Listing, Overview, Story
from birddog.testing.jobs import InMemoryJobs, StoredJob
from birddog.testing.mail import mail_of
from birddog.testing.outbox import InMemoryOutbox
from birddog.testing.routes import InMemoryRoutes

__all__ = ["MAX_PAGE", "InMemoryAdmin", "InMemoryDaemonRow", "InMemorySentJobs"]

MAX_PAGE = 500
"""The most rows one page may ask for."""

_JOB_RANK = {"running": 0, "queued": 1, "settled": 2}


class InMemoryAdmin:
    """The operator's reads over the fakes (an :class:`~birddog.ports.Admin`).

    Args:
        outbox: the replies.
        jobs: the jobs.
        routes: the routes.
    """

    def __init__(
        self, *, outbox: InMemoryOutbox, jobs: InMemoryJobs, routes: InMemoryRoutes
    ) -> None:
        self.outbox = outbox
        self.job_store = jobs
        self.route_book = routes

    async def overview(self, *, now: datetime) -> Overview:
        """Counts by state; no activity series and no processes (the fakes keep none)."""
        rows = list(self.outbox.rows.values())
        pending = [row for row in rows if row.state is RowState.PENDING]
        jobs = dict.fromkeys(JOB_STATES, 0)
        for stored in self.job_store.jobs.values():
            jobs[stored.job.state.value] += 1
        counts = {
            "pending": len(pending),
            "dead": len(rows) - len(pending),
            "held": sum(row.agent_id in self.outbox.held for row in pending),
            "oldest_pending_at": min((row.created_at for row in pending), default=None),
            "next_due_at": await self.outbox.next_due_at(),
        }
        return Overview(outbox=counts, jobs=jobs, activity=[], daemons=[])

    async def pending(
        self,
        *,
        recipient: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Pending replies, the next due first (``status`` ``held`` or ``due`` filters).

        Raises:
            InvalidInput: a bad status, limit or cursor.
        """
        _choice(status, PENDING_STATUSES, "status")
        rows = [
            _reply_row(row, held=row.agent_id in self.outbox.held)
            for row in self.outbox.rows.values()
            if row.state is RowState.PENDING and recipient in (None, row.agent_id)
        ]
        rows = [row for row in rows if status is None or row["status"] == status]
        rows.sort(key=lambda row: (row["next_try_at"], row["key"]))
        return _page(rows, after, limit)

    async def dead(
        self, *, recipient: str | None = None, after: str | None = None, limit: int = 50
    ) -> Listing:
        """Dead letters, the newest first.

        Raises:
            InvalidInput: a bad limit or cursor.
        """
        rows = [
            _reply_row(row, held=False)
            for row in self.outbox.dead_letters.values()
            if recipient in (None, row.agent_id)
        ]
        rows.sort(key=lambda row: (row["due_at"], row["key"]), reverse=True)
        return _page(rows, after, limit)

    async def routes(self, *, after: str | None = None, limit: int = 100) -> Listing:
        """Routes by agent id, URL redacted, secrets never included.

        Raises:
            InvalidInput: a bad limit or cursor.
        """
        rows = [
            {
                "agent_id": route.agent_id,
                "kind": route.kind,
                "url": shown_url(route.url),
                "enabled": route.enabled,
                "held_at": route.held_at,
                "batch_size": route.batch_size,
                "pending": sum(
                    r.agent_id == route.agent_id and r.state is RowState.PENDING
                    for r in self.outbox.rows.values()
                ),
                "dead": sum(
                    r.agent_id == route.agent_id for r in self.outbox.dead_letters.values()
                ),
            }
            for _, route in sorted(self.route_book.routes.items())
        ]
        return _page(rows, after, limit)

    async def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Jobs: running, then queued (oldest first), then settled (newest first).

        Raises:
            InvalidInput: a bad state, limit or cursor.
        """
        _choice(state, JOB_STATES, "state")
        chosen = [
            stored
            for stored in self.job_store.jobs.values()
            if state in (None, stored.job.state.value) and queue in (None, stored.job.queue)
        ]
        chosen.sort(key=_job_order)
        return _page([_job_row(stored) for stored in chosen], after, limit)

    async def job(self, job_id: str) -> dict[str, Any]:
        """One job as the story shows it (its mail without content, a preview).

        Raises:
            JobNotFound: no job has this id.
        """
        stored = self.job_store.jobs.get(job_id)
        if stored is None:
            raise JobNotFound(f"no job has id {shown_key(job_id)}")
        return _job_row(stored, story=True)

    async def story(self, key: str) -> Story:
        """One mail's story by mail key, reply key or job id."""
        reply_mail = mail_key_of(key)
        candidates = [key] if reply_mail is None else [key, reply_mail]
        jobs = [
            stored
            for stored in sorted(
                self.job_store.jobs.values(), key=lambda s: (s.created_at, s.order)
            )
            if stored.job.job_id == key or _mail_key(stored) in candidates
        ]
        carried = [mail_key for mail_key in map(_mail_key, jobs) if mail_key is not None]
        mail_keys: list[str] = list(dict.fromkeys([*carried, *candidates]))
        replies = [
            _reply_row(row, held=False)
            for _, row in sorted(self.outbox.rows.items())
            if row.reply.in_reply_to in mail_keys
        ]
        receipts = [
            {"key": k, "in_reply_to": mail_key_of(k), "recipient_agent_id": r.agent_id,
             "recipient_session_id": r.session_id, "attempts": r.attempts,
             "delivered_at": r.delivered_at}
            for k, r in sorted(self.outbox.receipts.items())
            if mail_key_of(k) in mail_keys
        ]  # fmt: skip
        mailbox = [
            {"key": k, "in_reply_to": reply.in_reply_to}
            for k, reply in sorted(self.outbox.mailbox.items())
            if reply.in_reply_to in mail_keys
        ]
        found: set[str] = {*carried} | {
            str(row["in_reply_to"]) for row in [*replies, *receipts, *mailbox]
        }
        return Story(
            key=key,
            mail_keys=[k for k in mail_keys if k in found],
            jobs=[_job_row(stored, story=True) for stored in jobs],
            replies=replies,
            receipts=receipts,
            mailbox=mailbox,
        )


class InMemorySentJobs:
    """Jobs read back as their senders see them (a :class:`~birddog.ports.SentJobs`).

    Args:
        jobs: the job store fake.
    """

    def __init__(self, jobs: InMemoryJobs) -> None:
        self.jobs = jobs

    async def get(self, job_id: str, *, timeout_s: float) -> SentJob | None:
        """The job with this id (None: no such job)."""
        stored = self.jobs.jobs.get(job_id)
        return None if stored is None else _sent(stored)

    async def of_context(
        self,
        *,
        queue: str,
        agent_id: str,
        from_agent_id: str,
        after_job_id: str | None,
        limit: int,
        timeout_s: float,
    ) -> list[SentJob]:
        """The jobs ``from_agent_id`` sent to ``agent_id``'s session ``queue``, by job id."""
        sent = [_sent(stored) for _, stored in sorted(self.jobs.jobs.items())]
        return [
            job
            for job in sent
            if job.queue == queue
            and job.mail is not None
            and job.mail.to.agent_id == agent_id
            and job.mail.from_.agent_id == from_agent_id
            and (after_job_id is None or job.job_id > after_job_id)
        ][:limit]

    async def add_reply_to(
        self, job_id: str, address: AgentAddress, *, caller: AgentAddress, timeout_s: float
    ) -> Literal["added", "present", "settled", "missing"]:
        """Add ``address`` to the replyTo of ``caller``'s mail of job ``job_id`` while unsettled."""
        found = self._callers(job_id, caller)
        if found is None:
            return "missing"
        stored, mail = found
        if stored.job.state is JobState.SETTLED:
            return "settled"
        if address in mail.reply_to:
            return "present"
        _set_reply_to(stored, [*mail.reply_to, address])
        return "added"

    async def remove_reply_to(
        self, job_id: str, address: AgentAddress, *, caller: AgentAddress, timeout_s: float
    ) -> bool:
        """Remove ``address`` from that replyTo while unsettled; True when it was removed."""
        found = self._callers(job_id, caller)
        if found is None or found[0].job.state is JobState.SETTLED:
            return False
        stored, mail = found
        if address not in mail.reply_to:
            return False
        _set_reply_to(stored, [a for a in mail.reply_to if a != address])
        return True

    async def cancel(
        self, job_id: str, *, caller: AgentAddress, content: str, timeout_s: float
    ) -> Outcome | None:
        """Cancel ``caller``'s job (the job store's cancel-wins); its outcome once settled.

        Raises:
            JobNotFound: no such job, or its mail is not ``caller``'s agent's.
        """
        if self._callers(job_id, caller) is None:
            raise JobNotFound("no task of this caller has that id")
        return await self.jobs.cancel(job_id=job_id, content=content)

    def _callers(self, job_id: str, caller: AgentAddress) -> tuple[StoredJob, Mail] | None:
        stored = self.jobs.jobs.get(job_id)
        mail = None if stored is None else mail_of(stored.job)
        if stored is None or mail is None or mail.from_.agent_id != caller.agent_id:
            return None
        return stored, mail


class InMemoryDaemonRow:
    """This process's row among the running daemons (a :class:`~birddog.ports.DaemonRow`).

    Attributes:
        beats: how many times :meth:`seen` was told.
        stopped: whether :meth:`gone` marked the row stopped.
    """

    def __init__(self) -> None:
        self.beats = 0
        self.stopped = False

    async def seen(self) -> None:
        """Record that this process is alive (a stopped row comes back)."""
        self.beats += 1
        self.stopped = False

    async def gone(self) -> None:
        """Mark the row stopped."""
        self.stopped = True


def _choice(value: str | None, choices: Sequence[str], name: str) -> None:
    if value is not None and value not in choices:
        raise InvalidInput(f"{name} must be one of {', '.join(choices)}", field=name)


def _page(rows: list[dict[str, Any]], after: str | None, limit: int) -> Listing:
    """One page of ``rows`` after the cursor ``after`` (the index of the next row)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be 1 to {MAX_PAGE}", field="limit")
    start = 0
    if after is not None:
        if not after.startswith("i") or not after[1:].isdigit():
            raise InvalidInput("not a cursor of this listing", field="after")
        start = int(after[1:])
    page = rows[start : start + limit]
    more = start + limit < len(rows)
    return Listing(rows=page, next_cursor=f"i{start + limit}" if more else None)


def _reply_row(row: OutboxRow, *, held: bool) -> dict[str, Any]:
    return {
        "key": row.key,
        "in_reply_to": row.reply.in_reply_to,
        "recipient_agent_id": row.agent_id,
        "recipient_session_id": row.recipient.session_id,
        "state": row.state.value,
        "status": "held" if held else "due",
        "attempts": row.attempts,
        "deferrals": row.deferrals,
        "next_try_at": row.due_at,
        "due_at": row.due_at,
        "created_at": row.created_at,
        "last_error": row.last_error,
        "dead_reason": None if row.dead_reason is None else str(row.dead_reason),
    }


def _job_row(stored: StoredJob, *, story: bool = False) -> dict[str, Any]:
    job = stored.job
    mail = mail_of(job)
    row: dict[str, Any] = {
        "job_id": job.job_id,
        "queue": job.queue,
        "lane": job.lane,
        "priority": job.priority,
        "state": job.state.value,
        "kind": str(job.payload.get("kind", DEFAULT_KIND)),
        "outcome": None if job.outcome is None else job.outcome.value,
        "created_at": stored.created_at,
        "digest_at": stored.digest_at,
        "recovery_count": stored.recovery_count,
        "diagnostic": stored.diagnostic,
        "mail_key": None if mail is None else mail.key,
        "sender_agent_id": None if mail is None else mail.from_.agent_id,
    }
    if story:
        shown = None if mail is None else mail.model_dump(mode="json", by_alias=True)
        row["mail"] = None if shown is None else {k: v for k, v in shown.items() if k != "content"}
        row["content_preview"] = None if mail is None else mail.content[:PREVIEW_CHARS]
    return row


def _job_order(stored: StoredJob) -> tuple[int, float, str]:
    state = stored.job.state.value
    at = stored.created_at.timestamp()
    return (_JOB_RANK[state], -at if state == "settled" else at, stored.job.job_id)


def _mail_key(stored: StoredJob) -> str | None:
    mail = mail_of(stored.job)
    return None if mail is None else mail.key


def _sent(stored: StoredJob) -> SentJob:
    job = stored.job
    settled = job.state is JobState.SETTLED
    return SentJob(
        job_id=job.job_id,
        queue=job.queue,
        state=job.state,
        outcome=job.outcome,
        result=stored.content if settled else None,
        diagnostic=stored.diagnostic if settled else None,
        mail=mail_of(job),
        created_at=stored.created_at,
        updated_at=stored.created_at,
    )


def _set_reply_to(stored: StoredJob, reply_to: list[AgentAddress]) -> None:
    """Change the stored mail's replyTo, as ``birddog.a2a_reply_to_add`` does."""
    payload = decode_agent_job(stored.job)
    if payload.mail is None:
        return
    mail = payload.mail.model_copy(update={"reply_to": reply_to})
    changed = payload.model_copy(update={"mail": mail}).model_dump(mode="json", exclude_none=True)
    stored.job = stored.job.model_copy(update={"payload": changed})
