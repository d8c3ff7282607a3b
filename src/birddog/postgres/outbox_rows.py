"""The outbox's row codec: records read as rows and receipts, outcomes written as columns.

Records of ``birddog.outbox`` and of its receipts become models, and what a claim
settled becomes the columns the store's statements take (``unnest``).
A record may hold anything SQL can put there: a claimed row that cannot be read becomes
an :class:`~birddog.core.delivery.UndecodableRow` (dead-lettered by the drain), never an
exception in the drain's loop. Row <-> model mapping lives here, not on the models.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import asyncpg
import orjson

from birddog.core.delivery import (
    Attempt,
    DeadReason,
    OutboxRow,
    Parcel,
    Receipt,
    RowState,
    UndecodableRow,
)
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.mail import Outcome, Reply
from birddog.core.model import ID_MAX_LENGTH, KEY_MAX_LENGTH
from birddog.core.text import first_control
from birddog.ports import Settled

__all__ = [
    "OutcomeColumns",
    "attempt_entry",
    "claim_uuid",
    "decode_claimed",
    "parcel_from_json",
    "receipt_from_record",
    "row_from_record",
]


def row_from_record(record: asyncpg.Record | dict[str, Any]) -> OutboxRow:
    """The outbox row for a database record of ``birddog.outbox``.

    Fields of the stored reply that this version does not know (written by another
    BirdDog version sharing the bus) are dropped, not refused.

    Args:
        record: a record with the columns ``key, reply, state, attempts, deferrals,
            due_at, created_at, last_error, dead_reason`` (and ``traceparent``, if read).

    Returns:
        The row, with its reply validated.

    Raises:
        InvalidInput: the stored reply is not a valid reply.
        ValueError: a column holds a value this version does not know.
    """
    return _row(record, Parcel.of(Reply.model_validate(record["reply"], extra="ignore")))


def _row(record: asyncpg.Record | dict[str, Any], parcel: Parcel) -> OutboxRow:
    """A record's row columns around its reply's parcel.

    Raises:
        ValueError: a column holds a value this version does not know.
    """
    dead_reason = record["dead_reason"]
    return OutboxRow(
        key=record["key"],
        parcel=parcel,
        state=RowState(record["state"]),
        attempts=record["attempts"],
        deferrals=record["deferrals"],
        due_at=record["due_at"],
        created_at=record["created_at"],
        last_error=record["last_error"],
        dead_reason=DeadReason(dead_reason) if dead_reason is not None else None,
        traceparent=record.get("traceparent"),
    )


def decode_claimed(record: asyncpg.Record) -> OutboxRow | UndecodableRow:
    """A claimed record as a row, or, when its reply cannot be read, as an undecodable row.

    The stored reply's JSON becomes the row's :class:`~birddog.core.delivery.Parcel` as is
    (it is the POST body): it is parsed once with orjson and its shape checked
    (:func:`parcel_from_json`), never built into a model on the drain's hot path.

    Args:
        record: a claimed record (the claim statements' columns, ``reply_json`` the
            stored reply as text).

    Returns:
        The row; an :class:`~birddog.core.delivery.UndecodableRow` naming the problem when
        the stored reply is not a valid reply, or does not carry the row's key or
        recipient.
    """
    key: str = record["key"]
    agent_id: str | None = record["recipient_agent_id"]
    parcel = parcel_from_json(record["reply_json"].encode(), key=key, agent_id=agent_id)
    if isinstance(parcel, Parcel):
        try:
            return _row(record, parcel)
        except ValueError as exc:
            error = f"stored row cannot be read: {exc}"
    else:
        error = parcel
    return UndecodableRow(
        key=key,
        agent_id=agent_id,
        attempts=record["attempts"],
        deferrals=record["deferrals"],
        due_at=record["due_at"],
        error=bounded_diagnostic(error),
    )


def parcel_from_json(body: bytes, *, key: str, agent_id: str | None) -> Parcel | str:
    """A stored reply's JSON as a parcel, or why it is not a reply this row can post.

    The shape of :class:`~birddog.core.mail.Reply` is checked field by field (types,
    lengths, no control character in a key or id, a known outcome), without building the
    model; fields this version does not know are left in the body, as a newer version
    wrote them. The database already refuses NUL characters and lone surrogates in JSON.

    Args:
        body: the stored reply, JSON text in UTF-8.
        key: the row's key; the reply must carry it.
        agent_id: the row's recipient; the reply must be addressed to it.

    Returns:
        The parcel, or a one-line reason.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return f"stored reply cannot be read: not JSON ({exc})"
    problem = _reply_shape(data)
    if problem is not None:
        return f"stored reply cannot be read: {problem}"
    if data["key"] != key:
        return "stored reply carries another key than its row"
    to, facts = data["to"], data["reply"]
    if to["agentId"] != agent_id:
        return "stored reply is addressed to another agent than its row"
    return Parcel(
        key=key,
        agent_id=to["agentId"],
        session_id=to["sessionId"],
        command_id=facts["commandId"],
        outcome=Outcome(facts["outcome"]),
        body=body,
    )


_OUTCOMES = frozenset(outcome.value for outcome in Outcome)


