"""Asking, the pure part: the mail an ask sends, its job, and when a repeat is a replay.

An ask is a mail from the asker's session to the target's, whose ``replyTo`` is the
asker itself, run as an agent job. Its key identifies the question: asking again with the
same key is the same mail (a replay, one job), never a second question. A plain send is
the same mail with a ``replyTo`` of the sender's choosing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from birddog.core.errors import InvalidInput, JobConflict, UnknownAgent
from birddog.core.jobs import AgentWork, Job, agent_job
from birddog.core.kinds import DEFAULT_KIND, Kind
from birddog.core.mail import AgentAddress, Mail
from birddog.core.model import ID_MAX_LENGTH

ASK_JOB_PREFIX = "ask:"
"""An ask's job id is this and its mail key (hashed when the key is too long for an id)."""

SEND_KEY_PREFIX = "mail-"
"""A fresh key of a plain send (:func:`new_send_key`) starts with this."""

SEND_JOB_PREFIX = "send:"
"""The job id of a mail whose key starts with :data:`SEND_KEY_PREFIX` starts with this."""

COMPARED = ("to", "from", "replyTo", "content")
"""The fields of a stored mail an ask must match to be its replay."""


@dataclass(frozen=True, slots=True)
class Posted:
    """What sending a mail wrote (or found written).

    Attributes:
        replay: True when this key had been sent before (nothing new was written).
        mailbox_added: True when the sender got a mailbox route by this send.
    """

    replay: bool
    mailbox_added: bool


def address_text(address: AgentAddress) -> str:
    """``AGENT:SESSION``, the one way an address is printed (as it is typed)."""
    return f"{address.agent_id}:{address.session_id}"


def parse_address(value: str | AgentAddress, field: str) -> AgentAddress:
    """An ``AGENT_ID:SESSION_ID`` text (or an address) as an address.

    Args:
        value: the address, or its text form.
        field: the field to name in errors (``to``, ``from``).

    Returns:
        The address.

    Raises:
        InvalidInput: no colon, or an id that is not 1 to 256 printable characters.
    """
    if isinstance(value, AgentAddress):
        return value
    agent_id, sep, session_id = value.partition(":")
    if not sep:
        raise InvalidInput(f"{field} must be AGENT_ID:SESSION_ID, got {value!r}", field=field)
    try:
        return AgentAddress(agent_id=agent_id, session_id=session_id)
    except InvalidInput as exc:
        pairs = [(f"{field}.{inner}" if inner else field, why) for inner, why in exc.errors]
        text = "; ".join(f"{name}: {why}" for name, why in pairs)
        raise InvalidInput(f"invalid address {text}", field=pairs[0][0], errors=pairs) from None


def new_ask_key(now: datetime, token: str) -> str:
    """A fresh mail key for an ask: the time and a random token, readable in a listing.

    Args:
        now: the current time.
        token: a few random characters (the caller's random source).

    Returns:
        ``ask-<UTC time>-<token>``, e.g. ``ask-20261130T140501Z-9f3a61c2``.
    """
    return f"ask-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-{token}"


def new_send_key(now: datetime, token: str) -> str:
    """A fresh mail key for a plain send (no one waits on it), named apart from an ask's.

    Args:
        now: the current time.
        token: a few random characters (the caller's random source).

    Returns:
        ``mail-<UTC time>-<token>``, e.g. ``mail-20261130T140501Z-9f3a61c2``; its job id
        (:func:`ask_job_id`) is ``send:mail-...``.
    """
    return f"{SEND_KEY_PREFIX}{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-{token}"


def new_mail_key(now: datetime, token: str, *, asking: bool) -> str:
    """The fresh key of a mail sent without one: an ask's, or a plain send's.

    Args:
        now: the current time.
        token: a few random characters (the caller's random source).
        asking: the mail is a question whose reply its sender waits for (an ask).

    Returns:
        :func:`new_ask_key` for an ask, :func:`new_send_key` for any other send.
    """
    return new_ask_key(now, token) if asking else new_send_key(now, token)


