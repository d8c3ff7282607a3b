"""Fan-out: one reply per replyTo address, written to the outbox with one wake."""

from __future__ import annotations

import pytest

from birddog import (
    InvalidInput,
    JobState,
    Outcome,
    Receipt,
    empty_reply_text,
    has_pending_delivery,
    reply_key,
)
from tests.support import ALICE, BOB, CAROL, Room, settled_job


async def test_one_row_per_reply_to_with_the_exact_key(room: Room) -> None:
    """Each replyTo address gets a row keyed outbox:<mail key>:reply:<index>."""
    keys = await room.room.fan_out(job=settled_job(reply_to=[ALICE, CAROL, ALICE]), content="ok")
    assert keys == ["outbox:mail-1:reply:0", "outbox:mail-1:reply:1", "outbox:mail-1:reply:2"]
    assert reply_key("mail-1", 2) == "outbox:mail-1:reply:2"
    rows = room.outbox.rows
    assert [rows[k].reply.to for k in keys] == [ALICE, CAROL, ALICE]


async def test_reply_is_from_the_mails_recipient_with_content_verbatim(room: Room) -> None:
    """A reply's from is the mail's to, its content the settlement's, untouched."""
    content = "  Done: 3 files.\n\n"
    await room.room.fan_out(job=settled_job(), content=content)
    reply = room.outbox.rows["outbox:mail-1:reply:0"].reply
    assert reply.from_ == BOB
    assert reply.content == content
    assert reply.in_reply_to == "mail-1"
    assert reply.reply.command_id == "cmd-mail-1"
    assert reply.reply.outcome is Outcome.COMPLETED
    assert reply.created_at == int(room.clock.now().timestamp() * 1000)


@pytest.mark.parametrize("outcome", list(Outcome))
async def test_empty_content_gets_the_admissible_text(room: Room, outcome: Outcome) -> None:
    """Empty content becomes "The delegated work ended <outcome> without reply text."."""
    await room.room.fan_out(job=settled_job(outcome=outcome), content="")
    reply = room.outbox.rows["outbox:mail-1:reply:0"].reply
    assert reply.content == f"The delegated work ended {outcome.value} without reply text."
    assert reply.content == empty_reply_text(outcome)


@pytest.mark.parametrize(
    ("outcome", "kept"),
    [
        (Outcome.COMPLETED, False),
        (Outcome.CANCELLED, False),
        (Outcome.FAILED, True),
        (Outcome.INTERRUPTED, True),
        (Outcome.OUTCOME_UNKNOWN, True),
    ],
)
async def test_diagnostic_only_for_failed_interrupted_and_unknown(
    room: Room, outcome: Outcome, kept: bool
) -> None:
    """Only failed, interrupted and outcome_unknown replies carry the diagnostic."""
    await room.room.fan_out(job=settled_job(outcome=outcome), content="x", diagnostic="boom")
    facts = room.outbox.rows["outbox:mail-1:reply:0"].reply.reply
    assert facts.diagnostic == ("boom" if kept else None)


async def test_diagnostic_is_always_bounded(room: Room) -> None:
    """The diagnostic passes through bounded_diagnostic: one line, masked, cut."""
    raw = "provider_error: 401\nAuthorization: Bearer sk-abc " + "y" * 500
    await room.room.fan_out(job=settled_job(outcome=Outcome.FAILED), content="", diagnostic=raw)
    diagnostic = room.outbox.rows["outbox:mail-1:reply:0"].reply.reply.diagnostic
    assert diagnostic is not None
    assert diagnostic.startswith("provider_error: 401 Authorization: Bearer [redacted]")
    assert len(diagnostic) <= 200


async def test_cancelled_delivers_the_cancellation_result(room: Room) -> None:
    """A cancelled job's replies carry the supplied cancellation result as content."""
    await room.room.fan_out(
        job=settled_job(outcome=Outcome.CANCELLED), content="Cancelled by alice: superseded."
    )
    reply = room.outbox.rows["outbox:mail-1:reply:0"].reply
    assert reply.content == "Cancelled by alice: superseded."
    assert reply.reply.outcome is Outcome.CANCELLED


async def test_meta_never_reaches_a_reply(room: Room) -> None:
    """Settlement meta is accepted and dropped."""
    await room.room.fan_out(job=settled_job(), content="x", meta={"cancelledBy": "secret-operator"})
    dumped = room.outbox.rows["outbox:mail-1:reply:0"].reply.model_dump_json()
    assert "secret-operator" not in dumped
    assert "meta" not in dumped


async def test_no_mail_sends_nothing(room: Room) -> None:
    """A job without mail writes no rows and schedules no wake."""
    assert await room.room.fan_out(job=settled_job(with_mail=False), content="x") == []
    assert room.outbox.rows == {}
    assert room.wake.scheduled == []


async def test_one_wake_for_the_earliest_row(room: Room) -> None:
    """Fan-out schedules exactly one wake, at the earliest row's due time."""
    await room.room.fan_out(job=settled_job(reply_to=[ALICE, CAROL, BOB]), content="x")
    assert room.wake.scheduled == [room.clock.now()]


async def test_replay_writes_nothing_new(room: Room) -> None:
    """Replaying a settlement finds its rows and writes nothing twice."""
    job = settled_job()
    first = await room.room.fan_out(job=job, content="x")
    room.clock.advance(5)
    assert await room.room.fan_out(job=job, content="changed") == []
    assert len(room.outbox.rows) == len(first)
    assert room.outbox.rows[first[0]].reply.content == "x"
    assert len(room.wake.scheduled) == 1


async def test_replay_after_delivery_finds_the_receipts(room: Room) -> None:
    """After delivery, replaying the settlement neither writes nor posts again."""
    job = settled_job()
    await room.room.fan_out(job=job, content="x")
    await room.room.drain_outbox()
    assert all(isinstance(r, Receipt) for r in room.outbox.receipts.values())
    assert await room.room.fan_out(job=job, content="x") == []
    assert room.outbox.rows == {}
    await room.room.drain_outbox()
    assert len(room.transport.sent) == 2
    assert not await has_pending_delivery(room.outbox)


async def test_unsettled_job_is_refused(room: Room) -> None:
    """Fan-out of a job that has not settled is refused before anything is written."""
    job = settled_job().model_copy(update={"state": JobState.RUNNING, "outcome": None})
    with pytest.raises(InvalidInput):
        await room.room.fan_out(job=job, content="x")
    assert room.outbox.rows == {}


async def test_oversized_or_unstorable_content_is_refused(room: Room) -> None:
    """Content above the limit or holding NUL is refused, nothing written."""
    from birddog import ContentTooLarge  # noqa: PLC0415

    with pytest.raises(ContentTooLarge):
        await room.room.fan_out(job=settled_job(), content="x" * (1_048_576 + 1))
    with pytest.raises(InvalidInput):
        await room.room.fan_out(job=settled_job(), content="a\x00b")
    assert room.outbox.rows == {}
