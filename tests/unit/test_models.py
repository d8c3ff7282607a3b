"""Addresses and mail: validation, JSON names, and errors that name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from birddog import AgentAddress, AgentWork, InvalidInput, Mail, Reply
from birddog.core.text import is_control

ALICE: dict[str, str] = {"kind": "agent", "agentId": "alice", "sessionId": "s-alice"}
BOB: dict[str, str] = {"kind": "agent", "agentId": "bob", "sessionId": "s-bob"}


def mail_json(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "key": "mail-1",
        "to": BOB,
        "from": ALICE,
        "replyTo": [ALICE],
        "content": "hello",
        "createdAt": 1_700_000_000_000,
    }
    base.update(changes)
    return base


def test_address_kind_is_agent_and_json_is_camel_case() -> None:
    """An address has kind "agent" and serializes with the spec's camelCase names."""
    address = AgentAddress(agent_id="a", session_id="s")
    assert address.kind == "agent"
    assert json.loads(address.model_dump_json()) == {
        "kind": "agent",
        "agentId": "a",
        "sessionId": "s",
    }


def test_address_accepts_json_names_too() -> None:
    """An address can be built from its JSON form."""
    assert AgentAddress.model_validate(ALICE) == AgentAddress(
        agent_id="alice", session_id="s-alice"
    )


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("", "agentId"),
        ("x" * 257, "agentId"),
        (7, "agentId"),
        (None, "agentId"),
        ("nul\x00", "agentId"),
        ("lone\ud800", "agentId"),
    ],
)
def test_bad_agent_id_is_refused_naming_the_field(value: object, field: str) -> None:
    """Empty, 257-character, non-string, NUL and surrogate ids are refused naming the field."""
    with pytest.raises(InvalidInput) as caught:
        AgentAddress.model_validate({"agentId": value, "sessionId": "s"})
    assert caught.value.field == field
    assert field in str(caught.value)


def test_ids_of_1_and_256_characters_are_accepted() -> None:
    """Ids of exactly 1 and 256 characters are valid."""
    AgentAddress(agent_id="a", session_id="s" * 256)


def test_missing_session_id_is_refused() -> None:
    """A missing sessionId is refused and named."""
    with pytest.raises(InvalidInput) as caught:
        AgentAddress.model_validate({"agentId": "a"})
    assert caught.value.field == "sessionId"


def test_extra_fields_and_other_kinds_are_refused() -> None:
    """Unknown fields and kinds other than "agent" are refused."""
    with pytest.raises(InvalidInput) as extra:
        AgentAddress.model_validate({**ALICE, "parent": "x"})
    assert extra.value.field == "parent"
    with pytest.raises(InvalidInput) as kind:
        AgentAddress.model_validate({**ALICE, "kind": "subagent"})
    assert kind.value.field == "kind"


def test_invalid_input_is_a_value_error_and_a_birddog_error() -> None:
    """Callers can catch bad input as ValueError or as BirdDogError."""
    from birddog import BirdDogError  # noqa: PLC0415

    with pytest.raises(ValueError, match="agentId"):
        AgentAddress(agent_id="", session_id="s")
    assert issubclass(InvalidInput, BirdDogError)


def test_mail_round_trips_through_json_with_the_from_field() -> None:
    """Mail reads and writes the JSON field "from" while Python uses from_."""
    mail = Mail.model_validate(mail_json())
    assert mail.from_.agent_id == "alice"
    assert mail.reply_to[0].agent_id == "alice"
    assert json.loads(mail.model_dump_json()) == mail_json()
    assert Mail.model_validate_json(mail.model_dump_json()) == mail


def test_nested_errors_keep_their_full_path() -> None:
    """An error deep in replyTo names the whole path to the field."""
    bad = mail_json(replyTo=[ALICE, {**BOB, "agentId": ""}])
    with pytest.raises(InvalidInput) as caught:
        Mail.model_validate(bad)
    assert caught.value.field == "replyTo.1.agentId"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"replyTo": ALICE}, "replyTo"),
        ({"replyTo": "alice"}, "replyTo"),
        ({"content": None}, "content"),
        ({"content": "a\x00b"}, "content"),
        ({"key": ""}, "key"),
        ({"key": "k" * 513}, "key"),
        ({"createdAt": -1}, "createdAt"),
        ({"createdAt": True}, "createdAt"),
        ({"createdAt": "1"}, "createdAt"),
    ],
)
def test_bad_mail_is_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    """Non-list replyTo, non-string or NUL content, bad keys and bad times are refused."""
    with pytest.raises(InvalidInput) as caught:
        Mail.model_validate(mail_json(**changes))
    assert caught.value.field == field


