"""decide_job(facts, event, now): the whole job lifecycle as a pure function."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH
from birddog.core.jobs import JobState
from birddog.core.lifecycle import (
    LEASE_EXPIRED_DIAGNOSTIC,
    WORKER_STOPPED_DIAGNOSTIC,
    CancelRequested,
    Cause,
    Decision,
    HandlerTimedOut,
    JobEvent,
    JobFacts,
    Keep,
    LeaseExpired,
    Limits,
    QueuedTooLong,
    RecordCancellation,
    Refuse,
    Requeue,
    Settle,
    SettleRequested,
    WorkerStopped,
    bounded_content,
    decide_job,
    format_bytes,
    format_duration,
    queued_too_long_text,
    result_problem,
)
from birddog.core.mail import Outcome

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = Limits(max_content_bytes=100, max_queued_s=3600)
COMPLETED = Outcome.COMPLETED
CANCELLED = Outcome.CANCELLED
FAILED = Outcome.FAILED


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


QUEUED = JobFacts(state=JobState.QUEUED, created_at=T0)
RUNNING = JobFacts(
    state=JobState.RUNNING, claim_matches=True, created_at=T0, lease_expires_at=at(60)
)
RUNNING_OTHER_CLAIM = replace(RUNNING, claim_matches=False)
RUNNING_BUDGET = replace(RUNNING, max_recoveries=2, recovery_count=1)
RUNNING_SPENT = replace(RUNNING, max_recoveries=2, recovery_count=2)
RUNNING_CANCELLED = replace(RUNNING, cancellation="stop", max_recoveries=5)
RUNNING_CANCELLED_HUGE = replace(RUNNING, cancellation="é" * 500)
SETTLED_DONE = JobFacts(state=JobState.SETTLED, claim_matches=True, outcome=COMPLETED)
SETTLED_CANCELLED = replace(SETTLED_DONE, outcome=CANCELLED, cancellation="stop")
SETTLED_INTERRUPTED = replace(SETTLED_DONE, outcome=Outcome.INTERRUPTED)
SETTLED_FAILED = replace(SETTLED_DONE, outcome=FAILED)
SETTLED_OTHER_CLAIM = replace(SETTLED_DONE, claim_matches=False)

DONE = SettleRequested(COMPLETED, "the answer")
TOO_BIG = "x" * 101
TOO_LONG_TEXT = "BirdDog cancelled this job: no worker claimed it within 1 h"

CASES: list[tuple[str, JobFacts, JobEvent, datetime, Decision]] = [
    # settle
    ("settle completed", RUNNING, DONE, at(1), Settle(COMPLETED, "the answer", None, Cause.REQUESTED)),
    ("settle failed keeps the diagnostic", RUNNING, SettleRequested(FAILED, "", "boom"), at(1), Settle(FAILED, "", "boom", Cause.REQUESTED)),
    ("settle by another claim is stale", RUNNING_OTHER_CLAIM, DONE, at(1), Refuse("the job is not running under this claim (it is running)")),
    ("settle a queued job is stale", replace(QUEUED, claim_matches=True), DONE, at(1), Refuse("the job is not running under this claim (it is queued)")),
    ("settle after the lease lapsed still counts", RUNNING, DONE, at(600), Settle(COMPLETED, "the answer", None, Cause.REQUESTED)),
    ("cancellation wins over completed", RUNNING_CANCELLED, DONE, at(1), Settle(CANCELLED, "stop", None, Cause.CANCELLED)),
    ("cancellation wins over an unstorable result", RUNNING_CANCELLED, SettleRequested(COMPLETED, "a\x00b"), at(1), Settle(CANCELLED, "stop", None, Cause.CANCELLED)),
    ("replay of the same settlement is kept", SETTLED_DONE, DONE, at(1), Keep()),
    ("replay after the cancellation won is kept", SETTLED_CANCELLED, DONE, at(1), Keep()),
    ("replay of an unstorable result is kept", SETTLED_FAILED, SettleRequested(COMPLETED, "a\x00b"), at(1), Keep()),
    ("a different outcome for a settled job is stale", SETTLED_DONE, SettleRequested(FAILED, ""), at(1), Refuse("the job is already settled completed")),
    ("a settled job under another claim is stale", SETTLED_OTHER_CLAIM, DONE, at(1), Refuse("the job is already settled completed")),
    # unstorable results
    ("a NUL settles failed", RUNNING, SettleRequested(COMPLETED, "ab\x00c"), at(1), Settle(FAILED, "", "handler returned text with a NUL character at index 2, which PostgreSQL cannot store", Cause.UNSTORABLE_RESULT)),
    ("a lone surrogate settles failed", RUNNING, SettleRequested(COMPLETED, "a\ud800"), at(1), Settle(FAILED, "", "handler returned text with a lone surrogate (\\ud800) at index 1, which is not valid Unicode", Cause.UNSTORABLE_RESULT)),
    ("over the limit settles failed", RUNNING, SettleRequested(COMPLETED, TOO_BIG), at(1), Settle(FAILED, "", "handler returned 101 bytes; the limit is 100 bytes", Cause.UNSTORABLE_RESULT)),
    ("a non-string settles failed", RUNNING, SettleRequested(COMPLETED, 42), at(1), Settle(FAILED, "", "handler returned int, not a string", Cause.UNSTORABLE_RESULT)),
    ("None settles failed", RUNNING, SettleRequested(COMPLETED, None), at(1), Settle(FAILED, "", "handler returned NoneType, not a string", Cause.UNSTORABLE_RESULT)),
    ("exactly the limit is stored", RUNNING, SettleRequested(COMPLETED, "x" * 100), at(1), Settle(COMPLETED, "x" * 100, None, Cause.REQUESTED)),
    # cancel
    ("cancel a queued job settles it", QUEUED, CancelRequested("stop"), at(1), Settle(CANCELLED, "stop", None, Cause.CANCELLED, records_cancellation=True)),
    ("cancel a running job records it", RUNNING, CancelRequested("stop"), at(1), RecordCancellation("stop")),
    ("cancel again keeps the first", RUNNING_CANCELLED, CancelRequested("other"), at(1), Keep()),
    ("cancel a settled job changes nothing", SETTLED_DONE, CancelRequested("stop"), at(1), Keep()),
    ("cancel a queued job with a recorded one uses it", replace(QUEUED, cancellation="first"), CancelRequested("second"), at(1), Settle(CANCELLED, "first", None, Cause.CANCELLED)),
    # lease expired
    ("expired with budget is requeued", RUNNING_BUDGET, LeaseExpired(), at(60), Requeue(None)),
    ("expired without budget is outcome_unknown", RUNNING_SPENT, LeaseExpired(), at(61), Settle(Outcome.OUTCOME_UNKNOWN, "", LEASE_EXPIRED_DIAGNOSTIC, Cause.LEASE_EXPIRED)),
    ("expired without a policy is outcome_unknown", RUNNING, LeaseExpired(), at(61), Settle(Outcome.OUTCOME_UNKNOWN, "", LEASE_EXPIRED_DIAGNOSTIC, Cause.LEASE_EXPIRED)),
    ("expired with a cancellation settles cancelled", RUNNING_CANCELLED, LeaseExpired(), at(61), Settle(CANCELLED, "stop", LEASE_EXPIRED_DIAGNOSTIC, Cause.CANCELLED)),
    ("expired with an oversized cancellation still settles, cut", RUNNING_CANCELLED_HUGE, LeaseExpired(), at(61), Settle(CANCELLED, bounded_content("é" * 500, limit_bytes=100)[0], f"{LEASE_EXPIRED_DIAGNOSTIC}; the cancellation content was 1000 bytes; the limit is 100 bytes, so it was cut", Cause.CANCELLED)),
    ("a lease not yet over is kept", RUNNING_SPENT, LeaseExpired(), at(59), Keep()),
    ("a queued job has no lease to expire", QUEUED, LeaseExpired(), at(61), Keep()),
    ("a settled job has no lease to expire", SETTLED_DONE, LeaseExpired(), at(61), Keep()),
    # the worker stops the work
    ("shutdown with budget is requeued", RUNNING_BUDGET, WorkerStopped(), at(1), Requeue(WORKER_STOPPED_DIAGNOSTIC)),
    ("shutdown without budget is interrupted", RUNNING, WorkerStopped(), at(1), Settle(Outcome.INTERRUPTED, "", WORKER_STOPPED_DIAGNOSTIC, Cause.INTERRUPTED)),
    ("timeout without budget is interrupted", RUNNING_SPENT, HandlerTimedOut(90), at(1), Settle(Outcome.INTERRUPTED, "", "handler timed out after 1.5 min", Cause.INTERRUPTED)),
    ("timeout with budget is requeued", RUNNING_BUDGET, HandlerTimedOut(0.5), at(1), Requeue("handler timed out after 0.5 s")),
    ("a stop with a cancellation settles cancelled", RUNNING_CANCELLED, WorkerStopped(), at(1), Settle(CANCELLED, "stop", WORKER_STOPPED_DIAGNOSTIC, Cause.CANCELLED)),
    ("a stop by another claim is stale", RUNNING_OTHER_CLAIM, WorkerStopped(), at(1), Refuse("the job is not running under this claim (it is running)")),
    ("a stop of a requeued job is stale", replace(QUEUED, recovery_count=1), WorkerStopped(), at(1), Refuse("the job is not running under this claim (it is queued)")),
    ("a replayed stop is kept", SETTLED_INTERRUPTED, WorkerStopped(), at(1), Keep()),
    ("a stop after the cancellation won is kept", SETTLED_CANCELLED, WorkerStopped(), at(1), Keep()),
    ("a stop of a completed job is stale", SETTLED_DONE, WorkerStopped(), at(1), Refuse("the job is already settled completed")),
    # queued too long
    ("queued past the maximum is cancelled", QUEUED, QueuedTooLong(), at(3600), Settle(CANCELLED, TOO_LONG_TEXT, TOO_LONG_TEXT, Cause.QUEUED_TOO_LONG, records_cancellation=True)),
    ("queued under the maximum is kept", QUEUED, QueuedTooLong(), at(3599), Keep()),
    ("a running job is not queued too long", RUNNING, QueuedTooLong(), at(9999), Keep()),
    ("a settled job is not queued too long", SETTLED_DONE, QueuedTooLong(), at(9999), Keep()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("facts", "event", "now", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decision_table(
    facts: JobFacts, event: JobEvent, now: datetime, expected: Decision
) -> None:
    """Each row of the lifecycle table gives exactly its decision."""
    assert decide_job(facts, event, now=now, limits=LIMITS) == expected


def test_the_queued_too_long_text_says_how_long_and_why() -> None:
    """The bounce a sender hears says BirdDog cancelled it and after how long."""
    assert queued_too_long_text(86_400) == (
        "BirdDog cancelled this job: no worker claimed it within 24 h"
    )
    assert queued_too_long_text(7200, recovered=1) == (
        "BirdDog cancelled this job: it lost its worker 1 time and was still queued 2 h "
        "after it was sent"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "0.25 s"), (45, "45 s"), (60, "1 min"), (90, "1.5 min"), (3600, "1 h"),
     (5400, "1.5 h"), (86_400, "24 h"), (172_800, "2 days"), (180_000, "50 h")],
)  # fmt: skip
def test_durations_read_the_way_an_operator_says_them(seconds: float, text: str) -> None:
    """Durations use the largest readable unit, with at most one decimal."""
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [(1, "1 byte"), (1000, "1000 bytes"), (1024, "1 KiB"), (65_536, "64 KiB"),
     (1_048_576, "1 MiB"), (1_363_149, "1.3 MiB")],
)  # fmt: skip
def test_sizes_read_the_way_an_operator_says_them(size: int, text: str) -> None:
    """Sizes use bytes, KiB or MiB, with at most one decimal."""
    assert format_bytes(size) == text


def test_an_oversized_result_names_its_size_and_the_limit() -> None:
    """The issue's example: 1.3 MiB against the 1 MiB default."""
    problem = result_problem("x" * 1_363_149, limit_bytes=1_048_576)
    assert problem == "handler returned 1.3 MiB; the limit is 1 MiB"


