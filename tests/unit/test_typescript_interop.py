"""Envelopes round-trip with the TypeScript BirdDog's JSON (fixtures in tests/fixtures/typescript).

The fixtures are written from the TypeScript shapes of the concepts page: a mail, the
queued job ``agentJob`` makes of it, and the replies ``fanOut`` owes (a mail with the
typed ``reply`` facts and no ``inReplyTo``; a diagnostic only on failed outcomes).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from birddog import (
    AgentWork,
    InvalidInput,
    JobState,
    Mail,
    Outcome,
    Recovery,
    agent_job,
    decode_agent_job,
    replies_for,
    reply_key,
)
from birddog.core.mail import mail_key_of, reply_from_wire

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "typescript"
SETTLED_AT = datetime.fromtimestamp(1_767_225_700, tz=UTC)


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return loaded


def without_in_reply_to(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key != "inReplyTo"}


def test_typescript_mail_round_trips() -> None:
    """A TypeScript mail validates and serializes back to exactly the same JSON."""
    mail = Mail.model_validate(fixture("mail.json"))
    assert mail.from_.agent_id == "caller"
    assert mail.model_dump(mode="json") == fixture("mail.json")


def test_agent_job_matches_the_typescript_job() -> None:
    """agent_job makes the job the TypeScript agentJob makes, and decodes the TypeScript job."""
    mail = Mail.model_validate(fixture("mail.json"))
    work = AgentWork(
        job_id="job-1",
        session_id="session-b",
        command_fact_id="command-1",
        recovery=Recovery(max_recoveries=2),
    )
    assert agent_job(work, mail).model_dump(mode="json", exclude_none=True) == fixture(
        "agent-job.json"
    )
    payload = decode_agent_job(fixture("agent-job.json"))
    assert (payload.command_fact_id, payload.mail) == ("command-1", mail)


@pytest.mark.parametrize("name", ["reply-completed.json", "reply-failed.json"])
def test_typescript_replies_are_read_and_written_back(name: str) -> None:
    """A TypeScript reply (no inReplyTo) is read with inReplyTo from its key; only that is added."""
    reply = reply_from_wire(fixture(name))
    assert reply.in_reply_to == "mail-1"
    written = reply.model_dump(mode="json")
    assert written["inReplyTo"] == "mail-1"
    assert without_in_reply_to(written) == fixture(name)


@pytest.mark.parametrize(
    ("outcome", "content", "name", "index"),
    [
        (Outcome.COMPLETED, "Two essays and a lab report.", "reply-completed.json", 0),
        (Outcome.FAILED, "", "reply-failed.json", 1),
    ],
)
def test_fan_out_writes_the_typescript_replies(
    outcome: Outcome, content: str, name: str, index: int
) -> None:
    """The replies fan-out owes are the TypeScript fanOut's JSON plus inReplyTo, nothing else."""
    job = agent_job(
        AgentWork(job_id="job-1", session_id="session-b", command_fact_id="command-1"),
        Mail.model_validate(fixture("mail.json")),
    ).model_copy(update={"state": JobState.SETTLED, "outcome": outcome})
    replies = replies_for(
        job,
        content=content,
        diagnostic="provider_error: 401 Authorization: Bearer sk-live-abc",
        now=SETTLED_AT,
        max_content_bytes=1 << 20,
    )
    assert without_in_reply_to(replies[index].model_dump(mode="json")) == fixture(name)
    assert without_in_reply_to(json.loads(replies[index].model_dump_json())) == fixture(name)


def test_fields_a_newer_version_adds_are_dropped_at_every_level() -> None:
    """Unknown fields at the top, in addresses and in the reply facts are ignored, not refused."""
    reply = reply_from_wire(fixture("reply-newer-version.json"))
    assert reply == reply_from_wire(fixture("reply-completed.json"))


def test_a_stated_in_reply_to_is_kept() -> None:
    """A reply that names inReplyTo keeps it rather than deriving it."""
    data = fixture("reply-completed.json") | {"inReplyTo": "mail-1"}
    assert reply_from_wire(data).in_reply_to == "mail-1"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(
            fixture("reply-completed.json") | {"key": "not-a-reply-key"}, "inReplyTo", id="bad-key"
        ),
        pytest.param(
            fixture("reply-completed.json") | {"reply": {"commandId": "c", "outcome": "won"}},
            "reply.outcome",
            id="bad-outcome",
        ),
        pytest.param(
            {k: v for k, v in fixture("reply-completed.json").items() if k != "content"},
            "content",
            id="no-content",
        ),
        pytest.param(["not", "an", "object"], "", id="not-an-object"),
    ],
)
def test_what_this_version_knows_is_still_validated(data: object, field: str) -> None:
    """Tolerance stops at unknown fields: a bad known field is refused, naming it."""
    with pytest.raises(InvalidInput) as caught:
        reply_from_wire(data)
    assert caught.value.field == field


@given(
    mail_key=st.text(
        alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S")),
        min_size=1,
        max_size=40,
    ),
    index=st.integers(min_value=0, max_value=10_000),
)
def test_mail_key_of_inverts_reply_key(mail_key: str, index: int) -> None:
    """Whatever the mail key (colons and ':reply:' included), its reply keys lead back to it."""
    assert mail_key_of(reply_key(mail_key, index)) == mail_key


@pytest.mark.parametrize(
    "key", ["outbox:mail-1:reply:", "outbox::reply:0", "mail-1:reply:0", "outbox:m:reply:x"]
)
def test_mail_key_of_refuses_other_shapes(key: str) -> None:
    """A key that is not outbox:<mail key>:reply:<index> names no mail."""
    assert mail_key_of(key) is None
