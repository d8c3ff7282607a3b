"""The ask store in PostgreSQL: the checks and the write of an ask's (or a send's) mail.

One statement per mail (``birddog.send_mail``, its own transaction, one round trip): the
key is locked (so two asks with one key cannot both write), the sender's route is looked
at (an asker without a route gets a mailbox route in the same transaction; an ask from
one whose route posts to a URL is marked so that its reply lands in the asker's mailbox
anyway), the target must be known, and a key sent before is a replay when the mail is the
same, a conflict otherwise. Only then is the job enqueued.
A caller with a deadline waits for a pool connection no longer than its ``timeout_s``.

:meth:`PostgresAsks.write` writes an :class:`~birddog.core.spool.Outgoing`: a send or an
ask through those checks, or a job enqueued as it is (``birddog send --job-id``). Senders
and the spool's forwarder both write through it, so a spooled mail meets the same rules
later as it would have at once.
"""

from __future__ import annotations

import json

from birddog import tracing
from birddog.core.ask import (
    COMPARED,
    Posted,
    key_conflict,
    replay_conflicts,
    unknown_target,
)
from birddog.core.ask_facts import RECENT_BEAT_S, AskFacts
from birddog.core.errors import (
    InvalidInput,
    InvalidJobPayload,
    StoreRefused,
    StoreUnavailable,
)
from birddog.core.jobs import AgentJobPayload, Job, decode_agent_job
from birddog.core.mail import AgentAddress, Mail
from birddog.core.spool import Outgoing, with_created_at
from birddog.postgres.enqueue import (
    checked_for_enqueue,
    enqueue_accepted_job,
    enqueue_fields,
    enqueued,
)
from birddog.postgres.job_rows import Row
from birddog.postgres.pool import (
    CONNECT_TIMEOUT_S,
    Connection,
    Pool,
    acquire_within,
    store_errors,
)
from birddog.postgres.sql import queries

__all__ = ["PostgresAsks"]


