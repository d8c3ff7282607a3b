"""The job lifecycle as one pure function: job facts + an event give the next step.

``decide_job(facts, event, now=..., limits=...)`` is the whole job policy, as
:func:`birddog.core.delivery.decide_delivery` is for outbox rows; the job stores only carry out
what it returns. The rules, in the order they apply:

- Only the current claim may finish a running job; anything else is refused as a stale
  claim (a replay of the settlement that already happened is kept, not refused).
- A recorded cancellation wins over whatever the executor reports, and over lost leases:
  the job settles ``cancelled`` with the recorded content (cut to the content limit if
  it was recorded under a larger one, never refused).
- A result that cannot be stored (not a string, a NUL, a lone surrogate, above the
  content limit) settles ``failed`` at once with a diagnostic that says why; the work
  never runs again for it.
- A worker that vanished (lease expired) or stopped the work itself (shutdown, handler
  timeout) gives the job back to its queue while ``recovery_count < max_recoveries``;
  otherwise the job settles ``outcome_unknown`` (nobody knows whether the work
  happened) or ``interrupted`` (the worker knows it did not finish).
- A job queued longer than the maximum queued age settles ``cancelled`` with a result
  that says so, so its sender hears back instead of waiting on silence.

The function never raises and never reads a clock: ``now`` and the limits are parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH, bounded_diagnostic
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, JobState
from birddog.core.mail import Outcome
from birddog.core.text import escape_char

DEFAULT_MAX_QUEUED_S: Final = 86_400.0
"""A job nobody claims within a day is cancelled (``BIRDDOG_JOB_MAX_QUEUED_S``)."""

LEASE_EXPIRED_DIAGNOSTIC: Final = "worker lease expired; nobody knows whether the work happened"
"""The diagnostic of a job whose worker vanished with no recovery budget left."""

WORKER_STOPPED_DIAGNOSTIC: Final = "worker shut down before the handler finished"
"""The diagnostic of a job its worker stopped on shutdown."""


# --------------------------------------------------------------------------------------
# facts and limits
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the lifecycle needs to know about one stored job.

    Attributes:
        state: queued, running or settled.
        claim_matches: whether the claim token presented with the event is the job's
            current claim (only settle and the worker's own stops present one).
        recovery_count: how many times the job was given back to its queue already.
        max_recoveries: the job's recovery budget (0 without a recovery policy).
        cancellation: the content of the recorded cancellation, None when none was
            recorded.
        outcome: the outcome of a settled job.
        created_at: when the job was enqueued; its queued age counts from here.
        lease_expires_at: when the running claim lapses.
    """

    state: JobState
    claim_matches: bool = False
    recovery_count: int = 0
    max_recoveries: int = 0
    cancellation: str | None = None
    outcome: Outcome | None = None
    created_at: datetime | None = None
    lease_expires_at: datetime | None = None

    @property
    def budget_left(self) -> bool:
        """Whether losing the worker gives the job back to its queue."""
        return self.recovery_count < self.max_recoveries


@dataclass(frozen=True, slots=True)
class Limits:
    """The configured bounds the lifecycle enforces.

    Attributes:
        max_content_bytes: the largest settlement or cancellation content, UTF-8 bytes.
        max_queued_s: the longest a job may wait for a worker before it is cancelled.
    """

    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    max_queued_s: float = DEFAULT_MAX_QUEUED_S


# --------------------------------------------------------------------------------------
# events
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettleRequested:
    """The executor finished the work and reports how it ended.

    ``content`` is whatever the handler returned: a result that cannot be stored is an
    event in its own right (it settles ``failed``), not an error.
    """

    outcome: Outcome
    content: object
    diagnostic: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """Someone asked for the job to be cancelled; its replies will carry ``content``."""

    content: str


@dataclass(frozen=True, slots=True)
class LeaseExpired:
    """The running job's worker stopped heartbeating: it is gone."""


@dataclass(frozen=True, slots=True)
class WorkerStopped:
    """The worker stopped the work itself (shutdown, a cancelled handler)."""

    diagnostic: str = WORKER_STOPPED_DIAGNOSTIC