def ask_job_id(key: str) -> str:
    """The job id of the mail with key ``key`` (stable, so a repeat finds it).

    The id is a function of the key alone, so one key is one job whichever way it is
    sent again: a send's fresh key (:func:`new_send_key`) gives ``send:<key>``, any other
    key ``ask:<key>``.

    Args:
        key: the mail key.

    Returns:
        ``ask:<key>`` (``send:<key>`` for a send's key), or ``ask:sha256:<hex>``
        (``send:sha256:<hex>``) when that would be longer than an id may be.
    """
    prefix = SEND_JOB_PREFIX if key.startswith(SEND_KEY_PREFIX) else ASK_JOB_PREFIX
    job_id = prefix + key
    if len(job_id) <= ID_MAX_LENGTH:
        return job_id
    return f"{prefix}sha256:{hashlib.sha256(key.encode('utf-8')).hexdigest()}"


def ask_job(
    *,
    to: AgentAddress,
    asker: AgentAddress,
    content: str,
    key: str,
    created_at_ms: int,
    max_content_bytes: int,
    reply_to: Sequence[AgentAddress] | None = None,
    priority: int = 0,
    kind: Kind = DEFAULT_KIND,
) -> Job:
    """The job an ask (or a send) enqueues: mail from the asker to ``to``.

    Args:
        to: the agent session asked.
        asker: the agent session asking; the reply goes to its mailbox.
        content: the question.
        key: the mail key.
        created_at_ms: the mail's ``createdAt``.
        max_content_bytes: the largest content allowed.
        reply_to: who gets the replies (None: the asker; empty: nobody).
        priority: the job's priority among the queued jobs of its session.
        kind: what the mail is for (kept in the job, never in the mail).

    Returns:
        The queued job (its command fact id is its job id).

    Raises:
        InvalidInput: a bad key or content, naming the field.
        ContentTooLarge: the content is above ``max_content_bytes``.
    """
    mail = Mail(
        key=key,
        to=to,
        from_=asker,
        reply_to=[asker] if reply_to is None else list(reply_to),
        content=content,
        created_at=created_at_ms,
    )
    job_id = ask_job_id(key)
    work = AgentWork(job_id=job_id, session_id=to.session_id, command_fact_id=job_id)
    return agent_job(work, mail, max_content_bytes=max_content_bytes, priority=priority, kind=kind)


def replay_conflicts(stored: Mail, mail: Mail) -> list[str]:
    """The fields in which a stored mail with the same key differs from an ask.

    Args:
        stored: the mail already sent under the key.
        mail: the mail this ask would send.

    Returns:
        JSON names of the differing fields among :data:`COMPARED`; empty for a replay.
    """
    old = stored.model_dump(mode="json")
    new = mail.model_dump(mode="json")
    return [name for name in COMPARED if old[name] != new[name]]


def unknown_target(target: AgentAddress) -> UnknownAgent:
    """The refusal of a mail to an agent session BirdDog does not know.

    Args:
        target: the session addressed (its agent has no route, it was never sent work).
    """
    return UnknownAgent(
        f"unknown agent session {address_text(target)}: the agent has no route and "
        f"the session was never sent work (add one: birddog route add "
        f"{target.agent_id} --mailbox)",
        field="to",
    )


def key_conflict(key: str, differing: Sequence[str]) -> JobConflict:
    """The refusal of a mail whose key was sent before with another mail.

    Args:
        key: the mail key.
        differing: the JSON names of the fields that differ.
    """
    return JobConflict(
        f"key {key!r} was sent before with a different {', '.join(differing)}; a repeat "
        "with the same key must be the same mail (or use a new key)"
    )


def with_asker_mailbox(job: Job) -> Job:
    """``job`` marked ``askerMailbox``: its reply to the asker lands in the asker's mailbox.

    What ``birddog.send_mail`` does to every ask, whatever the asker's route: the
    settlement then delivers the reply to the mail's ``from`` into its mailbox (where the
    ask waits) whatever that route is by then, and every other reply as its route says.

    Args:
        job: an ask's agent job.

    Returns:
        The same job with ``askerMailbox: true`` beside the mail in its payload.
    """
    return job.model_copy(update={"payload": {**job.payload, "askerMailbox": True}})