def test_a_result_just_over_the_limit_shows_exact_bytes() -> None:
    """When both sizes would read the same, the diagnostic gives exact byte counts."""
    problem = result_problem("x" * 1_048_577, limit_bytes=1_048_576)
    assert problem == "handler returned 1048577 bytes; the limit is 1048576 bytes"


def test_a_storable_result_has_no_problem() -> None:
    """Ordinary text, empty text included, is storable."""
    assert result_problem("", limit_bytes=0) is None
    assert result_problem("héllo", limit_bytes=6) is None


def test_bounded_content_marks_the_cut_and_fits_the_limit() -> None:
    """Cut content ends with a visible mark and never splits a character."""
    text, cut = bounded_content("é" * 500, limit_bytes=100)
    assert cut
    assert text.endswith("[cut by BirdDog: 1000 bytes is above the limit]")
    assert len(text.encode("utf-8")) <= 100
    assert text.startswith("é")


def test_bounded_content_under_a_tiny_limit_keeps_what_fits() -> None:
    """A limit smaller than the mark keeps the longest prefix that fits."""
    text, cut = bounded_content("é" * 10, limit_bytes=5)
    assert (text, cut) == ("éé", True)


facts_strategy = st.builds(
    JobFacts,
    state=st.sampled_from(JobState),
    claim_matches=st.booleans(),
    recovery_count=st.integers(0, 5),
    max_recoveries=st.integers(0, 5),
    cancellation=st.none() | st.text(max_size=300),
    outcome=st.none() | st.sampled_from(Outcome),
    created_at=st.none() | st.just(T0),
    lease_expires_at=st.none() | st.just(at(60)),
)
events_strategy = st.one_of(
    st.builds(
        SettleRequested,
        outcome=st.sampled_from(Outcome),
        content=st.text(max_size=300) | st.integers() | st.none() | st.binary(max_size=10),
        diagnostic=st.none() | st.text(max_size=500),
    ),
    st.builds(CancelRequested, content=st.text(max_size=300)),
    st.just(LeaseExpired()),
    st.builds(WorkerStopped, diagnostic=st.text(max_size=500)),
    st.builds(HandlerTimedOut, timeout_s=st.floats(0.001, 1e6)),
    st.just(QueuedTooLong()),
)