class PostgresAsks:
    """The ask store over an asyncpg pool (an :class:`~birddog.ports.AskStore`).

    Args:
        pool: the pool on the BirdDog database.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def send(
        self,
        job: Job,
        *,
        mailbox_for: AgentAddress | None,
        require_mailbox: bool,
        timeout_s: float,
    ) -> Posted:
        """Check, then enqueue the job of a mail, in one statement (``birddog.send_mail``).

        Args:
            job: the agent job carrying the mail.
            mailbox_for: give this agent a mailbox route when it has none.
            require_mailbox: an ask: its reply to ``mailbox_for`` lands in the mailbox even
                when ``mailbox_for``'s route posts to an inbox URL (the job is marked).
            timeout_s: the longest wait for a pool connection.

        Returns:
            Whether it was a replay, and whether a mailbox route was added.

        Raises:
            UnknownAgent: the target has no route and its session was never sent work.
            JobConflict: the key was sent before with another mail.
            StoreBusy: no pool connection was free within ``timeout_s``; nothing written.
            StoreUnavailable: the database is unreachable; nothing was written.
        """
        mail = decode_agent_job(job).mail
        if mail is None:  # an ask's or a send's job always carries mail
            raise InvalidJobPayload("a mail to send carries mail", field="mail")
        wanted = mailbox_for is not None
        job = checked_for_enqueue(job, sender_mailbox=wanted)
        ids = {"job_id": job.job_id, "queue": job.queue}
        with tracing.span(
            "enqueue", parent=None, root=True, kind="producer", attributes=ids
        ) as span:
            fields, timing = enqueue_fields(job)
            args = (
                mail.key,
                None if mailbox_for is None else mailbox_for.agent_id,
                require_mailbox,
                mailbox_for == mail.from_,
                mail.to.agent_id,
                mail.to.session_id,
                *fields,
                None,
                span.traceparent,
                *timing,
            )
            async with acquire_within(
                self.pool, timeout_s, "send", open_within_s=CONNECT_TIMEOUT_S
            ) as conn:
                with store_errors("send"):
                    row = await conn.fetchrow(queries["ask_send"], *args)
        if row is None:  # the function returns one row
            raise StoreUnavailable("the database answered the send with no row")
        return _sent(row, job, mail)

    async def write(self, outgoing: Outgoing, *, timeout_s: float) -> Posted:
        """Write one mail as its sender asked: checked (:meth:`send`) or enqueued as it is.

        Args:
            outgoing: the job and how its write is checked.
            timeout_s: the longest wait for a pool connection.

        Returns:
            Whether it was a replay, and whether a mailbox route was added.

        Raises:
            UnknownAgent: checked (or ``require_known``), and the target is not known.
            JobConflict: the key (checked) or the job id was sent before with another mail.
            StoreBusy: no pool connection was free within ``timeout_s``; nothing written.
            StoreUnreachable: no connection could be opened; nothing reached the database.
            StoreUnavailable: the database failed during the write; nothing was written.
        """
        if outgoing.checked:
            return await self.send(
                outgoing.job,
                mailbox_for=outgoing.mailbox_for,
                require_mailbox=outgoing.require_mailbox,
                timeout_s=timeout_s,
            )
        async with acquire_within(
            self.pool, timeout_s, "send", open_within_s=CONNECT_TIMEOUT_S
        ) as conn:
            with store_errors("send"):
                async with conn.transaction():
                    job = outgoing.job
                    if outgoing.require_known:
                        to = outgoing.mail.to
                        if not await conn.fetchval(
                            queries["session_known"], to.agent_id, to.session_id
                        ):
                            raise unknown_target(to)
                    if outgoing.keep_stored_time:
                        job = await _with_stored_time(conn, job)
                    inserted = await enqueue_accepted_job(conn, job)
        return Posted(replay=not inserted, mailbox_added=False)

    async def server_identity(self, *, timeout_s: float) -> str | None:
        """``<system identifier>/<database oid>`` of the database written to.

        Args:
            timeout_s: the longest wait for a pool connection.

        Returns:
            The identity; None when this login may not read it (``pg_control_system``
            revoked).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        async with acquire_within(self.pool, timeout_s, "server identity") as conn:
            try:
                with store_errors("server identity"):
                    found: str | None = await conn.fetchval(queries["server_identity"])
            except StoreRefused:
                return None
        return found

    async def ensure_mailbox(self, agent_id: str, *, timeout_s: float) -> bool:
        """Give ``agent_id`` a mailbox route when it has none (``birddog.ensure_mailbox``).

        Under the least-privilege roles only an operator, or the agent's own login, gives
        a route this way; for any other login nothing is added (the first mail it sends
        for the agent brings the route, through ``birddog.enqueue``).

        Args:
            agent_id: the agent.
            timeout_s: the longest wait for a pool connection.

        Returns:
            True when a route was added (False: it had one, of either kind, or this login
            may not give one).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        async with acquire_within(self.pool, timeout_s, "add mailbox") as conn:
            with store_errors("add mailbox"):
                added: bool = await conn.fetchval(queries["routes_ensure_mailbox"], agent_id)
        return added

    async def facts(self, key: str, asker: AgentAddress, *, timeout_s: float) -> AskFacts:
        """Where the ask with mail ``key`` stands for ``asker``, read in one statement.

        Args:
            key: the ask's mail key.
            asker: whose mailbox the reply goes to.
            timeout_s: the longest wait for a pool connection.

        Returns:
            The job's state, the recent beats, the reply's outbox and mailbox rows.

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        async with acquire_within(self.pool, timeout_s, "ask facts") as conn:
            with store_errors("ask facts"):
                record = await conn.fetchrow(
                    queries["ask_facts"], key, asker.agent_id, asker.session_id, RECENT_BEAT_S
                )
        if record is None:  # one row, always (every join is outer)
            raise StoreUnavailable("ask facts: the database returned no row")
        return AskFacts(**dict(record))

    async def mail(self, key: str, *, timeout_s: float) -> Mail | None:
        """The mail sent under ``key`` (None: none, or its job is not readable as one).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable.
        """
        async with acquire_within(self.pool, timeout_s, "mail") as conn:
            with store_errors("mail"):
                stored = await conn.fetchrow(queries["ask_job_by_mail_key"], key)
        if stored is None:
            return None
        try:
            return AgentJobPayload.model_validate(json.loads(stored["payload"])).mail
        except InvalidInput:
            return None


async def _with_stored_time(conn: Connection, job: Job) -> Job:
    """``job`` stamped with the ``createdAt`` of the mail stored under its id, if any.

    A send retried without a pinned time stamps a new one; the stored mail's time makes
    the retry the same mail, so an identical send is a replay and any other difference a
    conflict.
    """
    stored = await conn.fetchrow(queries["jobs_get"], job.job_id)
    if stored is None:
        return job
    try:
        payload = AgentJobPayload.model_validate(json.loads(stored["payload"]))
    except (InvalidInput, ValueError):
        return job  # not an agent job's: the enqueue compares and refuses it
    if payload.mail is None:
        return job
    return with_created_at(job, payload.mail.created_at)


def _sent(row: Row, job: Job, mail: Mail) -> Posted:
    """What ``birddog.send_mail``'s answer says: posted, or the typed error of its check."""
    outcome = row["outcome"]
    if outcome == "unknown":
        raise unknown_target(mail.to)
    if outcome == "stored":
        try:
            stored = AgentJobPayload.model_validate(json.loads(row["stored_payload"]))
        except InvalidInput:
            stored = None
        differing = (
            list(COMPARED)
            if stored is None or stored.mail is None
            else replay_conflicts(stored.mail, mail)
        )
        if stored is not None and stored.kind != decode_agent_job(job).kind:
            differing.append("kind")
        if differing:
            raise key_conflict(mail.key, differing)
        return Posted(replay=True, mailbox_added=False)
    if outcome == "wrong_sender":
        raise InvalidInput("a mailbox route goes only to the mail's sender", field="from")
    if outcome != "enqueued":
        raise StoreUnavailable(f"the database answered the send with {outcome!r}")
    result = enqueued(job, row)
    return Posted(replay=not result.inserted, mailbox_added=result.mailbox_added)
