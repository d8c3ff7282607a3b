"""The timeout message of an ask says where it stands, one way for every caller."""

from __future__ import annotations

from datetime import timedelta

from birddog.core.ask_facts import AskFacts, AskState, waiting_message
from tests.support import at

NOW = at(600)


def said(**facts: object) -> str:
    """The message for these facts (an ask ``k-1`` from ``me:s-me`` that waited 10 s)."""
    return waiting_message(
        AskFacts(now=NOW, **facts),  # type: ignore[arg-type]
        key="k-1",
        asker="me:s-me",
        timeout_s=10,
    )


def test_queued_names_the_session_its_wait_and_the_workers() -> None:
    """Queued: nobody took it, for how long, in which session, and whether a worker beat."""
    facts = AskFacts(
        now=NOW, job_state="queued", queue="s-x", job_created_at=NOW - timedelta(seconds=75)
    )
    assert facts.state is AskState.QUEUED
    text = said(job_state="queued", queue="s-x", job_created_at=NOW - timedelta(seconds=75))
    assert text.startswith("no reply to 'k-1' within 10 s: nobody has taken it: its job has")
    assert "queued for session s-x for 1m 15s; no birddog worker beat in the last 1m 00s" in text
    assert text.endswith(
        "still owed and will land in the mailbox of me:s-me (birddog inbox me:s-me)"
    )
    beat = said(job_state="queued", queue="s-x", workers_recent=2)
    assert "2 workers beat in the last 1m 00s and none took it: is one serving s-x?" in beat


def test_running_says_for_how_long() -> None:
    """Running: a worker has it, since its start."""
    text = said(job_state="running", queue="s-x", started_at=NOW - timedelta(seconds=8))
    assert "a worker has been running its job (session s-x) for 8s" in text


def test_settled_and_pending_gives_the_attempts_the_last_error_and_the_daemons() -> None:
    """Pending: the outcome, the attempts and last error, a hold, and no daemon beating."""
    text = said(
        job_state="settled", outcome="completed", reply_state="pending", reply_attempts=3,
        last_error="HTTP 500", route_held=True, daemons_recent=0,
    )  # fmt: skip
    assert "its job settled completed; the reply is not delivered yet (pending after 3 " in text
    assert "attempts, last error: HTTP 500); the asker's route is held" in text
    assert "no drain daemon beat in the last 1m 00s" in text
    quiet = said(job_state="settled", outcome="completed", reply_state="pending", daemons_recent=1)
    assert "drain daemon" not in quiet


def test_dead_gives_the_reason_and_the_replay_and_is_no_longer_owed() -> None:
    """Dead: the reason and the replay to run; not "still owed"."""
    text = said(
        job_state="settled", outcome="completed", reply_state="dead", reply_key="outbox:k-1:reply:0",
        dead_reason="unknown_recipient", last_error="no route for agent me",
    )  # fmt: skip
    assert "the reply died: unknown_recipient (no route for agent me)" in text
    assert "birddog replay outbox:k-1:reply:0" in text
    assert "still owed" not in text


def test_delivered_points_at_the_mailbox() -> None:
    """Delivered: in the mailbox since then; read it there."""
    text = said(job_state="settled", delivered_at=NOW - timedelta(seconds=3))
    assert (
        "the reply was delivered to the mailbox 3s ago; read it with: birddog inbox me:s-me" in text
    )


def test_outside_text_is_inert_and_unknown_facts_still_say_it_is_owed() -> None:
    """A control character in a last error is escaped; no facts at all: still owed."""
    text = said(job_state="settled", reply_state="pending", last_error="bad\x1b[2Jthing")
    assert "\x1b" not in text
    unknown = waiting_message(None, key="k-1", asker="me:s-me", timeout_s=10)
    assert unknown == (
        "no reply to 'k-1' within 10 s; it is still owed and will land in the mailbox of "
        "me:s-me (birddog inbox me:s-me)"
    )
