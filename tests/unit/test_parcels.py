"""A stored reply's JSON is posted as it is: parcels, and the shape check that guards them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from birddog.core.delivery import Parcel
from birddog.core.mail import Outcome
from birddog.postgres.outbox_rows import parcel_from_json
from tests.support import make_reply

KEY = "outbox:mail-1:reply:0"


def stored(**changes: Any) -> dict[str, Any]:
    """The JSON BirdDog stores for a reply to alice, with ``changes`` applied."""
    data = make_reply(KEY).model_dump(mode="json")
    data.update(changes)
    return data


def test_a_stored_reply_becomes_a_parcel_with_its_body_unchanged() -> None:
    """The parcel holds the facts the drain needs and the exact stored bytes as its body."""
    body = json.dumps(stored(), indent=1).encode()
    parcel = parcel_from_json(body, key=KEY, agent_id="alice")
    assert isinstance(parcel, Parcel)
    assert parcel.body is body
    assert (parcel.agent_id, parcel.session_id, parcel.command_id, parcel.outcome) == (
        "alice",
        "alice-session",
        "command-1",
        Outcome.COMPLETED,
    )
    assert parcel.reply == make_reply(KEY)


def test_fields_a_newer_version_added_stay_in_the_body() -> None:
    """An unknown field is tolerated and posted; the model drops it when one is asked for."""
    body = json.dumps(stored(priority=3)).encode()
    parcel = parcel_from_json(body, key=KEY, agent_id="alice")
    assert isinstance(parcel, Parcel)
    assert b'"priority": 3' in parcel.body
    assert parcel.reply == make_reply(KEY)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"content": 42}, "content must be a string"),
        ({"key": None}, "key must be a string"),
        ({"inReplyTo": ""}, "inReplyTo must be 1 to 512 characters"),
        ({"to": "alice"}, "to must be an agent address"),
        ({"to": {"kind": "agent", "agentId": "alice", "sessionId": 7}}, "to.sessionId"),
        ({"from": {"kind": "agent", "agentId": "w\x1b", "sessionId": "s"}}, "control"),
        ({"replyTo": [{"kind": "agent"}]}, "replyTo must be an empty list"),
        ({"createdAt": -1}, "createdAt"),
        ({"createdAt": True}, "createdAt"),
        ({"reply": {"commandId": "c", "outcome": "won"}}, "reply.outcome"),
        ({"reply": {"commandId": "", "outcome": "failed"}}, "reply.commandId"),
        ({"reply": {"commandId": "c", "outcome": "failed", "diagnostic": 3}}, "diagnostic"),
    ],
)
def test_a_broken_shape_is_named(changes: dict[str, Any], named: str) -> None:
    """Each way a stored reply can be broken gives a reason naming the field."""
    problem = parcel_from_json(json.dumps(stored(**changes)).encode(), key=KEY, agent_id="alice")
    assert isinstance(problem, str)
    assert problem.startswith("stored reply cannot be read: ")
    assert named in problem


@pytest.mark.parametrize(
    ("body", "named"),
    [(b"not json", "not JSON"), (b"[1, 2]", "not a JSON object"), (b"\xff", "not JSON")],
)
def test_what_is_not_a_json_object_is_refused(body: bytes, named: str) -> None:
    """Text that is not a JSON object is no reply."""
    problem = parcel_from_json(body, key=KEY, agent_id="alice")
    assert isinstance(problem, str)
    assert named in problem


def test_a_reply_must_carry_its_rows_key_and_recipient() -> None:
    """A reply under another key, or to another agent than its row's, is refused."""
    body = json.dumps(stored()).encode()
    assert parcel_from_json(body, key="outbox:other:reply:0", agent_id="alice") == (
        "stored reply carries another key than its row"
    )
    assert parcel_from_json(body, key=KEY, agent_id="bob") == (
        "stored reply is addressed to another agent than its row"
    )


def test_parcels_of_one_reply_are_equal_whatever_their_spelling() -> None:
    """A parcel made from the model equals the parcel of its stored, respaced JSON."""
    made = Parcel.of(make_reply(KEY))
    read = parcel_from_json(json.dumps(stored(), indent=2).encode(), key=KEY, agent_id="alice")
    assert made == read
    assert made != Parcel.of(make_reply(KEY, content="other"))
    assert made.body == make_reply(KEY).model_dump_json().encode()
