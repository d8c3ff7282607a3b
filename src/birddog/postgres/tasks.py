"""Sent mail as its sender reads it: one job by id, or a context's jobs (the A2A tasks).

:class:`PostgresSentJobs` reads the jobs an ask wrote (``MailService.send``) back as
:class:`~birddog.core.tasks.SentJob`: state, outcome, the full result and diagnostic, and
the mail. Its one write adds (or removes) a reply address on a mail whose job has not
settled: an A2A push config set after the message; the settlement then derives that
reply like every other. That write is the ``SECURITY DEFINER`` functions
``birddog.a2a_reply_to_add`` / ``_remove`` (migration 0016), for the caller's own mail
only, so the process needs no ``UPDATE`` on jobs. A caller's ``CancelTask`` is
``birddog.a2a_cancel``: the operator's cancel-wins, on the caller's own mail only.
Sending goes through the ask store like every other caller's.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

import asyncpg

from birddog.core.errors import InvalidInput, JobNotFound
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, JobState, check_stored_content
from birddog.core.mail import AgentAddress, Mail, Outcome
from birddog.core.tasks import SentJob
from birddog.postgres.job_rows import note_unreadable, outcome_of, returned_row
from birddog.postgres.pool import Pool, acquire_within, store_errors
from birddog.postgres.sql import queries

__all__ = ["PostgresSentJobs"]

_ADDED: Final[dict[str, Literal["added", "present", "settled"]]] = {
    "added": "added",
    "present": "present",
    "settled": "settled",
}
"""The answers of ``birddog.a2a_reply_to_add`` passed on as they are; the rest are missing."""


class PostgresSentJobs:
    """Reads ask jobs for their senders.

    Args:
        pool: the asyncpg pool on the BirdDog database.
        max_content_bytes: the largest cancellation content stored.
        schedule_wake: arm the drain's wake when a cancellation writes replies.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        schedule_wake: bool = True,
    ) -> None:
        self.pool = pool
        self.max_content_bytes = max_content_bytes
        self.schedule_wake = schedule_wake

    async def get(self, job_id: str, *, timeout_s: float) -> SentJob | None:
        """The job with this id (None: no such job).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        async with acquire_within(self.pool, timeout_s, "sent job") as conn:
            with store_errors("sent job"):
                record = await conn.fetchrow(queries["a2a_task"], job_id)
        return None if record is None else _sent_job(record)

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
        """The jobs ``from_agent_id`` sent to ``agent_id``'s session ``queue``, by job id.

        Args:
            queue: the addressed session.
            agent_id: the addressed agent.
            from_agent_id: the sender.
            after_job_id: start after this job (None: from the first).
            limit: at most this many.
            timeout_s: the longest wait for a pool connection.

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        async with acquire_within(self.pool, timeout_s, "sent jobs") as conn:
            with store_errors("sent jobs"):
                records = await conn.fetch(
                    queries["a2a_tasks_of_context"],
                    queue,
                    agent_id,
                    from_agent_id,
                    after_job_id,
                    limit,
                )
        return [_sent_job(record) for record in records]

    async def add_reply_to(
        self, job_id: str, address: AgentAddress, *, caller: AgentAddress, timeout_s: float
    ) -> Literal["added", "present", "settled", "missing"]:
        """Add ``address`` to the replyTo of job ``job_id``'s mail while it is not settled.

        Through ``birddog.a2a_reply_to_add``, which changes the job only when its mail is
        from ``caller``'s agent (the token's, authenticated by the HTTP layer).

        Args:
            job_id: the job.
            address: the reply address to add (a push config's).
            caller: who asks (the mail's ``from``).
            timeout_s: the longest wait for a pool connection.

        Returns:
            ``added``; ``present`` (it was there); ``settled`` (too late: the replies are
            written); ``missing`` (no such job, it carries no mail, or its mail is not
            ``caller``'s).

        Raises:
            InvalidInput: the function refused the address as no agent address.
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        result = await self._reply_to("a2a_reply_to_add", job_id, address, caller, timeout_s)
        # not_caller is missing for this caller: no task of theirs has that id.
        return _ADDED.get(result, "missing")

    async def remove_reply_to(
        self, job_id: str, address: AgentAddress, *, caller: AgentAddress, timeout_s: float
    ) -> bool:
        """Remove ``address`` from the replyTo of job ``job_id``'s mail while not settled.

        Through ``birddog.a2a_reply_to_remove``, for ``caller``'s mail only.

        Args:
            job_id: the job.
            address: the reply address to remove.
            caller: who asks (the mail's ``from``).
            timeout_s: the longest wait for a pool connection.

        Returns:
            True when it was removed (False: not there, the job settled, or its mail is
            not ``caller``'s).

        Raises:
            InvalidInput: the function refused the address as no agent address.
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        result = await self._reply_to("a2a_reply_to_remove", job_id, address, caller, timeout_s)
        return result == "removed"

    async def cancel(
        self, job_id: str, *, caller: AgentAddress, content: str, timeout_s: float
    ) -> Outcome | None:
        """Cancel ``caller``'s job ``job_id``: a queued one settles, a running one is told.

        Through ``birddog.a2a_cancel``: the operator's cancel-wins (``birddog.cancel``),
        for a job whose mail is from ``caller``'s agent and that this login may read.

        Args:
            job_id: the job.
            caller: who asks (the mail's ``from``; the HTTP layer checked its token).
            content: the cancellation result its replies carry.
            timeout_s: the longest wait for a pool connection.

        Returns:
            The job's outcome when it is settled (``cancelled`` for a queued job), None
            while it is still running.

        Raises:
            InvalidInput: the content holds NUL or a lone surrogate; nothing is written.
            ContentTooLarge: the content is above ``max_content_bytes``.
            JobNotFound: no such job, or its mail is not ``caller``'s.
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        check_stored_content(content, limit_bytes=self.max_content_bytes)
        async with acquire_within(self.pool, timeout_s, "cancel") as conn:
            with store_errors("cancel"):
                row = returned_row(
                    await conn.fetchrow(
                        queries["a2a_cancel"],
                        job_id,
                        caller.agent_id,
                        content,
                        self.max_content_bytes,
                        self.schedule_wake,
                    )
                )
        if row["decision"] == "missing":
            raise JobNotFound("no task of this caller has that id")
        note_unreadable(job_id, row)
        return outcome_of(row)

    async def _reply_to(
        self,
        query: Literal["a2a_reply_to_add", "a2a_reply_to_remove"],
        job_id: str,
        address: AgentAddress,
        caller: AgentAddress,
        timeout_s: float,
    ) -> str:
        value = address.model_dump(mode="json")  # the pool encodes jsonb itself
        operation = "reply to add" if query == "a2a_reply_to_add" else "reply to remove"
        async with acquire_within(self.pool, timeout_s, operation) as conn:
            with store_errors(operation):
                try:
                    result = await conn.fetchval(queries[query], job_id, value, caller.agent_id)
                except asyncpg.InvalidParameterValueError as exc:
                    raise InvalidInput(
                        "a reply address is an agent address object", field="address"
                    ) from exc
        return str(result)


def _sent_job(record: Any) -> SentJob:
    mail: Mail | None
    try:
        mail = None if record["mail"] is None else Mail.model_validate(json.loads(record["mail"]))
    except (InvalidInput, ValueError):
        # A payload SQL wrote by hand is no mail; the job still shows its state.
        mail = None
    return SentJob(
        job_id=record["job_id"],
        queue=record["queue"],
        state=JobState(record["state"]),
        outcome=None if record["outcome"] is None else Outcome(record["outcome"]),
        result=record["result_content"],
        diagnostic=record["diagnostic"],
        mail=mail,
        created_at=record["created_at"],
        updated_at=record["updated_at"],
    )
