"""What a post can answer, the rows it moves, and the pure decision between them.

``decide_delivery(row, result, now=..., schedule=..., rng=...)`` is the whole delivery policy: the
adapters only store what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.mail import AgentAddress, Outcome, Reply
from birddog.core.schedule import Random, RetrySchedule
from birddog.core.text import escape_char, first_control


class DeadReason(StrEnum):
    """Why a reply became a dead letter."""

    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    MAX_AGE_EXCEEDED = "max_age_exceeded"
    GONE = "gone"
    UNKNOWN_RECIPIENT = "unknown_recipient"
    REJECTED = "rejected"
    EGRESS_REFUSED = "egress_refused"
    UNDECODABLE = "undecodable"
    UNSENDABLE = "unsendable"


@dataclass(frozen=True, slots=True)
class Accepted:
    """The recipient acknowledged the reply explicitly.

    Attributes:
        status: the HTTP status of the answer (None when nothing was posted: a mailbox).
            Metadata for the attempt log: results compare equal whatever their status.
    """

    status: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Failed:
    """The attempt failed; it costs one attempt (a strike).

    Attributes:
        reason: what went wrong, bounded and redacted.
        status: the HTTP status of the answer, None when there was none (a timeout).
    """

    reason: str
    status: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Deferred:
    """The recipient refused for now and named a time to come back; no strike.

    Attributes:
        until: when to come back.
        reason: why, bounded and redacted.
        status: the HTTP status of the answer (429, 503), None when nothing was posted.
    """

    until: datetime
    reason: str = "deferred"
    status: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Rejected:
    """The recipient can never take this reply: it dies at once.

    Attributes:
        reason: why, bounded and redacted.
        dead_reason: the dead letter's reason.
        status: the HTTP status of the answer (410), None when nothing was posted.
    """

    reason: str
    dead_reason: DeadReason = DeadReason.REJECTED
    status: int | None = field(default=None, compare=False)


DeliveryResult = Accepted | Failed | Deferred | Rejected
"""What one post of one reply came to."""

NOT_ACCEPTED = "recipient did not accept the reply"


def as_result(answer: bool | DeliveryResult) -> DeliveryResult:
    """Read a transport's answer: ``True`` is accepted, ``False`` a failure.

    Args:
        answer: what ``post`` returned.

    Returns:
        The delivery result.
    """
    if answer is True:
        return Accepted()
    if answer is False:
        return Failed(NOT_ACCEPTED)
    if isinstance(answer, Accepted | Failed | Deferred | Rejected):
        return answer
    return Failed(f"transport answered {type(answer).__name__}, not a delivery result")


class RowState(StrEnum):
    """A stored reply is pending (owed) or dead (a dead letter); delivered ones are receipts."""

    PENDING = "pending"
    DEAD = "dead"


class Parcel:
    """One reply as it travels: the facts the drain needs, and its JSON body as stored.

    The body is posted as is, so a claimed reply is never parsed into a model and dumped
    again on the way out; the model is parsed only when something asks for it
    (:attr:`reply`: alerts, fakes, tests), then kept.

    Args:
        key: the reply key (the ``webhook-id``).
        agent_id: the recipient agent id.
        session_id: the recipient session id.
        command_id: the command the reply answers.
        outcome: how the job settled.
        body: the reply's JSON, as stored (UTF-8).
        reply: the model, when the caller has it already.
    """

    __slots__ = ("_reply", "agent_id", "body", "command_id", "key", "outcome", "session_id")

    def __init__(
        self,
        *,
        key: str,
        agent_id: str,
        session_id: str,
        command_id: str,
        outcome: Outcome,
        body: bytes,
        reply: Reply | None = None,
    ) -> None:
        self.key = key
        self.agent_id = agent_id
        self.session_id = session_id
        self.command_id = command_id
        self.outcome = outcome
        self.body = body
        self._reply = reply

    @classmethod
    def of(cls, reply: Reply) -> Parcel:
        """The parcel of a reply model (its body: the model's JSON)."""
        return cls(
            key=reply.key,
            agent_id=reply.to.agent_id,
            session_id=reply.to.session_id,
            command_id=reply.reply.command_id,
            outcome=reply.reply.outcome,
            body=reply.model_dump_json().encode(),
            reply=reply,
        )

    @property
    def reply(self) -> Reply:
        """The reply model, parsed from the body on first use (fields it does not know dropped).

        Raises:
            InvalidInput: the body is not a valid reply.
        """
        if self._reply is None:
            self._reply = Reply.model_validate_json(self.body, extra="ignore")
        return self._reply

    def __eq__(self, other: object) -> bool:
        # Two parcels are the same reply whatever the spelling of their JSON (a stored
        # body's key order and spacing are the database's).
        if not isinstance(other, Parcel):
            return NotImplemented
        return self.body == other.body or self.reply == other.reply

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Parcel(key={self.key!r}, agent_id={self.agent_id!r}, {len(self.body)} bytes)"


@dataclass(frozen=True, slots=True, init=False)
class OutboxRow:
    """A reply in the outbox, with everything an operator needs to see about it.

    Built from a reply model (``reply=``) or, on the drain's hot path, from a
    :class:`Parcel` (``parcel=``: the stored JSON, never parsed into a model).

    Attributes:
        key: the reply key, ``outbox:<mail key>:reply:<index>``.
        parcel: the reply to deliver: its facts and its JSON body.
        state: pending or dead.
        attempts: attempts that counted (failures and the final answer), not deferrals.
        deferrals: transient refusals that moved the row without a strike.
        due_at: when the next attempt is owed.
        created_at: when the row was written; its age counts from here.
        last_error: the last failure or deferral reason, bounded and redacted.
        dead_reason: why the row died, for dead rows.
        traceparent: the W3C trace context its post continues (None: not traced).
    """

    key: str
    parcel: Parcel
    state: RowState
    attempts: int
    deferrals: int
    due_at: datetime
    created_at: datetime
    last_error: str | None
    dead_reason: DeadReason | None
    traceparent: str | None

    def __init__(
        self,
        *,
        key: str,
        state: RowState,
        attempts: int,
        deferrals: int,
        due_at: datetime,
        created_at: datetime,
        last_error: str | None = None,
        dead_reason: DeadReason | None = None,
        reply: Reply | None = None,
        parcel: Parcel | None = None,
        traceparent: str | None = None,
    ) -> None:
        if parcel is None:
            if reply is None:
                raise TypeError("an outbox row needs its reply or its parcel")
            parcel = Parcel.of(reply)
        # Frozen: the fields are set once, here (dataclasses.replace comes through too).
        set_ = object.__setattr__
        set_(self, "key", key)
        set_(self, "parcel", parcel)
        set_(self, "state", state)
        set_(self, "attempts", attempts)
        set_(self, "deferrals", deferrals)
        set_(self, "due_at", due_at)
        set_(self, "created_at", created_at)
        set_(self, "last_error", last_error)
        set_(self, "dead_reason", dead_reason)
        set_(self, "traceparent", traceparent)

    @property
    def reply(self) -> Reply:
        """The reply to deliver, as a model (parsed from the parcel on first use)."""
        return self.parcel.reply

    @property
    def agent_id(self) -> str:
        """The recipient agent id."""
        return self.parcel.agent_id

    @property
    def recipient(self) -> AgentAddress:
        """The address the reply goes to."""
        return AgentAddress(agent_id=self.parcel.agent_id, session_id=self.parcel.session_id)


@dataclass(frozen=True, slots=True, init=False)
class Receipt:
    """The compact proof that a reply was delivered; kept under the reply's key forever.

    Attributes:
        key: the reply key.
        delivered_at: when the recipient accepted it.
        attempts: attempts it took, the accepted one included.
        agent_id: the recipient agent id.
        session_id: the recipient session id.
        command_id: the command the reply answered.
        outcome: how that job settled.
    """

    key: str
    delivered_at: datetime
    attempts: int
    agent_id: str
    session_id: str
    command_id: str
    outcome: Outcome

    def __init__(
        self,
        *,
        key: str,
        delivered_at: datetime,
        attempts: int,
        command_id: str,
        outcome: Outcome,
        recipient: AgentAddress | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        if recipient is not None:
            agent_id, session_id = recipient.agent_id, recipient.session_id
        if agent_id is None or session_id is None:
            raise TypeError("a receipt needs its recipient")
        set_ = object.__setattr__
        set_(self, "key", key)
        set_(self, "delivered_at", delivered_at)
        set_(self, "attempts", attempts)
        set_(self, "agent_id", agent_id)
        set_(self, "session_id", session_id)
        set_(self, "command_id", command_id)
        set_(self, "outcome", outcome)

    @property
    def recipient(self) -> AgentAddress:
        """The address the reply went to."""
        return AgentAddress(agent_id=self.agent_id, session_id=self.session_id)


@dataclass(frozen=True, slots=True)
class UndecodableRow:
    """A stored row whose reply cannot be read back: it is buried at once as ``undecodable``.

    It stands in for the row in a claim and, unchanged, as its own outcome (a dead letter
    with the row's counts and the decoding error).

    Attributes:
        key: the row's key.
        agent_id: the recipient agent id column (None if even that is unreadable).
        attempts: the row's attempts so far.
        deferrals: the row's deferrals so far.
        due_at: the row's due time, kept.
        error: why the reply could not be read, bounded.
    """

    key: str
    agent_id: str | None
    attempts: int
    deferrals: int
    due_at: datetime
    error: str

    @property
    def state(self) -> RowState:
        """Always dead: it is an outcome only as a dead letter."""
        return RowState.DEAD

    @property
    def dead_reason(self) -> DeadReason:
        """Always ``undecodable``."""
        return DeadReason.UNDECODABLE

    @property
    def last_error(self) -> str:
        """The decoding error."""
        return self.error


RowOutcome = OutboxRow | Receipt | UndecodableRow
"""What storing one claimed row comes to: its receipt, the row rescheduled or dead."""

ATTEMPT_LOG_MAX = 20
"""A row keeps the last this many attempts (oldest first); its receipt copies them."""

AttemptResult = Literal["accepted", "failed", "deferred", "rejected"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery attempt as the row's attempt log records it.

    Attributes:
        at: when the attempt began.
        result: what it came to.
        status: the HTTP status of the answer, None when there was none.
        ms: how long it took, in whole milliseconds.
        error: the reason for anything but an acceptance, bounded and redacted.
    """

    at: datetime
    result: AttemptResult
    status: int | None
    ms: int
    error: str | None


def attempt_of(result: DeliveryResult, *, at: datetime, seconds: float) -> Attempt:
    """The attempt log entry for one delivery result.

    Args:
        result: what the attempt came to.
        at: when it began.
        seconds: how long it took.

    Returns:
        The entry, its error bounded by :func:`bounded_diagnostic`.
    """
    ms = max(0, round(seconds * 1000))
    if isinstance(result, Accepted):
        return Attempt(at=at, result="accepted", status=result.status, ms=ms, error=None)
    kind: AttemptResult
    if isinstance(result, Failed):
        kind = "failed"
    elif isinstance(result, Deferred):
        kind = "deferred"
    else:
        kind = "rejected"
    return Attempt(
        at=at, result=kind, status=result.status, ms=ms, error=bounded_diagnostic(result.reason)
    )


def unsendable(reply: Reply | Parcel) -> str | None:
    """Why a reply cannot travel as a signed HTTP post, or None when it can.

    Its key is the ``webhook-id`` header, so it must hold no control or format character
    and no surrounding whitespace (a parser would cut or strip it, and the signature,
    computed over the key, would never verify).

    Args:
        reply: the reply (or its parcel) about to be posted.

    Returns:
        The reason, or None.
    """
    key = reply.key
    index = first_control(key)
    if index is not None:
        return (
            f"reply key holds {escape_char(key[index])} at index {index}; "
            "it cannot travel as the webhook-id header"
        )
    if key != key.strip():
        return "reply key has surrounding whitespace; it cannot travel as the webhook-id header"
    return None


def new_row(reply: Reply, *, now: datetime, traceparent: str | None = None) -> OutboxRow:
    """A freshly owed reply, due at once (its post continuing ``traceparent``'s trace)."""
    return OutboxRow(
        key=reply.key,
        reply=reply,
        state=RowState.PENDING,
        attempts=0,
        deferrals=0,
        due_at=now,
        created_at=now,
        traceparent=traceparent,
    )


def decide_delivery(
    row: OutboxRow,
    result: DeliveryResult,
    *,
    now: datetime,
    schedule: RetrySchedule,
    rng: Random,
) -> OutboxRow | Receipt:
    """The next state of a row after one delivery attempt.

    Args:
        row: the pending row that was posted.
        result: what the post came to.
        now: when the answer came.
        schedule: the retry schedule and age limit.
        rng: the jitter source.

    Returns:
        A receipt when accepted; otherwise the row, rescheduled, deferred or dead.
    """
    if isinstance(result, Accepted):
        parcel = row.parcel
        return Receipt(
            key=row.key,
            delivered_at=now,
            attempts=row.attempts + 1,
            agent_id=parcel.agent_id,
            session_id=parcel.session_id,
            command_id=parcel.command_id,
            outcome=parcel.outcome,
        )
    if isinstance(result, Rejected):
        return _dead(row, result.dead_reason, result.reason, attempts=row.attempts + 1)
    deadline = schedule.deadline(row.created_at)
    if isinstance(result, Deferred):
        if now >= deadline:
            return _dead(row, DeadReason.MAX_AGE_EXCEEDED, result.reason, attempts=row.attempts)
        until = max(result.until, now)
        until = min(until, now + timedelta(seconds=schedule.max_deferral_s), deadline)
        return replace(
            row,
            deferrals=row.deferrals + 1,
            due_at=until,
            last_error=bounded_diagnostic(result.reason),
        )
    attempts = row.attempts + 1
    retry_at = schedule.retry_at(attempts=attempts, now=now, rng=rng)
    if retry_at is None:
        return _dead(row, DeadReason.ATTEMPTS_EXHAUSTED, result.reason, attempts=attempts)
    if now >= deadline:
        return _dead(row, DeadReason.MAX_AGE_EXCEEDED, result.reason, attempts=attempts)
    return replace(
        row,
        attempts=attempts,
        due_at=min(retry_at, deadline),
        last_error=bounded_diagnostic(result.reason),
    )


def _dead(row: OutboxRow, reason: DeadReason, error: str, *, attempts: int) -> OutboxRow:
    return replace(
        row,
        state=RowState.DEAD,
        attempts=attempts,
        last_error=bounded_diagnostic(error),
        dead_reason=reason,
    )
