"""The sender side: enqueue an accepted job inside the caller's own transaction.

A sender calls :func:`enqueue_accepted_job` on its own connection (asyncpg, pooled or
not, or a SQLAlchemy ``AsyncConnection``/``AsyncSession`` on the asyncpg driver), next
to its own writes: commit and the job exists and is announced; roll back and nothing
was sent. Every value reaches SQL as a ``$n`` parameter and JSON travels as text, so
the statement behaves the same whatever JSON codec the caller's connection has.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, LiteralString, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from pydantic import JsonValue

from birddog import tracing
from birddog.core.errors import InvalidInput, JobConflict, StoreUnavailable
from birddog.core.jobs import Job, JobState, carried_mail_key, job_id_taken, mail_key_taken
from birddog.core.model import check_text
from birddog.postgres.job_rows import Row
from birddog.postgres.pool import Connection, store_errors
from birddog.postgres.sql import queries

if TYPE_CHECKING:
    # SQLAlchemy is imported only for a caller that passes one of its connections: it
    # costs every other process a fifth of a second to start.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

SenderConnection: TypeAlias = (
    "Connection | PoolConnectionProxy[asyncpg.Record] | AsyncConnection | AsyncSession"
)
"""What :func:`enqueue_accepted_job` runs on: an asyncpg connection (pooled or not), or a
SQLAlchemy ``AsyncConnection`` or ``AsyncSession`` on the asyncpg driver."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue came to.

    Attributes:
        inserted: True when the job was inserted, False for an identical replay.
        mailbox_added: the mail's sender had no route and got a mailbox route.
    """

    inserted: bool
    mailbox_added: bool = False


async def enqueue_accepted_job(
    conn: SenderConnection, job: Job, *, created_at: datetime | None = None
) -> bool:
    """Insert a queued job inside the caller's transaction; roll back and nothing was sent.

    Enqueueing the same ``jobId`` again is a replay: it is accepted (and writes nothing)
    only when queue, lane, priority, payload, recovery, ``not_before`` and
    ``expires_in_s`` all match the stored job, whatever state that job has reached. A
    job's ``not_before`` keeps it from every claim until then; its ``expires_in_s`` counts
    from ``created_at``. A new job is announced with
    ``NOTIFY birddog_jobs`` (payload: its queue), which Postgres delivers at commit.
    With OpenTelemetry (:mod:`birddog.tracing`) the insert runs in a ``birddog.enqueue``
    span, a child of the current one, whose context the job keeps for its replies' posts.
    The insert and the comparison are one call of ``birddog.enqueue``, a function that
    takes queued jobs only, so a sender's role needs no privilege on the table.

    Args:
        conn: an asyncpg connection (in a transaction or not; without one, the insert and
            its notification commit together on their own), or a SQLAlchemy
            ``AsyncConnection``/``AsyncSession`` on the asyncpg driver (its transaction
            begins if needed and stays open for the caller to commit).
        job: the job, as :func:`birddog.agent_job` returns it: queued, no outcome.
        created_at: the job's age for claim order (default: the database's clock).

    Returns:
        True when the job was inserted, False when it was an identical replay.

    Raises:
        InvalidInput: the job is not queued, has an outcome, or its payload holds what
            PostgreSQL JSON cannot store (NUL, lone surrogates, NaN); nothing is written.
        JobConflict: a job with this id exists with different fields, named in the message.
        StoreUnavailable: the database could not be reached or refused the statement.
    """
    return (await enqueue_job(conn, job, created_at=created_at)).inserted


async def enqueue_job(
    conn: SenderConnection,
    job: Job,
    *,
    created_at: datetime | None = None,
    sender_mailbox: bool = False,
) -> Enqueued:
    """:func:`enqueue_accepted_job`, optionally giving the mail's sender a mailbox route.

    Args:
        conn: as for :func:`enqueue_accepted_job`.
        job: the job.
        created_at: the job's age for claim order (default: the database's clock).
        sender_mailbox: when the job is inserted and the ``from`` agent of its mail has no
            route, give that agent a mailbox route (an asker's, so its replies land in its
            mailbox): never any other agent's.

    Returns:
        Whether the job was inserted, and whether a mailbox route was added.

    Raises:
        InvalidInput: as for :func:`enqueue_accepted_job`, or ``sender_mailbox`` for a job
            without mail.
        JobConflict: a job with this id exists with different fields, named in the message.
        StoreUnavailable: the database could not be reached or refused the statement.
    """
    job = checked_for_enqueue(job, sender_mailbox=sender_mailbox)
    ids = {"job_id": job.job_id, "queue": job.queue}
    with tracing.span("enqueue", parent=None, root=True, kind="producer", attributes=ids) as span:
        fields, timing = enqueue_fields(job)
        args = (*fields, created_at, span.traceparent, sender_mailbox, *timing)
        [row] = await _run_on_sender(conn, queries["jobs_enqueue"], args)
    return enqueued(job, row)


def checked_for_enqueue(job: Job, *, sender_mailbox: bool) -> Job:
    """``job`` as a :class:`Job`, if it may be enqueued (queued, no outcome).

    Raises:
        InvalidInput: the job is not queued, has an outcome, or ``sender_mailbox`` is
            asked for a job without mail.
    """
    if not isinstance(job, Job):
        job = Job.model_validate(job)
    if job.state is not JobState.QUEUED:
        raise InvalidInput(f"an enqueued job must be queued, not {job.state.value}", field="state")
    if job.outcome is not None:
        raise InvalidInput("an enqueued job has no outcome yet", field="outcome")
    if sender_mailbox and not isinstance(job.payload.get("mail"), dict):
        raise InvalidInput("only a job with mail can give its sender a mailbox", field="mail")
    return job


def enqueue_fields(job: Job) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """``birddog.enqueue``'s arguments from a job: its fields, and its timing.

    Raises:
        InvalidInput: the payload holds what PostgreSQL JSON cannot store.
    """
    payload = _json_text(job.payload, field="payload")
    recovery = None if job.recovery is None else job.recovery.model_dump_json()
    fields = (job.job_id, job.queue, job.lane, job.priority, payload, recovery)
    return fields, (job.not_before, job.expires_in_s)


def enqueued(job: Job, row: Row) -> Enqueued:
    """What ``birddog.enqueue``'s answer (``inserted``, ``differing``, ``mailbox_added``) says.

    Raises:
        JobConflict: a job with this id exists with different fields, a job the caller
            may not read holds the id (nothing more is told), or another job carries
            the mail key.
        StoreUnavailable: the stored job could not be read to compare.
    """
    if row["inserted"]:
        return Enqueued(inserted=True, mailbox_added=bool(row["mailbox_added"]))
    differing = row["differing"]
    if differing is None:
        # The insert met the id, yet this transaction cannot read it: it was deleted
        # meanwhile, or the caller's snapshot predates its commit. Nothing to compare.
        raise StoreUnavailable(f"job {job.job_id!r} changed while it was enqueued; try again")
    if differing == [TAKEN_ID]:
        raise job_id_taken(job.job_id)
    if differing == [TAKEN_KEY]:
        raise mail_key_taken(carried_mail_key(job))
    if differing:
        raise JobConflict(
            f"job {job.job_id!r} already exists with a different {', '.join(differing)}; "
            "a replayed enqueue must match the stored job exactly"
        )
    return Enqueued(inserted=False)


TAKEN_ID = "job_id"
"""``birddog.enqueue``'s ``differing`` for an id held by a job the caller may not read."""