HOSTILE = [
    "\x1b[2J",
    "a\rb",
    "a\nb",
    "tab\t",
    "del\x7f",
    "c1\x9b",
    "\u202eexe",
    "\u2066x",
    "z\u200b",
]


@pytest.mark.parametrize("bad", HOSTILE)
def test_keys_and_ids_with_control_characters_are_refused(bad: str) -> None:
    """Mail keys and address ids holding C0, C1, DEL, bidi or zero-width characters are refused."""
    cases: list[tuple[dict[str, object], str]] = [
        ({"key": f"k-{bad}"}, "key"),
        ({"to": {**BOB, "agentId": bad}}, "to.agentId"),
        ({"replyTo": [{**ALICE, "sessionId": bad}]}, "replyTo.0.sessionId"),
    ]
    for changes, field in cases:
        with pytest.raises(InvalidInput, match="control or format characters") as caught:
            Mail.model_validate(mail_json(**changes))
        assert caught.value.field == field


@pytest.mark.parametrize("bad", HOSTILE)
def test_work_ids_with_control_characters_are_refused(bad: str) -> None:
    """Job, session and command ids holding control characters are refused naming the field."""
    for field in ["jobId", "sessionId", "commandFactId"]:
        work = {"jobId": "j", "sessionId": "s", "commandFactId": "c", field: bad}
        with pytest.raises(InvalidInput) as caught:
            AgentWork.model_validate(work)
        assert caught.value.field == field


def test_a_reply_key_with_control_characters_is_refused() -> None:
    """A reply parsed from outside cannot carry a key that is unsafe to print or send."""
    reply = {
        "key": "outbox:k:reply:0\x1b[2J",
        "inReplyTo": "k",
        "to": ALICE,
        "from": BOB,
        "content": "ok",
        "createdAt": 1,
    }
    with pytest.raises(InvalidInput) as caught:
        Reply.model_validate(reply)
    assert caught.value.field == "key"


def test_the_refusal_shows_the_character_escaped() -> None:
    """The error names the offending character as an escape and where it is, never raw."""
    with pytest.raises(InvalidInput) as caught:
        AgentAddress(agent_id="ab\x1b]0;t\x07", session_id="s")
    assert "\\x1b at index 2" in str(caught.value)
    assert "\x1b" not in str(caught.value)


@given(st.text(min_size=1, max_size=256))
def test_an_id_is_accepted_exactly_when_it_has_no_control_character(value: str) -> None:
    """Any 1-256 character id is accepted if and only if no character is a control character."""
    if any(is_control(char) for char in value):
        with pytest.raises(InvalidInput) as caught:
            AgentAddress(agent_id=value, session_id="s")
        assert caught.value.field == "agentId"
    else:
        assert AgentAddress(agent_id=value, session_id="s").agent_id == value


def test_mail_is_frozen() -> None:
    """Mail cannot be changed after it was validated."""
    mail = Mail.model_validate(mail_json())
    with pytest.raises(ValueError, match="frozen"):
        mail.content = "changed"  # type: ignore[misc]


def test_settings_refuse_a_lease_shorter_than_a_post(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease that could end while its post is out is refused, naming both settings."""
    from birddog.settings import Settings  # noqa: PLC0415

    monkeypatch.setenv("BIRDDOG_LEASE_S", "5")
    monkeypatch.setenv("BIRDDOG_POST_TIMEOUT_S", "30")
    with pytest.raises(ValueError, match="BIRDDOG_LEASE_S"):
        Settings()
    monkeypatch.setenv("BIRDDOG_POST_TIMEOUT_S", "1")
    assert Settings().lease_s == 5
