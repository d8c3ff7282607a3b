"""Rows of ``birddog.jobs`` read back as jobs and as the lifecycle's facts.

A row may hold anything SQL can put there (a hand edit, another version on a shared
database): reading it as a :class:`~birddog.core.jobs.Job` raises
:class:`~birddog.UnreadableRow` naming the field, while its lifecycle facts can always be
read, so such a job can still be settled.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Protocol

import structlog

from birddog.core.errors import InvalidInput, StoreRefused, UnreadableRow
from birddog.core.jobs import Job, JobState, Recovery
from birddog.core.lifecycle import JobFacts
from birddog.core.mail import Outcome
from birddog.core.text import printable

log = structlog.get_logger("birddog.jobs")


class Row(Protocol):
    """A result row by column name: an asyncpg ``Record`` or a SQLAlchemy ``RowMapping``."""

    def __getitem__(self, key: str, /) -> Any: ...


def job_from_row(row: Row) -> Job:
    """The job a row holds.

    Args:
        row: a ``birddog.jobs`` row, its JSON columns as text (with ``created_at``,
            ``not_before`` and ``expires_at``).

    Returns:
        The job.

    Raises:
        UnreadableRow: the row is not a valid job; ``field`` names the first bad field.
    """
    try:
        recovery = row["recovery"]
        expires_at = row["expires_at"]
        return Job(
            job_id=row["job_id"],
            queue=row["queue"],
            lane=row["lane"],
            priority=row["priority"],
            state=JobState(row["state"]),
            payload=json.loads(row["payload"]),
            recovery=None if recovery is None else _recovery(recovery),
            outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
            not_before=row["not_before"],
            expires_in_s=(
                None if expires_at is None else (expires_at - row["created_at"]).total_seconds()
            ),
        )
    except InvalidInput as exc:
        raise UnreadableRow(
            f"the stored job {row['job_id']!r} cannot be read: {exc}", field=exc.field
        ) from None


def settled_job(row: Row, outcome: Outcome) -> Job:
    """The settled job, as far as fan-out needs it (id, queue, payload, outcome).

    Lane, priority and recovery play no part in a reply, so a bad value there does not
    keep a settled job's replies from its sender.

    Args:
        row: the job's row.
        outcome: the outcome it settles with.

    Returns:
        The settled job.

    Raises:
        UnreadableRow: the id, queue or payload cannot be read.
    """
    try:
        return Job(
            job_id=row["job_id"],
            queue=row["queue"],
            payload=json.loads(row["payload"]),
            state=JobState.SETTLED,
            outcome=outcome,
        )
    except InvalidInput as exc:
        raise UnreadableRow(
            f"the stored job {row['job_id']!r} cannot be read: {exc}", field=exc.field
        ) from None


def facts_from_row(row: Row, *, token: uuid.UUID | None = None) -> JobFacts:
    """The lifecycle facts of a row; never raises on bad JSON in it.

    Args:
        row: the job's row.
        token: the claim token presented with the event, if any.

    Returns:
        The facts; a recovery policy that cannot be read counts as none (a job is never
        run again on a budget nobody can read).
    """
    cancelled = row["cancel_requested_at"] is not None
    return JobFacts(
        state=JobState(row["state"]),
        claim_matches=token is not None and row["claim_token"] == token,
        recovery_count=row["recovery_count"],
        max_recoveries=max_recoveries(row),
        cancellation=(row["cancel_content"] or "") if cancelled else None,
        outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
        created_at=row["created_at"],
        lease_expires_at=row["lease_expires_at"],
    )


def max_recoveries(row: Row) -> int:
    """The row's recovery budget: 0 without a policy or with one that cannot be read."""
    recovery = row["recovery"]
    if recovery is None:
        return 0
    try:
        return _recovery(recovery).max_recoveries
    except InvalidInput:
        return 0


def _recovery(text: str) -> Recovery:
    try:
        return Recovery.model_validate_json(text)
    except InvalidInput as exc:
        pairs = [(f"recovery.{field}" if field else "recovery", why) for field, why in exc.errors]
        pairs = pairs or [("recovery", str(exc))]
        text = "; ".join(f"{field}: {why}" for field, why in pairs)
        raise InvalidInput(f"invalid Job: {text}", field=pairs[0][0], errors=pairs) from None


def claim_token(text: str) -> uuid.UUID | None:
    """A claim token as a UUID; None when it cannot be one (so it holds nothing)."""
    try:
        return uuid.UUID(str(text))
    except ValueError:
        return None


def note_unreadable(job_id: str, row: Row) -> None:
    """Log a settled job whose payload is no agent job: it owed no replies."""
    if row["unreadable"] is not None:
        # The store is Watchdog-shaped and never requires a BirdDog payload; a job
        # that is not an agent job has no mail, so it owes no replies.
        log.warning(
            "job_settled_without_replies", job_id=printable(job_id), field=row["unreadable"]
        )


def returned_row(row: Row | None) -> Row:
    """The one row a write function always returns.

    Raises:
        StoreRefused: the function returned none.
    """
    if row is None:
        raise StoreRefused("the database's write function returned no row")
    return row


def outcome_of(row: Row) -> Outcome | None:
    """The job's outcome once the function's decision is stored (None: not settled)."""
    return None if row["outcome"] is None else Outcome(row["outcome"])