@given(facts=facts_strategy, event=events_strategy, seconds=st.floats(0, 1e6))
def test_every_decision_is_storable_and_bounded(
    facts: JobFacts, event: JobEvent, seconds: float
) -> None:
    """Whatever happens, decide_job never raises and a settlement always fits the store."""
    decision = decide_job(facts, event, now=at(seconds), limits=LIMITS)
    if isinstance(decision, Settle):
        assert result_problem(decision.content, limit_bytes=LIMITS.max_content_bytes) is None
        assert decision.diagnostic is None or len(decision.diagnostic) <= DIAGNOSTIC_MAX_LENGTH
        assert "\x00" not in (decision.diagnostic or "")
    if isinstance(decision, Requeue):
        assert facts.state is JobState.RUNNING
        assert facts.cancellation is None
        assert facts.recovery_count < facts.max_recoveries


@given(facts=facts_strategy, event=events_strategy)
def test_a_recorded_cancellation_always_wins(facts: JobFacts, event: JobEvent) -> None:
    """A running job with a recorded cancellation never settles other than cancelled."""
    facts = replace(facts, state=JobState.RUNNING, cancellation="stop")
    decision = decide_job(facts, event, now=at(120), limits=LIMITS)
    assert not isinstance(decision, Requeue)
    if isinstance(decision, Settle):
        assert decision.outcome is Outcome.CANCELLED
        assert decision.content == "stop"


