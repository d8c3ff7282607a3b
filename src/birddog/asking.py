"""A durable ask: send a question as a job and wait for its reply in the asker's mailbox.

``await birddog.ask(pool, to="upper:s-upper", from_="me:s-me", content="hello")`` returns
the answer's content when the work completed, and raises otherwise: never an empty answer,
never a silent success.

- The question is a mail from the asker to ``to`` whose ``replyTo`` is the asker, run as an
  agent job. An asker without a route gets a mailbox route in the same transaction; an
  asker whose route posts to an inbox URL is refused before anything is written, since an
  ask waits on mailboxes only.
- ``to`` must be an agent session BirdDog knows: the agent has a route (of either kind), or
  its session has been sent work before. Whether some worker serves a session cannot be
  known, so that is the rule; an unknown one is refused before anything is written.
- The mail key names the question: asking again with the same key is a replay of the same
  mail (no second job) and waits for the same reply; the same key with another question,
  target or asker is refused. Without a key a fresh one is made.
- The reply is the first one delivered into the mailbox for that key. ``completed`` gives
  its content; any other outcome raises :class:`AskFailed` with the diagnostic; no reply
  within ``timeout_s`` raises :class:`AskTimedOut`: the reply is still owed and will land
  in the asker's mailbox (``birddog inbox AGENT:SESSION`` shows it later).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from birddog.clock import SystemClock, epoch_ms
from birddog.core.ask import COMPARED, ask_job, new_ask_key, parse_address, replay_conflicts
from birddog.core.errors import (
    AskFailed,
    AskTimedOut,
    InvalidInput,
    InvalidJobPayload,
    JobConflict,
    NotAMailbox,
    UnknownAgent,
)
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, AgentJobPayload, Job, decode_agent_job
from birddog.core.mail import AgentAddress, Outcome

if TYPE_CHECKING:
    from birddog.ports import Clock
    from birddog.postgres.mailbox import Mailbox, MailboxEntry
    from birddog.postgres.pool import Connection, Pool

__all__ = ["DEFAULT_ASK_TIMEOUT_S", "Asked", "answer_of", "ask", "send_ask", "wait_for_answer"]

DEFAULT_ASK_TIMEOUT_S = 240.0
"""How long an ask waits for its reply by default (complex questions take minutes)."""


@dataclass(frozen=True, slots=True)
class Asked:
    """A question that is on its way (or was already, for a replay).

    Attributes:
        key: the mail key; the reply's ``inReplyTo``.
        job_id: the job that runs it.
        to: the agent session asked.
        asker: the agent session whose mailbox gets the reply.
        replay: True when this key had been asked before (nothing new was written).
        mailbox_added: True when the asker got a mailbox route by this ask.
    """

    key: str
    job_id: str
    to: AgentAddress
    asker: AgentAddress
    replay: bool
    mailbox_added: bool

    @property
    def asker_text(self) -> str:
        """``AGENT:SESSION`` of the asker, as ``birddog inbox`` takes it."""
        return f"{self.asker.agent_id}:{self.asker.session_id}"


async def send_ask(
    pool: Pool,
    *,
    to: str | AgentAddress,
    from_: str | AgentAddress,
    content: str,
    key: str | None = None,
    clock: Clock | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
) -> Asked:
    """Send a question as an agent job whose reply goes to the asker's mailbox.

    Everything is checked before anything is written, and what is written (the asker's
    mailbox route when it has none, the job) commits in one transaction.

    Args:
        pool: an asyncpg pool on the BirdDog database.
        to: the agent session asked, ``AGENT:SESSION`` or an address.
        from_: the asking agent session.
        content: the question (empty only if you mean it).
        key: the mail key; None makes a fresh one. The same key again is a replay.
        clock: the time source (default: the system clock).
        max_content_bytes: the largest question allowed.

    Returns:
        What was asked, and whether it was a replay.

    Raises:
        InvalidInput: a bad address, key or content, naming the field.
        ContentTooLarge: the question is above ``max_content_bytes``.
        UnknownAgent: ``to`` has no route and its session was never sent work.
        NotAMailbox: the asker's route posts to an inbox URL.
        JobConflict: the key was used before for another question, target or asker.
        StoreUnavailable: the database is unreachable; nothing was written.
    """
    from birddog.postgres.pool import store_errors  # noqa: PLC0415 - import birddog stays light

    clock = clock or SystemClock()
    target = parse_address(to, "to")
    asker = parse_address(from_, "from")
    now = clock.now()
    key = key if key is not None else new_ask_key(now, secrets.token_hex(4))
    job = ask_job(
        to=target,
        asker=asker,
        content=content,
        key=key,
        created_at_ms=epoch_ms(now),
        max_content_bytes=max_content_bytes,
    )
    with store_errors("ask"):
        async with pool.acquire() as conn, conn.transaction():
            replay, added = await _enqueue_ask(conn, job, target=target, asker=asker)
    return Asked(
        key=key, job_id=job.job_id, to=target, asker=asker, replay=replay, mailbox_added=added
    )


async def _enqueue_ask(
    conn: Connection, job: Job, *, target: AgentAddress, asker: AgentAddress
) -> tuple[bool, bool]:
    """Check, then write, inside the caller's transaction; returns (replay, mailbox_added)."""
    from birddog.postgres.enqueue import enqueue_job  # noqa: PLC0415
    from birddog.postgres.sql import queries  # noqa: PLC0415

    mail = decode_agent_job(job).mail
    if mail is None:  # ask_job always carries mail
        raise InvalidJobPayload("an ask carries mail", field="mail")
    await conn.execute(queries["ask_lock_key"], mail.key)
    kind = await conn.fetchval(queries["ask_route_kind"], asker.agent_id)
    _check_mailbox(kind, asker)
    if not await conn.fetchval(queries["ask_target_known"], target.agent_id, target.session_id):
        raise UnknownAgent(
            f"unknown agent session {target.agent_id}:{target.session_id}: the agent has no "
            "route and the session was never sent work (add one: birddog route add "
            f"{target.agent_id} --mailbox)",
            field="to",
        )
    stored = await conn.fetchrow(queries["ask_job_by_mail_key"], mail.key)
    if stored is not None:
        try:
            stored_mail = AgentJobPayload.model_validate(json.loads(stored["payload"])).mail
        except InvalidInput:
            stored_mail = None
        differing = list(COMPARED) if stored_mail is None else replay_conflicts(stored_mail, mail)
        if differing:
            raise JobConflict(
                f"key {mail.key!r} was asked before with a different {', '.join(differing)}; "
                "a repeat with the same key must be the same question (or use a new key)"
            )
        return True, False
    # The asker's mailbox route comes with the job (birddog.enqueue adds one only for the
    # mail's own sender), so a sender's role needs no privilege on routes.
    enqueued = await enqueue_job(conn, job, sender_mailbox=kind is None)
    if kind is None and not enqueued.mailbox_added:
        # Another process added a route for the asker meanwhile.
        _check_mailbox(await conn.fetchval(queries["ask_route_kind"], asker.agent_id), asker)
    return False, enqueued.mailbox_added