TAKEN_KEY = "mail.key"
"""``birddog.enqueue``'s ``differing`` for a mail key another job carries."""


async def _run_on_sender(
    conn: SenderConnection, sql: LiteralString, args: Sequence[object]
) -> list[Row]:
    if isinstance(conn, asyncpg.Connection | PoolConnectionProxy):
        # Outside a transaction the one statement is its own (insert and notification
        # commit together): no BEGIN and COMMIT round trips around it.
        with store_errors("enqueue_accepted_job"):
            return list(await conn.fetch(sql, *args))
    if type(conn).__module__.startswith("sqlalchemy."):
        return await _run_on_sqlalchemy(conn, sql, args)
    raise _not_a_connection(conn)


async def _run_on_sqlalchemy(
    conn: AsyncConnection | AsyncSession, sql: LiteralString, args: Sequence[object]
) -> list[Row]:
    from sqlalchemy.exc import DBAPIError  # noqa: PLC0415 - see TYPE_CHECKING above
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession  # noqa: PLC0415

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, AsyncConnection):
        if conn.dialect.driver != "asyncpg":
            raise TypeError(
                "enqueue_accepted_job needs SQLAlchemy's asyncpg driver "
                f"(postgresql+asyncpg://), not {conn.dialect.driver}"
            )
        # exec_driver_sql goes through SQLAlchemy's cursor, which begins the
        # connection's transaction first; the raw driver connection would not.
        try:
            with store_errors("enqueue_accepted_job"):
                result = await conn.exec_driver_sql(sql, tuple(args))
                return [row._mapping for row in result]
        except DBAPIError as exc:
            # SQLAlchemy wraps the driver's error; its cause is asyncpg's own.
            raise StoreUnavailable(
                f"database refused enqueue_accepted_job: {type(exc.orig).__name__}"
            ) from exc
    raise _not_a_connection(conn)


def _not_a_connection(conn: object) -> TypeError:
    return TypeError(
        "enqueue_accepted_job needs an asyncpg connection or a SQLAlchemy "
        f"AsyncConnection/AsyncSession, not {type(conn).__name__}"
    )


def _json_text(value: JsonValue, *, field: str) -> str:
    """JSON text PostgreSQL's jsonb accepts, or InvalidInput naming the offending field."""
    problem = _json_problem(value, field)
    if problem is not None:
        where, why = problem
        raise InvalidInput(f"{where} {why}", field=where)
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _json_problem(value: object, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        try:
            check_text(value)
        except ValueError as exc:
            return path, str(exc)
    elif isinstance(value, float) and not math.isfinite(value):
        return path, "must be a finite number (JSON has no NaN or Infinity)"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            problem = _json_problem(key, path) or _json_problem(item, f"{path}.{key}")
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}.{index}")
            if problem is not None:
                return problem
    return None


__all__ = ["Enqueued", "SenderConnection", "enqueue_accepted_job", "enqueue_job"]
