"""The pure part of asking: addresses, keys, the ask's job, and what makes a replay."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from birddog import AgentAddress, InvalidInput, Mail, decode_agent_job
from birddog.core.ask import (
    ask_job,
    ask_job_id,
    new_ask_key,
    parse_address,
    replay_conflicts,
    with_asker_mailbox,
)

UPPER = AgentAddress(agent_id="upper", session_id="s-upper")
ASKER = AgentAddress(agent_id="asker", session_id="s-ask")


def test_parse_address_reads_agent_and_session() -> None:
    """AGENT:SESSION becomes an address; the session may itself hold colons."""
    assert parse_address("upper:s-upper", "to") == UPPER
    assert parse_address("a:b:c", "to") == AgentAddress(agent_id="a", session_id="b:c")
    assert parse_address(UPPER, "to") is UPPER


@pytest.mark.parametrize(
    ("text", "field"), [("upper", "to"), (":s", "to.agentId"), ("a:", "to.sessionId")]
)
def test_parse_address_names_the_bad_part(text: str, field: str) -> None:
    """A missing colon or an empty id is refused, naming the field."""
    with pytest.raises(InvalidInput) as caught:
        parse_address(text, "to")
    assert caught.value.field == field


def test_new_keys_are_readable_and_distinct_by_token() -> None:
    """A fresh key shows the UTC time and the random token."""
    now = datetime(2026, 11, 30, 14, 5, 1, tzinfo=UTC)
    assert new_ask_key(now, "9f3a61c2") == "ask-20261130T140501Z-9f3a61c2"


def test_the_job_id_follows_the_key_and_fits_an_id() -> None:
    """The job id is ask:<key>, or a hash of a key too long for an id."""
    assert ask_job_id("k-1") == "ask:k-1"
    long = ask_job_id("k" * 400)
    assert long.startswith("ask:sha256:")
    assert len(long) <= 256
    assert long == ask_job_id("k" * 400)


def test_the_ask_job_replies_to_the_asker() -> None:
    """The job runs in the target's session; its mail replies to the asker only."""
    job = ask_job(
        to=UPPER, asker=ASKER, content="hello", key="k-1", created_at_ms=5, max_content_bytes=100
    )
    payload = decode_agent_job(job)
    assert (job.job_id, job.queue, payload.command_fact_id) == ("ask:k-1", "s-upper", "ask:k-1")
    assert payload.mail is not None
    assert (payload.mail.to, payload.mail.from_, payload.mail.reply_to) == (UPPER, ASKER, [ASKER])

    assert job.priority == 0


def test_an_ask_job_takes_its_priority() -> None:
    """Ask --priority: the job an ask enqueues carries the priority given, 0 by default."""
    job = ask_job(
        to=UPPER,
        asker=ASKER,
        content="hello",
        key="k-1",
        created_at_ms=5,
        max_content_bytes=100,
        priority=-3,
    )
    assert job.priority == -3


def test_replay_conflicts_name_what_differs() -> None:
    """The same to, from, replyTo and content is a replay whatever the time; others differ."""
    mail = Mail(key="k", to=UPPER, from_=ASKER, reply_to=[ASKER], content="hi", created_at=1)
    assert replay_conflicts(mail, mail.model_copy(update={"created_at": 99})) == []
    other = mail.model_copy(update={"content": "ho", "to": ASKER})
    assert replay_conflicts(mail, other) == ["to", "content"]


def test_an_ask_marked_asker_mailbox_says_so_beside_the_mail_and_reads_back() -> None:
    """The mark sits beside the mail only when true and reads back; a non-boolean one fails."""
    job = ask_job(
        to=UPPER, asker=ASKER, content="hi", key="k-1", created_at_ms=1, max_content_bytes=64
    )
    assert "askerMailbox" not in job.payload
    marked = with_asker_mailbox(job)
    assert marked.payload["askerMailbox"] is True
    mail = marked.payload["mail"]
    assert isinstance(mail, dict)
    assert "askerMailbox" not in mail
    decoded = decode_agent_job(marked)
    assert decoded.asker_mailbox is True
    assert decoded.as_payload() == marked.payload
    assert decode_agent_job(job).as_payload() == job.payload
    bad = marked.model_copy(update={"payload": {**marked.payload, "askerMailbox": "yes"}})
    with pytest.raises(InvalidInput):
        decode_agent_job(bad)