def _reply_shape(data: object) -> str | None:
    """What makes decoded JSON not a reply (the model's rules, checked by hand), or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    for name, limit in (("key", None), ("inReplyTo", KEY_MAX_LENGTH)):
        if (why := _name_problem(data.get(name), limit)) is not None:
            return f"{name} {why}"
    for side in ("to", "from"):
        if (why := _address_problem(data.get(side))) is not None:
            return f"{side}{why}"
    if data.get("replyTo", []) != []:
        return "replyTo must be an empty list"
    if not isinstance(data.get("content"), str):
        return "content must be a string"
    created = data.get("createdAt")
    if type(created) is not int or created < 0:
        return "createdAt must be a whole number of milliseconds"
    facts = data.get("reply")
    if not isinstance(facts, dict):
        return "reply must be an object"
    if (why := _name_problem(facts.get("commandId"), ID_MAX_LENGTH)) is not None:
        return f"reply.commandId {why}"
    if facts.get("outcome") not in _OUTCOMES:
        return "reply.outcome is not a known outcome"
    if not isinstance(facts.get("diagnostic", ""), str | None):
        return "reply.diagnostic must be a string"
    return None


def _address_problem(address: object) -> str | None:
    if not isinstance(address, dict) or address.get("kind", "agent") != "agent":
        return " must be an agent address"
    for name in ("agentId", "sessionId"):
        if (why := _name_problem(address.get(name), ID_MAX_LENGTH)) is not None:
            return f".{name} {why}"
    return None


def _name_problem(value: object, limit: int | None) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if limit is not None and not 1 <= len(value) <= limit:
        return f"must be 1 to {limit} characters"
    if first_control(value) is not None:
        return "holds a control character"
    return None


def receipt_from_record(record: asyncpg.Record | dict[str, Any]) -> Receipt:
    """The receipt for a database record of ``birddog.receipts``.

    Args:
        record: a record with the columns of ``birddog.receipts``.

    Returns:
        The receipt.
    """
    return Receipt(
        key=record["key"],
        delivered_at=record["delivered_at"],
        attempts=record["attempts"],
        agent_id=record["recipient_agent_id"],
        session_id=record["recipient_session_id"],
        command_id=record["command_id"],
        outcome=Outcome(record["outcome"]),
    )


@dataclass(frozen=True, slots=True)
class OutcomeColumns:
    """Outcomes split into receipt columns and row columns, for unnest.

    Each side also carries its attempt log entries as one JSON array (one entry, or null,
    per key), appended to the rows' logs in SQL.
    """

    receipt_columns: list[list[Any]]
    receipt_attempts: list[dict[str, Any] | None]
    row_columns: list[list[Any]]
    row_attempts: list[dict[str, Any] | None]

    @classmethod
    def of(cls, items: Sequence[Settled]) -> OutcomeColumns:
        """Split settled outcomes into columns; outcomes of an unreadable claim are left out.

        Args:
            items: what a claim's posts decided.

        Returns:
            The receipt columns and the row columns, each with its attempt entries.
        """
        receipts: list[list[Any]] = [[] for _ in range(9)]
        rows: list[list[Any]] = [[] for _ in range(8)]
        receipt_attempts: list[dict[str, Any] | None] = []
        row_attempts: list[dict[str, Any] | None] = []
        # The rows of one claim share its token, and the rows of one batch their attempt
        # (equal attempts): each is parsed or written out once, not once per row.
        claims: dict[str, uuid.UUID | None] = {}
        entries: dict[Attempt, dict[str, Any]] = {}
        for item in items:
            if (claim := claims.get(item.claim, _UNSEEN)) is _UNSEEN:
                claim = claims[item.claim] = claim_uuid(item.claim)
            if claim is None:
                continue
            outcome = item.outcome
            attempt = item.attempt
            entry = None if attempt is None else entries.get(attempt)
            if attempt is not None and entry is None:
                entry = entries[attempt] = attempt_entry(attempt)
            if isinstance(outcome, Receipt):
                values: tuple[Any, ...] = (
                    claim,
                    outcome.key,
                    outcome.delivered_at,
                    outcome.attempts,
                    outcome.agent_id,
                    outcome.session_id,
                    outcome.command_id,
                    outcome.outcome.value,
                    item.mailbox,
                )
                target = receipts
                receipt_attempts.append(entry)
            else:
                values = (
                    claim,
                    outcome.key,
                    outcome.state.value,
                    outcome.attempts,
                    outcome.deferrals,
                    outcome.due_at,
                    outcome.last_error,
                    outcome.dead_reason.value if outcome.dead_reason is not None else None,
                )
                target = rows
                row_attempts.append(entry)
            for column, value in zip(target, values, strict=True):
                column.append(value)
        return cls(
            receipt_columns=receipts,
            receipt_attempts=receipt_attempts,
            row_columns=rows,
            row_attempts=row_attempts,
        )


def attempt_entry(attempt: Attempt) -> dict[str, Any]:
    """An attempt as the ``attempt_log`` JSON stores it.

    Args:
        attempt: the attempt.

    Returns:
        ``{"at": ISO-8601 UTC, "result", "status", "ms", "error"}``.
    """
    at = attempt.at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "at": at,
        "result": attempt.result,
        "status": attempt.status,
        "ms": attempt.ms,
        "error": attempt.error,
    }


_UNSEEN = uuid.UUID(int=0)
"""A claim token not parsed yet (no claim is the nil UUID: tokens are random)."""


def claim_uuid(claim: str) -> uuid.UUID | None:
    """A claim token as the UUID it names, or None when it names none.

    Args:
        claim: the token, as a page carries it.

    Returns:
        The UUID, or None.
    """
    try:
        return uuid.UUID(claim)
    except ValueError:
        return None