@dataclass(frozen=True, slots=True)
class HandlerTimedOut:
    """The handler ran past its timeout and was stopped."""

    timeout_s: float


@dataclass(frozen=True, slots=True)
class QueuedTooLong:
    """The reaper found the job still queued; it goes if it is past the maximum age."""


JobEvent = (
    SettleRequested
    | CancelRequested
    | LeaseExpired
    | WorkerStopped
    | HandlerTimedOut
    | QueuedTooLong
)
"""Everything that can happen to a job."""

ClaimEvent = SettleRequested | WorkerStopped | HandlerTimedOut
"""What a worker reports about a job it holds, with its claim token."""


# --------------------------------------------------------------------------------------
# decisions
# --------------------------------------------------------------------------------------


class Cause(StrEnum):
    """Why a job settles the way it does (for logs and metrics, never for replies)."""

    REQUESTED = "requested"
    """The executor's own outcome."""
    CANCELLED = "cancelled"
    """A recorded cancellation won."""
    UNSTORABLE_RESULT = "unstorable_result"
    """The result could not be stored."""
    LEASE_EXPIRED = "lease_expired"
    """The worker vanished and no recovery budget was left."""
    INTERRUPTED = "interrupted"
    """The worker stopped the work and no recovery budget was left."""
    QUEUED_TOO_LONG = "queued_too_long"
    """No worker claimed the job within the maximum queued age."""


@dataclass(frozen=True, slots=True)
class Settle:
    """Settle the job and write its replies, in one transaction.

    Attributes:
        outcome: the outcome to store.
        content: the text owed to correspondents; storable and within the limit.
        diagnostic: the bounded diagnostic to store (replies carry it only for
            ``failed``, ``interrupted`` and ``outcome_unknown``).
        cause: why, for logs and metrics.
        records_cancellation: record ``content`` as the job's cancellation as well.
    """

    outcome: Outcome
    content: str
    diagnostic: str | None
    cause: Cause
    records_cancellation: bool = False


@dataclass(frozen=True, slots=True)
class Requeue:
    """Give the running job back to its queue (claim cleared, ``recovery_count`` + 1).

    Attributes:
        diagnostic: the bounded reason to store, or None to keep the last one.
    """

    diagnostic: str | None


@dataclass(frozen=True, slots=True)
class RecordCancellation:
    """Record the cancellation of a running job; its worker learns of it at a heartbeat."""

    content: str


@dataclass(frozen=True, slots=True)
class Keep:
    """Change nothing: the event was already carried out, or does not apply (yet)."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the event: the claim presented does not hold the job (a stale claim)."""

    reason: str


Decision = Settle | Requeue | RecordCancellation | Keep | Refuse
"""What the store does with the job."""


@dataclass(frozen=True, slots=True)
class Finished:
    """What an event came to for one job, once the store carried the decision out.

    Attributes:
        job_id: the job.
        decision: what the lifecycle decided (:class:`Settle`, :class:`Requeue`,
            :class:`RecordCancellation`, or :class:`Keep` for a replay).
        outcome: the job's outcome now; None while it is queued or running.
        keys: the reply keys written (none for a job without mail, or a replay).
    """

    job_id: str
    decision: Decision
    outcome: Outcome | None
    keys: list[str]


# --------------------------------------------------------------------------------------
# the decision
# --------------------------------------------------------------------------------------


def decide_job(facts: JobFacts, event: JobEvent, *, now: datetime, limits: Limits) -> Decision:
    """The next step of a job after an event.

    Args:
        facts: the job as stored, and whether the event's claim is the current one.
        event: what happened.
        now: the time of the event (queued age and lease expiry are judged at it).
        limits: the content limit and the maximum queued age.

    Returns:
        The decision for the store to carry out. Never raises.
    """
    if isinstance(event, SettleRequested):
        return _on_settle(facts, event, limits)
    if isinstance(event, CancelRequested):
        return _on_cancel(facts, event, limits)
    if isinstance(event, LeaseExpired):
        return _on_lease_expired(facts, now, limits)
    if isinstance(event, QueuedTooLong):
        return _on_queued_too_long(facts, now, limits)
    return _on_stopped(facts, stop_diagnostic(event), limits)


