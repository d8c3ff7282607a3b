"""Sent mail as its sender reads it: one job by id, or a context's jobs (the A2A tasks).

:class:`PostgresSentJobs` reads the jobs an ask wrote (``Asking.send``) back as
:class:`~birddog.core.tasks.SentJob`: state, outcome, the full result and diagnostic, and
the mail. Its one write adds (or removes) a reply address on a mail whose job has not
settled: an A2A push config set after the message; the settlement then derives that
reply like every other. Sending and cancelling go through the ask store and the job
store like every other caller's.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from birddog.core.errors import InvalidInput
from birddog.core.jobs import JobState
from birddog.core.mail import AgentAddress, Mail, Outcome
from birddog.core.tasks import SentJob
from birddog.postgres.pool import Pool, acquire_within, store_errors
from birddog.postgres.sql import queries

__all__ = ["PostgresSentJobs"]


class PostgresSentJobs:
    """Reads ask jobs for their senders.

    Args:
        pool: the asyncpg pool on the BirdDog database.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

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
        self, job_id: str, address: AgentAddress, *, timeout_s: float
    ) -> Literal["added", "present", "settled", "missing"]:
        """Add ``address`` to the replyTo of job ``job_id``'s mail while it is not settled.

        Returns:
            ``added``; ``present`` (it was there); ``settled`` (too late: the replies are
            written); ``missing`` (no such job, or it carries no mail).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        value = address.model_dump(mode="json")  # the pool encodes jsonb itself
        async with acquire_within(self.pool, timeout_s, "reply to add") as conn:
            with store_errors("reply to add"):
                record = await conn.fetchrow(queries["a2a_reply_to_add"], job_id, value)
        if record is None:
            return "missing"
        if record["added"]:
            return "added"
        return "present" if record["present"] else "settled"

    async def remove_reply_to(
        self, job_id: str, address: AgentAddress, *, timeout_s: float
    ) -> bool:
        """Remove ``address`` from the replyTo of job ``job_id``'s mail while not settled.

        Returns:
            True when it was removed (False: not there, or the job settled).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        value = address.model_dump(mode="json")  # the pool encodes jsonb itself
        async with acquire_within(self.pool, timeout_s, "reply to remove") as conn:
            with store_errors("reply to remove"):
                removed = await conn.fetchval(queries["a2a_reply_to_remove"], job_id, value)
        return removed is not None


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
