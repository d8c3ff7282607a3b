"""Addresses, mail and replies: the envelope format shared with the TypeScript BirdDog."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from birddog.core.model import Id, Key, Model, Name, Text


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
    """The settlement facts a reply carries: which command, how it ended, and why."""

    command_id: Id
    outcome: Outcome
    diagnostic: Text | None = None


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
