"""Durable asks and sends: a mail as a job, and the wait for its reply in a mailbox.

One :class:`Asking` per process, over an ask store and the mailbox's answers (both
adapters; :func:`birddog.open_asking` wires the Postgres ones from a pool)::

    async with birddog.open_asking(pool, dsn) as asking:
        answer = await asking.ask(to="upper:s-upper", from_="me:s-me", content="hello")

``ask`` returns the answer's content when the work completed, and raises otherwise:
never an empty answer, never a silent success.

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
- The reply is the first one delivered into the asker's mailbox for that key.
  ``completed`` gives its content; any other outcome raises :class:`AskFailed` with the
  diagnostic; no reply within ``timeout_s`` raises :class:`AskTimedOut`: the reply is
  still owed and will land in the asker's mailbox (``birddog inbox AGENT:SESSION`` shows
  it later); its message and ``facts`` say where the ask stands (queued, and whether a
  worker beat lately; running, for how long; settled, its reply pending or dead).
- Waits share one listener: all the asks of a process are answered by one watch over one
  LISTEN connection, and a waiting ask holds no database connection. ``timeout_s`` bounds
  every step, the wait for a pool connection to send included.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from birddog.clock import epoch_ms
from birddog.core.ask import address_text, ask_job, new_ask_key, parse_address
from birddog.core.ask_facts import AskFacts, AskState, waiting_message
from birddog.core.errors import AskFailed, AskTimedOut, StoreUnavailable
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.core.mail import AgentAddress, Outcome
from birddog.core.spool import Outgoing

if TYPE_CHECKING:
    from birddog.core.mailbox import MailboxEntry
    from birddog.ports import Answers, AskStore, Clock

__all__ = [
    "DEFAULT_ASK_TIMEOUT_S",
    "DEFAULT_SEND_TIMEOUT_S",
    "Asked",
    "Asking",
    "answer_of",
    "open_asking",
]

DEFAULT_ASK_TIMEOUT_S = 240.0
"""How long an ask waits for its reply by default (complex questions take minutes)."""

DEFAULT_SEND_TIMEOUT_S = 30.0
"""How long a send waits for a free database connection by default."""

FACTS_TIMEOUT_S = 0.5
"""The longest look, after a wait ends without a reply, at where the ask stands.