def result_settlement(event: SettleRequested, limits: Limits) -> Settle:
    """What a result settles with when no cancellation was recorded.

    The result as reported, its diagnostic bounded; a result that cannot be stored (not a
    string, a NUL, a lone surrogate, above the content limit) settles ``failed`` instead,
    with a diagnostic that says why.

    Args:
        event: the executor's report.
        limits: the content limit.

    Returns:
        The settlement.
    """
    problem = result_problem(event.content, limit_bytes=limits.max_content_bytes)
    if problem is not None or not isinstance(event.content, str):
        why = problem or "handler returned no text"
        return Settle(Outcome.FAILED, "", bounded_diagnostic(why), Cause.UNSTORABLE_RESULT)
    return Settle(event.outcome, event.content, _bounded(event.diagnostic), Cause.REQUESTED)


def stop_diagnostic(event: WorkerStopped | HandlerTimedOut) -> str:
    """The bounded diagnostic a stop requeues or settles a job with.

    Args:
        event: the worker's stop.

    Returns:
        e.g. ``"handler timed out after 90 s"``.
    """
    if isinstance(event, HandlerTimedOut):
        return bounded_diagnostic(f"handler timed out after {format_duration(event.timeout_s)}")
    return bounded_diagnostic(event.diagnostic)


def queued_too_long_settlement(
    recovery_count: int, limits: Limits, *, expires_in_s: float | None = None
) -> Settle:
    """What a job nobody claimed within the maximum queued age, or its expiry, settles with.

    Args:
        recovery_count: how many times the job lost its worker and was queued again.
        limits: the maximum queued age.
        expires_in_s: the job's own expiry, when that is what ran out.

    Returns:
        ``cancelled``, its content saying why, recorded as the job's cancellation.
    """
    if expires_in_s is not None:
        content = queued_too_long_text(expires_in_s, recovered=recovery_count, expiry=True)
    else:
        content = queued_too_long_text(limits.max_queued_s, recovered=recovery_count)
    return Settle(
        Outcome.CANCELLED,
        content,
        bounded_diagnostic(content),
        Cause.QUEUED_TOO_LONG,
        records_cancellation=True,
    )


def _on_settle(facts: JobFacts, event: SettleRequested, limits: Limits) -> Decision:
    if facts.state is JobState.SETTLED:
        # The same claim settling again is a replay when it comes to what is stored:
        # a crash between commit and answer must not turn into an error.
        if facts.claim_matches:
            again = _finish(facts, event, limits)
            if again.outcome is facts.outcome:
                return Keep()
        return Refuse(f"the job is already settled {_value(facts.outcome)}")
    if facts.state is not JobState.RUNNING or not facts.claim_matches:
        return Refuse(f"the job is not running under this claim (it is {facts.state.value})")
    return _finish(facts, event, limits)


def _finish(facts: JobFacts, event: SettleRequested, limits: Limits) -> Settle:
    if facts.cancellation is not None:
        return cancelled_settlement(facts.cancellation, _bounded(event.diagnostic), limits)
    return result_settlement(event, limits)


def _on_cancel(facts: JobFacts, event: CancelRequested, limits: Limits) -> Decision:
    if facts.state is JobState.SETTLED:
        return Keep()
    if facts.state is JobState.QUEUED:
        # Never ran, and never will: settle now with the first content recorded.
        first = event.content if facts.cancellation is None else facts.cancellation
        settle = cancelled_settlement(first, None, limits)
        return Settle(
            settle.outcome,
            settle.content,
            settle.diagnostic,
            settle.cause,
            records_cancellation=facts.cancellation is None,
        )
    if facts.cancellation is not None:
        return Keep()
    return RecordCancellation(event.content)