@given(facts=facts_strategy, event=events_strategy)
def test_only_the_current_claim_finishes_a_running_job(facts: JobFacts, event: JobEvent) -> None:
    """Without the current claim, a settle or stop of a running job is refused."""
    facts = replace(facts, state=JobState.RUNNING, claim_matches=False)
    decision = decide_job(facts, event, now=at(1), limits=LIMITS)
    if isinstance(event, SettleRequested | WorkerStopped | HandlerTimedOut):
        assert isinstance(decision, Refuse)


@pytest.mark.parametrize("recorded", ["\x00", "stop\x00now", "a\ud800b"])
def test_a_recorded_cancellation_that_cannot_be_stored_still_settles_storably(
    recorded: str,
) -> None:
    """A cancellation text holding NUL or a lone surrogate settles with U+FFFD in their place."""
    facts = JobFacts(
        state=JobState.RUNNING,
        claim_matches=True,
        recovery_count=0,
        max_recoveries=0,
        cancellation=recorded,
        outcome=None,
        created_at=T0,
        lease_expires_at=at(60),
    )
    decision = decide_job(facts, LeaseExpired(), now=at(120), limits=LIMITS)
    assert isinstance(decision, Settle)
    assert decision.outcome is Outcome.CANCELLED
    assert result_problem(decision.content, limit_bytes=LIMITS.max_content_bytes) is None
    assert "\ufffd" in decision.content
