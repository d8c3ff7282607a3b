"""The mail service: sends, asks and waits, durably, over the ports; one per process.

:class:`MailService` is what the command line, the MCP server, the A2A server and the
library send and ask with. It is written against ports only: the ask store (checks and
writes each mail), the mailbox's answers (one watch every wait of the process shares),
the clock, and optionally the local spool. :func:`birddog.open_asking` wires one over a
pool without a spool, :func:`birddog.open_sender` one with the spool behind it::

    async with birddog.open_sender(pool, dsn) as mail:
        answer = await mail.ask(to="upper:s-upper", from_="me:s-me", content="hello")

``ask`` returns the answer's content when the work completed, and raises otherwise:
never an empty answer, never a silent success.

- The question is a mail from the asker to ``to`` whose ``replyTo`` is the asker, run as an
  agent job. An asker without a route gets a mailbox route in the same transaction. Every
  ask's job is marked (``askerMailbox``) so that the reply to the asker lands in its
  mailbox, where the ask waits, whatever its route is when the answer comes (an inbox
  URL, a held route); every other reply to it still follows its route.
- ``to`` must be an agent session BirdDog knows: the agent has a route (of either kind), or
  its session has been sent work before. An unknown one is refused before anything is
  written.
- The mail key names the question: asking again with the same key is a replay of the same
  mail (no second job) and waits for the same reply; the same key with another question,
  target or asker is refused. Without a key a fresh one is made: ``ask-<time>-<token>``
  for a question, ``mail-<time>-<token>`` for a plain send (its job ``send:<key>``).
- The reply is the first one delivered into the asker's mailbox for that key.
  ``completed`` gives its content; any other outcome raises :class:`~birddog.AskFailed`
  with the diagnostic; no reply in time raises :class:`~birddog.AskTimedOut`: the reply is
  still owed and will land in the asker's mailbox; its message and ``facts`` say where the
  ask stands (:mod:`birddog.service.timeouts` has the rules).
- With a spool, mail the database cannot take now is spooled
  (:mod:`birddog.service.writing`), and a wait outlasts the database being away: it
  forwards the mail itself once the database answers, and waits for the reply until its
  timeout. Without one, the database away raises :class:`~birddog.StoreUnavailable`.

The spool cannot help inside a caller's own transaction: that transaction cannot commit
without the database, so :func:`birddog.enqueue_accepted_job` stays what it is.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import structlog

from birddog.core.ask import new_mail_key
from birddog.core.ask_facts import AskFacts
from birddog.core.errors import AskTimedOut, InvalidInput
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.core.kinds import Kind, check_interactive, parse_kind
from birddog.core.spool import Outgoing
from birddog.service.asked import Asked, compose
from birddog.service.timeouts import (
    DEFAULT_ASK_TIMEOUT_S,
    DEFAULT_SEND_TIMEOUT_S,
    Deadline,
)
from birddog.service.waiting import Question, ReplyWaiter, Wait
from birddog.service.writing import MailWriter

if TYPE_CHECKING:
    from birddog.core.jobs import Job
    from birddog.core.mail import AgentAddress, Mail
    from birddog.ports import Answers, AskStore, Clock, Spool
    from birddog.service.forwarding import ForwardReport, SpoolForwarder

log = structlog.get_logger("birddog.sending")

__all__ = ["WAIT_POLL_S", "MailService"]

WAIT_POLL_S: Final = 2.0
"""While the database is away, a wait looks again at least this often."""


class MailService:
    """Sends mail and asks questions, durably; one per process (it holds the shared watch).

    Args:
        asks: the ask store (checks and writes each mail).
        answers: the mailbox's answers (the one watch every wait of the process shares).
        clock: the time source (mail ``createdAt``, fresh keys).
        spool: the local spool for mail the database cannot take now; None: none (the
            database away raises).
        describe: the reason a quarantined mail keeps for a refused write (the server's
            words for a refused statement); default: the error's message.
        poll_s: while the database is away, a wait looks again at least this often.
        max_content_bytes: the largest content allowed.
    """

    def __init__(
        self,
        *,
        asks: AskStore,
        answers: Answers,
        clock: Clock,
        spool: Spool | None = None,
        describe: Callable[[BaseException], str] = str,
        poll_s: float = WAIT_POLL_S,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    ) -> None:
        self.asks = asks
        self.answers = answers
        self.clock = clock
        self.poll_s = poll_s
        self.max_content_bytes = max_content_bytes
        self.describe = describe
        self.writer = MailWriter(asks, spool, describe=describe)
        self.waiter = ReplyWaiter(asks=asks, answers=answers, writer=self.writer, poll_s=poll_s)

    @property
    def spool(self) -> Spool | None:
        """The local spool (None: the service spools nothing)."""
        return self.writer.spool

    @property
    def forwarder(self) -> SpoolForwarder | None:
        """The spool's forwarder (None without a spool)."""
        return self.writer.forwarder

    def with_spool(
        self, spool: Spool, *, describe: Callable[[BaseException], str] | None = None
    ) -> MailService:
        """The same service over the same ports, with ``spool`` behind it.

        Args:
            spool: the local spool.
            describe: the reason kept for a refused write (default: this service's).
        """
        return MailService(
            asks=self.asks,
            answers=self.answers,
            clock=self.clock,
            spool=spool,
            describe=describe or self.describe,
            poll_s=self.poll_s,
            max_content_bytes=self.max_content_bytes,
        )

    # ---- sending ----------------------------------------------------------------------

    def new_key(self, *, asking: bool) -> str:
        """A fresh mail key, as a send without a key gets one.

        Args:
            asking: for a question (``ask-<time>-<token>``); False: a plain send
                (``mail-<time>-<token>``, its job ``send:<key>``).
        """
        return new_mail_key(self.clock.now(), secrets.token_hex(4), asking=asking)

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
        kind: Kind | str | None = None,
    ) -> Outgoing:
        """The mail :meth:`send` would write, checked, without writing it.

        Raises:
            InvalidInput: a bad address, key, content or kind, naming the field.
            ContentTooLarge: the content is above ``max_content_bytes``.
        """
        return compose(
            to=to,
            from_=from_,
            content=content,
            key=key,
            reply_to=reply_to,
            mailbox_required=mailbox_required,
            priority=priority,
            kind=parse_kind(kind),
            now=self.clock.now(),
            token=secrets.token_hex(4),
            max_content_bytes=self.max_content_bytes,
        )

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
        kind: Kind | str | None = None,
    ) -> Asked:
        """Send a mail as an agent job; its replies go to ``reply_to``.

        Everything is checked before anything is written, and what is written (the
        sender's mailbox route when it has none and is on ``reply_to``, the job) commits
        in one transaction; with a spool, a mail the database cannot take now is spooled.

        Args:
            to: the agent session addressed, ``AGENT:SESSION`` or an address.
            from_: the sending agent session.
            content: the mail's content (empty only if you mean it).
            key: the mail key; None makes a fresh one (``mail-...``, see :meth:`new_key`).
                The same key again is a replay.
            reply_to: who gets the replies (None: the sender; empty: nobody).
            timeout_s: the longest wait for a free database connection.
            mailbox_required: an ask: the reply to the sender lands in its mailbox, whatever
                its route (the job is marked ``askerMailbox``).
            priority: -32768 to 32767, higher first among the session's queued jobs.
            kind: what the mail is for: ``task`` (None: the default), ``escalation``,
                ``report`` or ``receipt`` (an ask: ``task`` or ``escalation`` only).

        Returns:
            What was sent, whether it was a replay; ``spooled`` says why when it waits in
            the spool instead.

        Raises:
            InvalidInput: a bad address, key or content, naming the field.
            ContentTooLarge: the content is above ``max_content_bytes``.
            UnknownAgent: ``to`` has no route and its session was never sent work.
            JobConflict: the key was used before for another mail.
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice (without a
                spool: or could not be reached); nothing was written.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        outgoing = self.outgoing(
            to=to,
            from_=from_,
            content=content,
            key=key,
            reply_to=reply_to,
            mailbox_required=mailbox_required,
            priority=priority,
            kind=kind,
        )
        return await self.post(outgoing, timeout_s=timeout_s)

    async def send_ask(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        priority: int = 0,
        kind: Kind | str | None = None,
    ) -> Asked:
        """Send a question whose reply goes to the asker's mailbox (see :meth:`send`).

        Raises:
            InvalidInput: ``kind`` is informational (an ask waits for an answer).
        """
        return await self.send(
            to=to,
            from_=from_,
            content=content,
            key=key,
            timeout_s=timeout_s,
            mailbox_required=True,
            priority=priority,
            kind=kind,
        )

    async def enqueue(
        self,
        job: Job,
        *,
        keep_stored_time: bool = False,
        require_known: bool = False,
        timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
    ) -> Asked:
        """Enqueue an agent job with mail as it is (``birddog send --job-id``), or spool it.

        Args:
            job: the job, from :func:`birddog.agent_job`, carrying mail.
            keep_stored_time: a job already stored under this id lends its mail's
                ``createdAt`` (the caller did not pin one), so a retry is a replay.
            require_known: refuse a target with no route whose session was never sent
                work (:class:`~birddog.UnknownAgent`), as :meth:`send` does; checked when
                the mail is written, so a spooled one is checked when it is forwarded.
            timeout_s: the longest wait for a database connection.

        Returns:
            What was sent: ``replay`` for an identical job already stored.

        Raises:
            InvalidJobPayload: the job carries no mail.
            UnknownAgent: ``require_known`` and the target is not known; nothing written.
            JobConflict: a job with this id exists with different fields.
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        outgoing = Outgoing(
            job=job,
            checked=False,
            keep_stored_time=keep_stored_time,
            require_known=require_known,
        )
        _ = outgoing.lane  # a spooled job carries mail: refused now, not when forwarded
        return await self.post(outgoing, timeout_s=timeout_s)

    async def post(self, outgoing: Outgoing, *, timeout_s: float = DEFAULT_SEND_TIMEOUT_S) -> Asked:
        """Write one mail to the database, or to the spool when the database is unreachable.

        Raises:
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        return await self.writer.post(outgoing, timeout_s=timeout_s)

    async def mail(self, key: str, *, timeout_s: float) -> Mail | None:
        """The mail sent under ``key``: waiting in the spool, or in the database.

        Args:
            key: the mail key.
            timeout_s: the longest wait for a database connection.

        Returns:
            The mail, or None when neither holds one under ``key``.

        Raises:
            StoreUnavailable: not in the spool, and the database is unreachable.
            SpoolFailed: the spool cannot be read.
        """
        spooled = await self.writer.spooled_mail(key)
        if spooled is not None:
            return spooled
        return await self.asks.mail(key, timeout_s=timeout_s)

    async def spooled(self, key: str) -> Mail | None:
        """The mail waiting in the local spool under ``key`` (None: none, or no spool).

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        return await self.writer.spooled_mail(key)

    # ---- asking -----------------------------------------------------------------------

    async def pose(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        timeout_s: float = DEFAULT_ASK_TIMEOUT_S,
        priority: int = 0,
        kind: Kind | str | None = None,
        send_timeout_s: float | None = None,
        on_key: Callable[[str], Awaitable[None]] | None = None,
    ) -> Question:
        """Send a question; the :class:`Question` waits for its answer in what is left.

        ``timeout_s`` bounds the whole call, the send's wait for a connection included.
        Once sent, a question stays asked: a cancellation arriving while it is being sent
        lets the send finish (it is bounded) and ends only the call.

        Args:
            to: the agent session asked, ``AGENT:SESSION`` or an address.
            from_: the asking agent session (its replies must go to a mailbox, or nowhere
                yet).
            content: the question.
            key: the mail key; the same key again is a replay of the same question.
            timeout_s: the longest the whole call (send and wait) takes.
            priority: the question's priority among the session's queued jobs.
            kind: ``task`` (None: the default) or ``escalation``; an informational kind
                is refused before anything is written.
            send_timeout_s: the longest the send waits for a database connection
                (default ``timeout_s``).
            on_key: told the question's key (a fresh one when ``key`` is None) before it
                is sent, on the call's clock: a caller that gives up while the send waits
                has been told where the answer will be.

        Returns:
            The question, its clock started when this was called.

        Raises:
            InvalidInput: bad input (see :meth:`send`); nothing was written.
            UnknownAgent: ``to`` is not an agent session BirdDog knows.
            JobConflict: the key was used before for something else.
            StoreBusy: no database connection was free in time; nothing was asked.
            StoreUnavailable: the database is unreachable (without a spool).
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        deadline = Deadline(timeout_s)
        check_interactive(parse_kind(kind))
        if key is None:
            key = self.new_key(asking=True)
        if on_key is not None:
            await on_key(key)
        sending = asyncio.ensure_future(
            self.send_ask(
                to=to,
                from_=from_,
                content=content,
                key=key,
                timeout_s=timeout_s if send_timeout_s is None else send_timeout_s,
                priority=priority,
                kind=kind,
            )
        )
        try:
            asked = await asyncio.shield(sending)
        except asyncio.CancelledError:
            # The caller went away: the send goes on, and how it ends is logged, not lost.
            sending.add_done_callback(_retrieved)
            raise
        return Question(self, asked.key, asked.asker, deadline, asked)

    def awaiting(self, key: str, asker: AgentAddress, *, timeout_s: float) -> Wait:
        """The wait for the reply to mail ``key``, sent before, for ``timeout_s`` from now.

        Args:
            key: the mail key.
            asker: whose mailbox the reply lands in.
            timeout_s: the longest the wait takes.
        """
        return Wait(self, key, asker, Deadline(timeout_s))

    async def ask(
        self,
        *,
        to: str | AgentAddress,
        from_: str | AgentAddress,
        content: str,
        key: str | None = None,
        timeout_s: float = DEFAULT_ASK_TIMEOUT_S,
        priority: int = 0,
        kind: Kind | str | None = None,
    ) -> str:
        """Ask an agent session a question and wait for its answer, durably.

        A drain daemon must be running for the reply to reach the mailbox. ``timeout_s``
        bounds the whole call (see :meth:`pose`); with a spool, a question spooled while
        the database is away is forwarded once it answers, and the wait goes on.

        Args:
            to: the agent session asked, ``AGENT:SESSION`` or an address.
            from_: the asking agent session.
            content: the question.
            key: the mail key; the same key again is a replay of the same question.
            timeout_s: the longest the call takes.
            priority: the question's priority among the session's queued jobs.
            kind: ``task`` (None: the default) or ``escalation``.

        Returns:
            The answer's content, when the work completed.

        Raises:
            AskFailed: the work ended otherwise than ``completed`` (``.outcome``,
                ``.diagnostic``).
            AskTimedOut: no reply in time (``.key``); it is still owed to the mailbox.
            InvalidInput: bad input (see :meth:`send`); nothing was written.
            UnknownAgent: ``to`` is not an agent session BirdDog knows.
            JobConflict: the key was used before for something else.
            StoreBusy: no database connection was free in time; nothing was asked.
            StoreUnavailable: the database is unreachable (without a spool).
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        question = await self.pose(
            to=to,
            from_=from_,
            content=content,
            key=key,
            timeout_s=timeout_s,
            priority=priority,
            kind=kind,
        )
        return await question.answer()

    async def wait_for_answer(self, asked: Asked, *, timeout_s: float) -> str:
        """Wait for the reply to an ask (see :meth:`wait`)."""
        return await self.wait(asked.key, asked.asker, timeout_s=timeout_s)

    async def wait(
        self, key: str, asker: AgentAddress, *, timeout_s: float, explain: bool = True
    ) -> str:
        """Wait for the reply to mail ``key`` in ``asker``'s mailbox; take it if it completed.

        See :meth:`birddog.service.waiting.ReplyWaiter.wait`: with a spool, the database
        away only makes the wait longer; without one, it raises.

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply within ``timeout_s``; it is still owed (``.facts``).
            BirdDogError: the spooled mail was refused when forwarded here.
            StoreUnavailable: the database is unreachable (without a spool).
        """
        return await self.waiter.wait(key, asker, timeout_s=timeout_s, explain=explain)

    async def facts(self, key: str, asker: AgentAddress) -> AskFacts | None:
        """Where the ask with mail ``key`` stands for ``asker``; None when it cannot be read."""
        return await self.waiter.facts(key, asker)

    async def timed_out(
        self, key: str, asker: AgentAddress, timeout_s: float, facts: AskFacts | None = None
    ) -> AskTimedOut:
        """The error for no reply to mail ``key`` within ``timeout_s``, saying where it is.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        return await self.waiter.timed_out(key, asker, timeout_s, facts)

    # ---- the spool ----------------------------------------------------------------------

    async def forward(self, *, wait_s: float = 0.0, adopt: bool = False) -> ForwardReport:
        """Forward the spool into the database once, in order (``birddog spool forward``).

        Only mail meant for this database goes (:func:`~birddog.core.spool.meant_for`).

        Args:
            wait_s: how long to wait for another forwarder that holds the spool.
            adopt: also the mail meant for another database, or that records none (an
                older BirdDog's): an operator's choice (``spool forward --adopt``).

        Returns:
            What was forwarded, quarantined, or kept because the database is away
            (nothing, without a spool).

        Raises:
            SpoolFailed: the spool cannot be read or written.
        """
        return await self.writer.forward(wait_s=wait_s, adopt=adopt)

    async def forward_waiting(self) -> ForwardReport:
        """Forward the spool if mail waits in it (a process's side task: cheap when empty).

        Raises:
            StoreUnavailable: mail waits and the database is away (the side task retries).
            SpoolFailed: the spool cannot be read or written.
        """
        return await self.writer.forward_waiting()


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Take a background send's outcome, so a failure after a cancelled call is not lost."""
    if future.cancelled():
        return
    error = future.exception()
    # Bad input is the caller's to hear, and it has gone: nothing for the operator.
    if error is not None and not isinstance(error, InvalidInput):
        log.info("send_failed_after_cancel", error=type(error).__name__)
