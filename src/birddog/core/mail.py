"""Addresses, mail and replies: the envelope format shared with the TypeScript BirdDog."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field

from birddog.core.errors import InvalidInput
from birddog.core.model import Id, Key, Model, Name, Text


def _is_none(value: object) -> bool:
    return value is None


class Outcome(StrEnum):
    """How a job settled; exactly the Watchdog outcome names."""

    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    OUTCOME_UNKNOWN = "outcome_unknown"


OUTCOMES_WITH_DIAGNOSTIC = frozenset(
    {Outcome.FAILED, Outcome.INTERRUPTED, Outcome.OUTCOME_UNKNOWN},
)
"""Only these outcomes carry a diagnostic in their reply."""


class AgentAddress(Model):
    """An agent session: ``{"kind": "agent", "agentId", "sessionId"}``.

    A parent and a child agent are both plain agents; there is no kind for subagents.
    """

    kind: Literal["agent"] = "agent"
    agent_id: Id
    session_id: Id


Millis = Annotated[int, Field(strict=True, ge=0)]
"""A time in milliseconds since the Unix epoch."""


class Mail(Model):
    """A request from one agent session to another.

    The key identifies the request across retries; every reply key derives from it.
    JSON names: ``key``, ``to``, ``from``, ``replyTo``, ``content``, ``createdAt``.
    """

    key: Key
    to: AgentAddress
    from_: AgentAddress = Field(alias="from")
    reply_to: list[AgentAddress] = Field(strict=True)
    content: Text
    created_at: Millis


class ReplyFacts(Model):
    """The settlement facts a reply carries: which command, how it ended, and why.

    Without a diagnostic the JSON has no ``diagnostic`` key (not ``null``), as the
    TypeScript BirdDog writes it.
    """

    command_id: Id
    outcome: Outcome
    diagnostic: Text | None = Field(default=None, exclude_if=_is_none)


class Reply(Model):
    """One reply owed to one ``replyTo`` address of a settled mail.

    A reply is a mail with an empty ``replyTo`` and the typed ``reply`` facts. ``inReplyTo``
    names the mail key so a recipient can check the reply against the mail it sent.
    """

    key: Name
    in_reply_to: Key
    to: AgentAddress
    from_: AgentAddress = Field(alias="from")
    reply_to: list[AgentAddress] = Field(default_factory=list, strict=True, max_length=0)
    content: Text
    created_at: Millis
    reply: ReplyFacts


def reply_key(mail_key: str, index: int) -> str:
    """The key of the reply to the ``index``-th ``replyTo`` address of a mail.

    Args:
        mail_key: the key of the mail being answered.
        index: the position of the recipient in the mail's ``replyTo`` list.

    Returns:
        ``outbox:<mail key>:reply:<index>``.
    """
    return f"outbox:{mail_key}:reply:{index}"


def mail_key_of(key: str) -> str | None:
    """The mail key a reply key derives from: the inverse of :func:`reply_key`.

    Args:
        key: a reply key, ``outbox:<mail key>:reply:<index>``.

    Returns:
        The mail key, or None when ``key`` does not have that shape.
    """
    head, sep, index = key.rpartition(":reply:")
    if not sep or not head.startswith("outbox:") or not (index.isascii() and index.isdigit()):
        return None
    mail_key = head.removeprefix("outbox:")
    return mail_key if mail_key and reply_key(mail_key, int(index)) == key else None


def reply_from_wire(data: object) -> Reply:
    """Read a reply as another BirdDog sent it: the TypeScript shape, or a newer version's.

    The TypeScript BirdDog's reply is a mail with the typed ``reply`` facts and no
    ``inReplyTo``; that is then derived from the key (every reply key is
    ``outbox:<mail key>:reply:<index>``). Fields this version does not know, at any level,
    are dropped rather than refused, so a bus shared by several versions keeps working.
    Everything this version knows is validated as strictly as ever.

    Args:
        data: the decoded JSON of one reply.

    Returns:
        The reply.

    Raises:
        InvalidInput: the data is not a reply, naming the field (a reply without
            ``inReplyTo`` whose key has no mail key in it names ``inReplyTo``).
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("a reply must be a JSON object", field="")
    known = _known_fields(data, Reply)
    for name, model in (("to", AgentAddress), ("from", AgentAddress), ("reply", ReplyFacts)):
        if isinstance(known.get(name), Mapping):
            known[name] = _known_fields(known[name], model)
    if isinstance(known.get("replyTo"), list):
        known["replyTo"] = [
            _known_fields(item, AgentAddress) if isinstance(item, Mapping) else item
            for item in known["replyTo"]
        ]
    if "inReplyTo" not in known and isinstance(known.get("key"), str):
        mail_key = mail_key_of(known["key"])
        if mail_key is None:
            raise InvalidInput(
                "reply has no inReplyTo and its key is not outbox:<mail key>:reply:<index>",
                field="inReplyTo",
            )
        known["inReplyTo"] = mail_key
    return Reply.model_validate(known)


def _known_fields(data: Mapping[Any, Any], model: type[Model]) -> dict[str, Any]:
    """The entries of ``data`` that ``model`` has a JSON name for."""
    names = {field.alias or name for name, field in model.model_fields.items()}
    return {key: value for key, value in data.items() if key in names}
