"""decide_delivery(row, result, now): the whole delivery policy as a pure function."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from birddog import (
    Accepted,
    AgentAddress,
    DeadReason,
    Deferred,
    Failed,
    OutboxRow,
    Outcome,
    Receipt,
    Rejected,
    Reply,
    ReplyFacts,
    RetrySchedule,
    RowState,
    decide_delivery,
)
from birddog.core.delivery import NOT_ACCEPTED, as_result, new_row

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCHEDULE = RetrySchedule(max_attempts=5, max_age_s=3600, max_deferral_s=600)
ALICE = AgentAddress(agent_id="alice", session_id="s-a")
BOB = AgentAddress(agent_id="bob", session_id="s-b")


def middle() -> float:
    return 0.5


def a_row(**changes: object) -> OutboxRow:
    reply = Reply(
        key="outbox:m:reply:0",
        in_reply_to="m",
        to=ALICE,
        from_=BOB,
        content="done",
        created_at=0,
        reply=ReplyFacts(command_id="c", outcome=Outcome.COMPLETED),
    )
    return replace(new_row(reply, now=T0), **changes)  # type: ignore[arg-type]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


CASES = [
    # (name, row changes, result, now, expected: (kind, attempts, deferrals, due, dead reason))
    ("accepted first try", {}, Accepted(), at(1), ("receipt", 1, 0, None, None)),
    ("accepted after retries", {"attempts": 3}, Accepted(), at(1), ("receipt", 4, 0, None, None)),
    ("first failure waits 1 s", {}, Failed("500"), at(0), ("pending", 1, 0, at(1), None)),
    ("third failure waits 4 s", {"attempts": 2}, Failed("x"), at(10), ("pending", 3, 0, at(14), None)),
    ("last attempt dies", {"attempts": 4}, Failed("x"), at(10), ("dead", 5, 0, None, DeadReason.ATTEMPTS_EXHAUSTED)),
    ("past max age dies", {"attempts": 1}, Failed("x"), at(3600), ("dead", 2, 0, None, DeadReason.MAX_AGE_EXCEEDED)),
    ("retry capped at deadline", {"attempts": 3}, Failed("x"), at(3599), ("pending", 4, 0, at(3600), None)),
    ("deferral keeps strikes", {"attempts": 1}, Deferred(at(300), "429"), at(5), ("pending", 1, 1, at(300), None)),
    ("deferral capped by max deferral", {}, Deferred(at(5000), "503"), at(5), ("pending", 0, 1, at(605), None)),
    ("deferral capped by deadline", {}, Deferred(at(9000), "503"), at(3300), ("pending", 0, 1, at(3600), None)),
    ("deferral in the past is now", {}, Deferred(at(-50), "429"), at(5), ("pending", 0, 1, at(5), None)),
    ("deferral past max age dies", {"deferrals": 9}, Deferred(at(9000)), at(3600), ("dead", 0, 9, None, DeadReason.MAX_AGE_EXCEEDED)),
    ("gone dies at once", {}, Rejected("HTTP 410", DeadReason.GONE), at(1), ("dead", 1, 0, None, DeadReason.GONE)),
    ("unknown recipient dies at once", {}, Rejected("no route", DeadReason.UNKNOWN_RECIPIENT), at(1), ("dead", 1, 0, None, DeadReason.UNKNOWN_RECIPIENT)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "result", "now", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decision_table(
    changes: dict[str, object],
    result: Accepted | Failed | Deferred | Rejected,
    now: datetime,
    expected: tuple[str, int, int, datetime | None, DeadReason | None],
) -> None:
    """Each row of the table is the next state the policy owes."""
    kind, attempts, deferrals, due, dead_reason = expected
    out = decide_delivery(a_row(**changes), result, now=now, schedule=SCHEDULE, rng=middle)
    if kind == "receipt":
        assert isinstance(out, Receipt)
        assert out.attempts == attempts
        assert out.delivered_at == now
        return
    assert isinstance(out, OutboxRow)
    assert out.state is (RowState.DEAD if kind == "dead" else RowState.PENDING)
    assert (out.attempts, out.deferrals, out.dead_reason) == (attempts, deferrals, dead_reason)
    if due is not None:
        assert out.due_at == due


def test_receipt_is_compact_and_keeps_the_key() -> None:
    """A receipt keeps the key, recipient, command id and outcome, not the content."""
    out = decide_delivery(a_row(), Accepted(), now=at(2), schedule=SCHEDULE, rng=middle)
    assert out == Receipt(
        key="outbox:m:reply:0",
        delivered_at=at(2),
        attempts=1,
        recipient=ALICE,
        command_id="c",
        outcome=Outcome.COMPLETED,
    )


def test_failure_reason_is_stored_bounded_and_redacted() -> None:
    """The last error is one line, masked and cut."""
    reason = "HTTP 500\nAuthorization: Bearer topsecret " + "x " * 200
    out = decide_delivery(a_row(), Failed(reason), now=at(1), schedule=SCHEDULE, rng=middle)
    assert isinstance(out, OutboxRow)
    assert out.last_error is not None
    assert "topsecret" not in out.last_error
    assert "\n" not in out.last_error
    assert len(out.last_error) <= 200


def test_decide_does_not_touch_its_input() -> None:
    """The decision returns a new row and leaves the old one as it was."""
    row = a_row()
    decide_delivery(row, Failed("x"), now=at(1), schedule=SCHEDULE, rng=middle)
    assert row.attempts == 0


def test_a_failing_row_always_ends() -> None:
    """Failing forever reaches a dead letter within max_attempts attempts."""
    row: OutboxRow | Receipt = a_row()
    now = T0
    for _ in range(SCHEDULE.max_attempts):
        assert isinstance(row, OutboxRow)
        now = max(now, row.due_at)
        row = decide_delivery(row, Failed("x"), now=now, schedule=SCHEDULE, rng=middle)
        if isinstance(row, OutboxRow) and row.state is RowState.DEAD:
            break
    assert isinstance(row, OutboxRow)
    assert row.state is RowState.DEAD


def test_endless_deferrals_still_die_loud() -> None:
    """A rail that defers forever dies at the maximum age."""
    row: OutboxRow | Receipt = a_row()
    now = T0
    for _ in range(100):
        assert isinstance(row, OutboxRow)
        if row.state is RowState.DEAD:
            break
        now = row.due_at
        row = decide_delivery(
            row, Deferred(now + timedelta(hours=5)), now=now, schedule=SCHEDULE, rng=middle
        )
    assert isinstance(row, OutboxRow)
    assert row.dead_reason is DeadReason.MAX_AGE_EXCEEDED
    assert row.attempts == 0


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (True, Accepted()),
        (False, Failed(NOT_ACCEPTED)),
        (Deferred(T0), Deferred(T0)),
        (Rejected("x"), Rejected("x")),
    ],
)
def test_transport_answers_are_read(answer: object, expected: object) -> None:
    """True is accepted, False a failure, a result itself; anything else a failure."""
    assert as_result(answer) == expected  # type: ignore[arg-type]


def test_an_odd_answer_is_a_failure() -> None:
    """A transport that answers None or a string has not delivered."""
    assert isinstance(as_result(None), Failed)  # type: ignore[arg-type]
    assert isinstance(as_result("ok"), Failed)  # type: ignore[arg-type]
