"""Waiting for a reply, the rules written once: the mailbox, the spool, the database away.

:class:`ReplyWaiter` is the mail service's wait (:meth:`birddog.MailService.wait`): one
wait on the mailbox's answers, one more look at where the ask stands when it ends, and,
with a spool, the database away only making the wait longer (the spooled mail is forwarded
by the wait itself once it answers). :class:`Wait` and :class:`Question` carry the deadline
of a whole call (``timeout_s`` from when the call began) and the progress a waiting caller
reports (the MCP tools), so no caller computes a deadline of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from birddog.core.ask_facts import AskFacts, AskState
from birddog.core.errors import AskTimedOut, StoreBusy, StoreUnavailable
from birddog.runtime import Backoff
from birddog.service.asked import Asked, answer_of
from birddog.service.timeouts import FACTS_TIMEOUT_S, Deadline, still_owed, still_spooled

if TYPE_CHECKING:
    from birddog.core.mail import AgentAddress
    from birddog.core.mailbox import MailboxEntry
    from birddog.ports import Answers, AskStore
    from birddog.service.writing import MailWriter

__all__ = ["PROGRESS_S", "Progress", "Question", "ReplyWaiter", "Wait", "Waiter"]

PROGRESS_S: Final = 5.0
"""A wait that reports progress does so at least this often."""

Progress = Callable[[float, float], Awaitable[None]]
"""Told ``(seconds waited, seconds the call may take)`` while a question waits."""


class Waiter(Protocol):
    """What a :class:`Wait` waits through: one wait, and the error for no reply in time."""

    async def wait(
        self, key: str, asker: AgentAddress, *, timeout_s: float, explain: bool = True
    ) -> str:
        """Wait for the reply to mail ``key``; its content if it completed."""
        ...

    async def timed_out(
        self, key: str, asker: AgentAddress, timeout_s: float, facts: AskFacts | None = None
    ) -> AskTimedOut:
        """The error for no reply to mail ``key`` within ``timeout_s``."""
        ...


class ReplyWaiter:
    """Waits for replies in the mailboxes, through the spool and the database's absences.

    Args:
        asks: the ask store (where an ask stands, when a wait ends without a reply).
        answers: the mailbox's answers (the one watch every wait of the process shares).
        writer: the mail's write path (its spool and forwarder).
        poll_s: while the database is away, a wait looks again at least this often.
    """

    def __init__(
        self, *, asks: AskStore, answers: Answers, writer: MailWriter, poll_s: float
    ) -> None:
        self.asks = asks
        self.answers = answers
        self.writer = writer
        self.poll_s = poll_s

    async def wait(
        self, key: str, asker: AgentAddress, *, timeout_s: float, explain: bool = True
    ) -> str:
        """Wait for the reply to mail ``key`` in ``asker``'s mailbox; take it if it completed.

        The reply is acknowledged (marked read) once taken, whatever its outcome, when
        there is time left for it. With a spool, the database away only makes the wait
        longer: while the mail is still spooled, it is forwarded as soon as the database
        answers, and the wait looks again every ``poll_s`` at most.

        Args:
            key: the mail key.
            asker: whose mailbox the reply goes to.
            timeout_s: the longest wait.
            explain: on a timeout, look up where the ask stands for the error's message
                (False: a caller that will wait again).

        Returns:
            The answer's content.

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply within ``timeout_s``; it is still owed (``.facts``; the
                message says when the mail itself still waits in the spool).
            BirdDogError: the spooled mail was refused when forwarded here (an unknown
                target, a conflicting key: the error the send would have raised).
            StoreUnavailable: the database is unreachable (without a spool).
        """
        deadline = Deadline(timeout_s)
        backoff = Backoff(cap_s=self.poll_s)
        while True:
            if await self.writer.is_spooled(key):
                await self.writer.forward_for(key)
                if await self.writer.is_spooled(key):
                    if deadline.passed:
                        raise still_spooled(key, asker, timeout_s)
                    await asyncio.sleep(min(backoff.next(), deadline.left()))
                    continue
            try:
                return await self._wait_in_mailbox(key, asker, deadline.left(), explain=explain)
            except AskTimedOut as exc:
                raise still_owed(key, asker, timeout_s, exc.facts) from None
            except StoreBusy:
                raise
            except StoreUnavailable:
                if self.writer.spool is None:
                    raise
                if deadline.passed:
                    raise still_owed(key, asker, timeout_s) from None
                await asyncio.sleep(min(backoff.next(), deadline.left()))

    async def _wait_in_mailbox(
        self, key: str, asker: AgentAddress, timeout_s: float, *, explain: bool
    ) -> str:
        """One wait on the mailbox's answers; when it ends without a reply, one more look.

        The look (at most :data:`FACTS_TIMEOUT_S`) finds where the ask stands for the
        error, and a reply that landed just then is returned after all.
        """
        deadline = Deadline(timeout_s)
        entry = await self.answers.wait(key, timeout_s, owner=asker)
        if entry is None:
            if not explain:
                raise still_owed(key, asker, timeout_s)
            facts = await self.facts(key, asker)
            if facts is not None and facts.state is AskState.DELIVERED:
                entry = await self.answers.wait(key, 0, owner=asker)
            if entry is None:
                raise still_owed(key, asker, timeout_s, facts)
        await self._ack(entry, deadline.left())
        return answer_of(entry, key)

    async def facts(self, key: str, asker: AgentAddress) -> AskFacts | None:
        """Where the ask with mail ``key`` stands for ``asker``; None when it cannot be read.

        Returns:
            The facts, or None when the database did not answer within
            :data:`~birddog.service.timeouts.FACTS_TIMEOUT_S` (the ask is still owed
            either way).
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

    async def timed_out(
        self, key: str, asker: AgentAddress, timeout_s: float, facts: AskFacts | None = None
    ) -> AskTimedOut:
        """The error for no reply to mail ``key`` within ``timeout_s``, saying where it is.

        Args:
            key: the question's mail key.
            asker: whose mailbox the reply lands in.
            timeout_s: how long was waited, for the message.
            facts: where the ask stands, as the last look found it (None: unknown).

        Returns:
            The error: the reply still owed, and whether the mail itself still waits in
            the spool.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if await self.writer.is_spooled(key):
            return still_spooled(key, asker, timeout_s)
        return still_owed(key, asker, timeout_s, facts)


@dataclass
class Wait:
    """A wait for the reply to a mail: whose reply, and the deadline of the whole call.

    Attributes:
        service: what it waits through (the mail service).
        key: the mail key.
        asker: whose mailbox the reply lands in.
        deadline: when the call runs out of time.
    """

    service: Waiter
    key: str
    asker: AgentAddress
    deadline: Deadline

    async def answer(self, *, progress: Progress | None = None, every_s: float = PROGRESS_S) -> str:
        """Wait for the reply in what is left of the call's time; its content if it completed.

        Args:
            progress: told how the wait goes at least every ``every_s`` (None: never).
            every_s: how often ``progress`` is told.

        Returns:
            The answer's content.

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply within the call's time (said for the whole call, and for
                a mail still in the spool); it is still owed to the mailbox.
            BirdDogError: the spooled mail was refused when forwarded.
            StoreUnavailable: the database is unreachable (a service without a spool).
        """
        timeout_s = self.deadline.timeout_s
        while True:
            left = self.deadline.left()
            step = left if progress is None else min(left, every_s)
            try:
                # Where the ask stands is looked up once, when the whole wait ends.
                return await self.service.wait(
                    self.key, self.asker, timeout_s=step, explain=step >= left
                )
            except AskTimedOut as exc:
                if progress is None or self.deadline.passed:
                    raise await self.service.timed_out(
                        self.key, self.asker, timeout_s, exc.facts
                    ) from None
            await progress(self.deadline.waited(), timeout_s)


@dataclass
class Question(Wait):
    """A question just sent, and the wait for its answer (see :meth:`MailService.pose`).

    Attributes:
        asked: what its send came to (a replay, a mailbox added, spooled).
    """

    asked: Asked