An ask times out within its timeout plus a second (measured: a thousand ending at once on
a pool of ten, on an otherwise quiet 2-core machine), however many end at once: a look
that does not fit leaves the message without the facts, not the caller late. A starved
machine adds its own lag on top.
"""


@dataclass(frozen=True, slots=True)
class Asked:
    """A mail that is on its way (or was already, for a replay).

    Attributes:
        key: the mail key; the reply's ``inReplyTo``.
        job_id: the job that runs it.
        to: the agent session asked.
        asker: the agent session that sent it (whose mailbox gets an ask's reply).
        replay: True when this key had been sent before (nothing new was written).
        mailbox_added: True when the sender got a mailbox route by this send.
        spooled: why the mail waits in the local spool instead of the database (``database
            unreachable``), to be forwarded once it can be (:class:`birddog.Sender`);
            None when it reached the database.
    """

    key: str
    job_id: str
    to: AgentAddress
    asker: AgentAddress
    replay: bool
    mailbox_added: bool
    spooled: str | None = None

    @classmethod
    def of(
        cls, outgoing: Outgoing, *, replay: bool, mailbox_added: bool, spooled: str | None = None
    ) -> Asked:
        """What sending ``outgoing`` came to.

        Args:
            outgoing: the mail sent.
            replay: its key (or job id) had been sent before.
            mailbox_added: the sender got a mailbox route.
            spooled: why it waits in the local spool (None: it reached the database).
        """
        mail = outgoing.mail
        return cls(
            key=mail.key,
            job_id=outgoing.job.job_id,
            to=mail.to,
            asker=mail.from_,
            replay=replay,
            mailbox_added=mailbox_added,
            spooled=spooled,
        )

    @property
    def asker_text(self) -> str:
        """``AGENT:SESSION`` of the asker, as ``birddog inbox`` takes it."""
        return address_text(self.asker)


def answer_of(entry: MailboxEntry, key: str) -> str:
    """The content of a completed reply; any other reply raises.

    Args:
        entry: the reply, from the asker's mailbox.
        key: the mail key it answers.

    Returns:
        The content (never empty: an empty settlement says so in words).

    Raises:
        AskFailed: the work ended otherwise than ``completed``, or the reply cannot be read.
    """
    if entry.reply is not None and entry.outcome == Outcome.COMPLETED:
        return entry.content
    outcome = str(entry.outcome) if entry.reply is not None else "unreadable"
    diagnostic = entry.diagnostic
    who = address_text(entry.sender) if entry.sender is not None else "the agent asked"
    message = f"{who} ended {outcome}" + (f": {diagnostic}" if diagnostic else "")
    raise AskFailed(message, key=key, outcome=outcome, diagnostic=diagnostic, content=entry.content)


def still_owed(
    key: str, asker: AgentAddress, timeout_s: float, facts: AskFacts | None = None
) -> AskTimedOut:
    """The error for no reply within ``timeout_s``, saying where the ask stands.

    Args:
        key: the ask's mail key.
        asker: whose mailbox the reply goes to.
        timeout_s: how long the ask waited.
        facts: what the database says about the ask (None: unknown).

    Returns:
        The error (its message from :func:`~birddog.core.ask_facts.waiting_message`).
    """
    text = address_text(asker)
    return AskTimedOut(
        waiting_message(facts, key=key, asker=text, timeout_s=timeout_s),
        key=key,
        asker=text,
        facts=facts,
    )


class Asking:
    """Sends mail and asks questions, durably; one per process (it holds the shared watch).

    Args:
        asks: the ask store (checks and writes each mail).
        answers: the mailbox's answers (the one watch every wait of the process shares).
        clock: the time source (mail ``createdAt``, fresh keys).
        max_content_bytes: the largest question allowed.
    """

    def __init__(
        self,
        *,
        asks: AskStore,
        answers: Answers,
        clock: Clock,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    ) -> None:
        self.asks = asks
        self.answers = answers
        self.clock = clock
        self.max_content_bytes = max_content_bytes

    async def send(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        reply_to: Sequence[str | AgentAddress] | None = None,
        timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        mailbox_required: bool = False,
        priority: int = 0,
    ) -> Asked:
        """Send a mail as an agent job; its replies go to ``reply_to``.

        Everything is checked before anything is written, and what is written (the
        sender's mailbox route when it has none and is on ``reply_to``, the job) commits
        in one transaction.

        Args:
            to: the agent session addressed, ``AGENT:SESSION`` or an address.
            from_: the sending agent session.
            content: the mail's content (empty only if you mean it).
            key: the mail key; None makes a fresh one. The same key again is a replay.
            reply_to: who gets the replies (None: the sender; empty: nobody).
            timeout_s: the longest wait for a free database connection.
            mailbox_required: refuse a sender whose route posts to an inbox URL (an ask).
            priority: -32768 to 32767, higher first among the session's queued jobs.

        Returns:
            What was sent, and whether it was a replay.

        Raises:
            InvalidInput: a bad address, key or content, naming the field.
            ContentTooLarge: the content is above ``max_content_bytes``.
            UnknownAgent: ``to`` has no route and its session was never sent work.
            NotAMailbox: ``mailbox_required`` and the sender's route posts to an inbox URL.
            JobConflict: the key was used before for another mail.
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database is unreachable; nothing was written.
        """
        outgoing = self.outgoing(
            to=to,
            from_=from_,
            content=content,
            key=key,
            reply_to=reply_to,
            mailbox_required=mailbox_required,
            priority=priority,
        )
        posted = await self.asks.write(outgoing, timeout_s=timeout_s)
        return Asked.of(outgoing, replay=posted.replay, mailbox_added=posted.mailbox_added)

    def outgoing(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        reply_to: Sequence[str | AgentAddress] | None = None,
        mailbox_required: bool = False,
        priority: int = 0,
    ) -> Outgoing:
        """The mail :meth:`send` would write, checked, without writing it.

        Args:
            to: the agent session addressed.
            from_: the sending agent session.
            content: the mail's content.
            key: the mail key; None makes a fresh one.
            reply_to: who gets the replies (None: the sender; empty: nobody).
            mailbox_required: refuse a sender whose route posts to an inbox URL (an ask).
            priority: -32768 to 32767, higher first among the session's queued jobs.

        Returns:
            The job and how its write is checked (the sender gets a mailbox route when it
            has none and is on ``reply_to``).

        Raises:
            InvalidInput: a bad address, key or content, naming the field.
            ContentTooLarge: the content is above ``max_content_bytes``.
        """
        target = parse_address(to, "to")
        sender = parse_address(from_, "from")
        replies = (
            [sender]
            if reply_to is None
            else [parse_address(value, f"replyTo.{index}") for index, value in enumerate(reply_to)]
        )
        now = self.clock.now()
        key = key if key is not None else new_ask_key(now, secrets.token_hex(4))
        job = ask_job(
            to=target,
            asker=sender,
            content=content,
            key=key,
            created_at_ms=epoch_ms(now),
            max_content_bytes=self.max_content_bytes,
            reply_to=replies,
            priority=priority,
        )
        return Outgoing(
            job=job,
            checked=True,
            mailbox_for=sender if sender in replies else None,
            require_mailbox=mailbox_required,
        )

    async def send_ask(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        priority: int = 0,
    ) -> Asked:
        """Send a question whose reply goes to the asker's mailbox (see :meth:`send`).

        Raises:
            NotAMailbox: the asker's route posts to an inbox URL.
        """
        return await self.send(
            to=to,
            from_=from_,
            content=content,
            key=key,
            timeout_s=timeout_s,
            mailbox_required=True,
            priority=priority,
        )

    async def wait_for_answer(self, asked: Asked, *, timeout_s: float) -> str:
        """Wait for the reply to an ask; return its content if the work completed.

        The reply is acknowledged (marked read) once taken, whatever its outcome, when
        there is time left for it.

        Args:
            asked: the question (from :meth:`send_ask`).
            timeout_s: the longest wait.

        Returns:
            The answer's content.

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply within ``timeout_s``; it is still owed.
            StoreUnavailable: the database is unreachable.
        """
        return await self.wait(asked.key, asked.asker, timeout_s=timeout_s)

    async def wait(
        self, key: str, asker: AgentAddress, *, timeout_s: float, explain: bool = True
    ) -> str:
        """Wait for the reply to mail ``key`` in ``asker``'s mailbox (see :meth:`wait_for_answer`).

        When the wait ends without a reply, one more look (at most
        :data:`FACTS_TIMEOUT_S`) finds where the ask stands: the error says it, and a
        reply that landed just then is returned after all.

        Args:
            key: the mail key.
            asker: whose mailbox the reply goes to.
            timeout_s: the longest wait.
            explain: False skips that look (a caller that will wait again).

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply within ``timeout_s``; it is still owed (``.facts``).
            StoreUnavailable: the database is unreachable.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        entry = await self.answers.wait(key, timeout_s, owner=asker)
        if entry is None:
            if not explain:
                raise still_owed(key, asker, timeout_s)
            facts = await self.facts(key, asker)
            if facts is not None and facts.state is AskState.DELIVERED:
                entry = await self.answers.wait(key, 0, owner=asker)
            if entry is None:
                raise still_owed(key, asker, timeout_s, facts)
        await self._ack(entry, deadline - loop.time())
        return answer_of(entry, key)

    async def facts(self, key: str, asker: AgentAddress) -> AskFacts | None:
        """Where the ask with mail ``key`` stands for ``asker``; None when it cannot be read.

        Args:
            key: the mail key.
            asker: whose mailbox the reply goes to.

        Returns:
            The facts, or None when the database did not answer within
            :data:`FACTS_TIMEOUT_S` (the ask is still owed either way).
        """
        try:
            async with asyncio.timeout(FACTS_TIMEOUT_S):
                return await self.asks.facts(key, asker, timeout_s=FACTS_TIMEOUT_S)
        except (StoreUnavailable, TimeoutError):
            return None

    async def _ack(self, entry: MailboxEntry, left_s: float) -> None:
        """Mark the reply read, if that can be done before the deadline (else it stays unread)."""
        if entry.read_at is not None or left_s <= 0:
            return
        # The answer is in hand either way; a reply not acknowledged stays listed by `inbox`.
        with contextlib.suppress(StoreUnavailable):
            await self.answers.ack([entry.key], timeout_s=left_s)

    async def ask(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        timeout_s: float = DEFAULT_ASK_TIMEOUT_S,
        priority: int = 0,
    ) -> str:
        """Ask an agent session a question and wait for its answer, durably.

        A drain daemon must be running for the reply to reach the mailbox. ``timeout_s``
        bounds the whole call: the wait for a connection to send, and the wait for the
        reply.

        Args:
            to: the agent session asked, ``AGENT:SESSION`` or an address.
            from_: the asking agent session (its replies must go to a mailbox, or nowhere
                yet).
            content: the question.
            key: the mail key; the same key again is a replay of the same question.
            timeout_s: the longest the call takes.
            priority: the question's priority among the session's queued jobs.

        Returns:
            The answer's content, when the work completed.

        Raises:
            AskFailed: the work ended otherwise than ``completed`` (``.outcome``,
                ``.diagnostic``).
            AskTimedOut: no reply in time (``.key``); it is still owed to the mailbox.
            InvalidInput: bad input (see :meth:`send`); nothing was written.
            UnknownAgent: ``to`` is not an agent session BirdDog knows.
            NotAMailbox: the asker's route posts to an inbox URL.
            JobConflict: the key was used before for something else.
            StoreBusy: no database connection was free in time; nothing was asked.
            StoreUnavailable: the database is unreachable.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        asked = await self.send_ask(
            to=to, from_=from_, content=content, key=key, timeout_s=timeout_s, priority=priority
        )
        try:
            return await self.wait_for_answer(asked, timeout_s=deadline - loop.time())
        except AskTimedOut as exc:
            raise still_owed(asked.key, asked.asker, timeout_s, exc.facts) from None


def open_asking(
    pool: Any, listen_dsn: str | None, **options: Any
) -> AbstractAsyncContextManager[Asking]:
    """The process's :class:`Asking` over an asyncpg pool, waits sharing one LISTEN.

    Make one per process (it keeps one listening connection for all its waits) and use
    it for every send and ask::

        async with birddog.open_asking(pool, dsn) as asking:
            answer = await asking.ask(to="upper:s-upper", from_="me:s-me", content="hi")

    Args:
        pool: an asyncpg pool on the BirdDog database (``birddog.postgres.pool.create_pool``
            or your own); a waiting ask holds none of its connections.
        listen_dsn: the database for the listening connection (direct, not through
            PgBouncer); None: waits poll only.
        **options: ``poll_s``, ``clock``, ``max_content_bytes``.

    Returns:
        An async context manager yielding the :class:`Asking`.
    """
    from birddog.bootstrap import open_asking as wired  # noqa: PLC0415 - import birddog stays light

    return wired(pool, listen_dsn, **options)