def _check_mailbox(kind: str | None, asker: AgentAddress) -> None:
    """Refuse an asker whose route posts to an inbox URL (ask waits on mailboxes only)."""
    if kind is not None and kind != "mailbox":
        raise NotAMailbox(
            f"the asker {asker.agent_id!r} has an inbox URL route; ask waits on mailboxes "
            "only: ask from an agent without a route, or one added with --mailbox",
            field="from",
        )


def answer_of(entry: MailboxEntry, asked: Asked) -> str:
    """The content of a completed reply; any other reply raises.

    Args:
        entry: the reply, from the asker's mailbox.
        asked: the question it answers.

    Returns:
        The content (never empty: an empty settlement says so in words).

    Raises:
        AskFailed: the work ended otherwise than ``completed``, or the reply cannot be read.
    """
    if entry.reply is not None and entry.outcome == Outcome.COMPLETED:
        return entry.content
    outcome = str(entry.outcome) if entry.reply is not None else "unreadable"
    diagnostic = entry.diagnostic
    message = f"{asked.to.agent_id}:{asked.to.session_id} ended {outcome}" + (
        f": {diagnostic}" if diagnostic else ""
    )
    raise AskFailed(
        message, key=asked.key, outcome=outcome, diagnostic=diagnostic, content=entry.content
    )


async def wait_for_answer(mailbox: Mailbox, asked: Asked, *, timeout_s: float) -> str:
    """Wait for the reply to an ask; return its content if the work completed.

    The reply is acknowledged (marked read) once taken, whatever its outcome.

    Args:
        mailbox: the mailbox reader.
        asked: the question (from :func:`send_ask`).
        timeout_s: the longest wait.

    Returns:
        The answer's content.

    Raises:
        AskFailed: the work ended otherwise than ``completed``.
        AskTimedOut: no reply within ``timeout_s``; it is still owed.
        StoreUnavailable: the database is unreachable.
    """
    entry = await mailbox.wait(asked.key, timeout_s)
    if entry is None:
        raise AskTimedOut(
            f"no reply to {asked.key!r} within {timeout_s:g} s; it is still owed and will "
            f"land in the mailbox of {asked.asker_text} (birddog inbox {asked.asker_text})",
            key=asked.key,
            asker=asked.asker_text,
        )
    await mailbox.ack([entry.key])
    return answer_of(entry, asked)


async def ask(
    pool: Pool,
    *,
    to: str | AgentAddress,
    from_: str | AgentAddress,
    content: str,
    key: str | None = None,
    timeout_s: float = DEFAULT_ASK_TIMEOUT_S,
    clock: Clock | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    poll_s: float = 2.0,
) -> str:
    """Ask an agent session a question and wait for its answer, durably.

    A drain daemon must be running for the reply to reach the mailbox.

    Args:
        pool: an asyncpg pool on the BirdDog database.
        to: the agent session asked, ``AGENT:SESSION`` or an address.
        from_: the asking agent session (its replies must go to a mailbox, or nowhere yet).
        content: the question.
        key: the mail key; the same key again is a replay of the same question.
        timeout_s: the longest wait for the reply.
        clock: the time source (default: the system clock).
        max_content_bytes: the largest question allowed.
        poll_s: while waiting, look at least this often, notification or not.

    Returns:
        The answer's content, when the work completed.

    Raises:
        AskFailed: the work ended otherwise than ``completed`` (``.outcome``,
            ``.diagnostic``).
        AskTimedOut: no reply in time (``.key``); it is still owed to the mailbox.
        InvalidInput: bad input (see :func:`send_ask`); nothing was written.
        UnknownAgent: ``to`` is not an agent session BirdDog knows.
        NotAMailbox: the asker's route posts to an inbox URL.
        JobConflict: the key was used before for something else.
        StoreUnavailable: the database is unreachable.
    """
    from birddog.postgres.mailbox import Mailbox  # noqa: PLC0415 - import birddog stays light

    asked = await send_ask(
        pool,
        to=to,
        from_=from_,
        content=content,
        key=key,
        clock=clock,
        max_content_bytes=max_content_bytes,
    )
    return await wait_for_answer(
        Mailbox(pool, poll_s=poll_s, clock=clock), asked, timeout_s=timeout_s
    )