def _on_lease_expired(facts: JobFacts, now: datetime, limits: Limits) -> Decision:
    if facts.state is not JobState.RUNNING:
        return Keep()
    if facts.lease_expires_at is not None and facts.lease_expires_at > now:
        return Keep()
    if facts.cancellation is not None:
        return cancelled_settlement(facts.cancellation, LEASE_EXPIRED_DIAGNOSTIC, limits)
    if facts.budget_left:
        return Requeue(None)
    return Settle(Outcome.OUTCOME_UNKNOWN, "", LEASE_EXPIRED_DIAGNOSTIC, Cause.LEASE_EXPIRED)


def _on_stopped(facts: JobFacts, diagnostic: str, limits: Limits) -> Decision:
    # ``diagnostic`` is bounded already (stop_diagnostic).
    if facts.state is JobState.SETTLED:
        if facts.claim_matches and facts.outcome in (Outcome.INTERRUPTED, Outcome.CANCELLED):
            return Keep()
        return Refuse(f"the job is already settled {_value(facts.outcome)}")
    if facts.state is not JobState.RUNNING or not facts.claim_matches:
        return Refuse(f"the job is not running under this claim (it is {facts.state.value})")
    if facts.cancellation is not None:
        return cancelled_settlement(facts.cancellation, diagnostic, limits)
    if facts.budget_left:
        return Requeue(diagnostic)
    return Settle(Outcome.INTERRUPTED, "", diagnostic, Cause.INTERRUPTED)


def _on_queued_too_long(facts: JobFacts, now: datetime, limits: Limits) -> Decision:
    if facts.state is not JobState.QUEUED or facts.created_at is None:
        return Keep()
    if (now - facts.created_at).total_seconds() < limits.max_queued_s:
        return Keep()
    return queued_too_long_settlement(facts.recovery_count, limits)


def cancelled_settlement(content: str, diagnostic: str | None, limits: Limits) -> Settle:
    """What a job settles with when a recorded cancellation wins.

    The recorded content, cut to the content limit with a visible mark when it was
    recorded under a larger one (never refused), and a note saying so joined to the
    diagnostic.

    Args:
        content: the recorded cancellation's content.
        diagnostic: the event's diagnostic, bounded already (None: none).
        limits: the content limit.

    Returns:
        The ``cancelled`` settlement.
    """
    # A recorded cancellation was checked when it was recorded; whatever it holds now, the
    # settlement must still be storable, so NUL and lone surrogates become U+FFFD here.
    content = _STORABLE.sub("\ufffd", content)
    kept, cut = bounded_content(content, limit_bytes=limits.max_content_bytes)
    bounded = diagnostic
    if cut:
        # The note is BirdDog's own text: it is joined to the bounded diagnostic and cut,
        # not masked again, so the database's settle function can write the same words.
        note = (
            f"the cancellation content was {format_bytes(_size(content))}; the limit is "
            f"{format_bytes(limits.max_content_bytes)}, so it was cut"
        )
        bounded = note if bounded is None else f"{bounded}; {note}"[:DIAGNOSTIC_MAX_LENGTH]
    return Settle(Outcome.CANCELLED, kept, bounded, Cause.CANCELLED)


# --------------------------------------------------------------------------------------
# texts and bounds
# --------------------------------------------------------------------------------------


def result_problem(content: object, *, limit_bytes: int) -> str | None:
    """Why a result cannot be stored as reply content, or None when it can.

    The text names the problem and never quotes the content.

    Args:
        content: what the handler returned.
        limit_bytes: the content limit, in UTF-8 bytes.

    Returns:
        e.g. ``"handler returned 1.3 MiB; the limit is 1 MiB"``, or None.
    """
    if not isinstance(content, str):
        return f"handler returned {type(content).__name__}, not a string"
    nul = content.find("\x00")
    if nul >= 0:
        return (
            f"handler returned text with a NUL character at index {nul}, "
            "which PostgreSQL cannot store"
        )
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError as exc:
        char = escape_char(content[exc.start])
        return (
            f"handler returned text with a lone surrogate ({char}) at index {exc.start}, "
            "which is not valid Unicode"
        )
    if size > limit_bytes:
        shown, limit = format_bytes(size), format_bytes(limit_bytes)
        if shown == limit:
            shown, limit = f"{size} bytes", f"{limit_bytes} bytes"
        return f"handler returned {shown}; the limit is {limit}"
    return None


def bounded_content(content: str, *, limit_bytes: int) -> tuple[str, bool]:
    """Content cut to fit the limit, with a visible mark where it was cut.

    Args:
        content: storable text (no NUL, no lone surrogate).
        limit_bytes: the content limit, in UTF-8 bytes.

    Returns:
        ``(text, cut)``: the text unchanged and False when it fits, else the longest
        prefix that fits with the mark, cut on a character boundary, and True.
    """
    raw = content.encode("utf-8", "surrogatepass")
    if len(raw) <= limit_bytes:
        return content, False
    mark = f"\n[cut by BirdDog: {format_bytes(len(raw))} is above the limit]"
    room = max(limit_bytes - len(mark.encode("utf-8")), 0)
    head = raw[:room].decode("utf-8", "ignore")
    if room == 0:  # a limit too small for the mark: just the prefix that fits
        return raw[: max(limit_bytes, 0)].decode("utf-8", "ignore"), True
    return head + mark, True


BOUNCE_PREFIX = "BirdDog cancelled this job:"
"""How the result of a job nobody claimed in time begins (:func:`queued_too_long_text`)."""


def queued_too_long_text(max_queued_s: float, *, recovered: int = 0, expiry: bool = False) -> str:
    """The cancellation result of a job nobody claimed in time.

    Args:
        max_queued_s: the maximum queued age (or the job's own expiry).
        recovered: how many times the job lost its worker and was queued again.
        expiry: ``max_queued_s`` is the job's own expiry (``send --expires-in``).

    Returns:
        e.g. ``"BirdDog cancelled this job: no worker claimed it within 24 h"``, or
        ``"... within its expiry of 30 s"``.
    """
    within = format_duration(max_queued_s)
    if expiry:
        within = f"its expiry of {within}"
    if recovered:
        return (
            f"{BOUNCE_PREFIX} it lost its worker {recovered} "
            f"{'time' if recovered == 1 else 'times'} and was still queued {within} "
            "after it was sent"
        )
    return f"{BOUNCE_PREFIX} no worker claimed it within {within}"


def format_duration(seconds: float) -> str:
    """A duration the way an operator says it: ``24 h``, ``90 min``, ``2 days``, ``1.5 s``.

    Args:
        seconds: the duration.

    Returns:
        The readable duration.
    """
    if seconds >= 2 * 86_400 and seconds % 86_400 == 0:
        return f"{seconds / 86_400:g} days"
    if seconds >= 3_600:
        return f"{_one_decimal(seconds / 3_600)} h"
    if seconds >= 60:
        return f"{_one_decimal(seconds / 60)} min"
    return f"{seconds:g} s"


def format_bytes(size: int) -> str:
    """A size the way an operator says it: ``512 bytes``, ``64 KiB``, ``1.3 MiB``.

    Args:
        size: the size in bytes.

    Returns:
        The readable size.
    """
    if size < 1024:
        return f"{size} {'byte' if size == 1 else 'bytes'}"
    if size < 1024 * 1024:
        return f"{_one_decimal(size / 1024)} KiB"
    return f"{_one_decimal(size / (1024 * 1024))} MiB"


def _one_decimal(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


_STORABLE = re.compile("[\x00\ud800-\udfff]")
"""What PostgreSQL text or UTF-8 cannot carry: NUL and lone surrogates."""


def _size(content: str) -> int:
    return len(content.encode("utf-8", "surrogatepass"))


def _bounded(diagnostic: str | None) -> str | None:
    return None if diagnostic is None else bounded_diagnostic(diagnostic)


def _value(outcome: Outcome | None) -> str:
    return "with no outcome" if outcome is None else outcome.value
