"""Sending outside a transaction of your own: one object that sends, asks and spools.

A :class:`Sender` is an :class:`~birddog.Asking` with a local spool
(:class:`~birddog.spool.SqliteSpool`) behind it. It is what ``birddog send``, ``birddog
ask`` and the MCP server send with, and the library's way for code that has no
transaction to enqueue in (``birddog.open_sender``)::

    async with birddog.open_sender(pool, dsn) as sender:
        sent = await sender.send(to="upper:s-upper", from_="me:s-me", content="hello")
        if sent.spooled:
            ...  # accepted on this machine's disk; forwarded once the database answers

- When the database cannot be reached (no connection could be opened, so nothing of the
  mail reached it: :class:`~birddog.StoreUnreachable`), the mail is written to the spool
  and :attr:`Asked.spooled <birddog.Asked.spooled>` says why; the call returns only after
  the spool's commit. A refused statement, a bad address or a conflict is never spooled:
  it raises, as it would without a spool.
- A connection lost in the middle of a write may or may not have committed it; the same
  mail again is a replay or the first write, so the write is tried once more (and spooled
  if the database is then unreachable).
- Order per (sender, recipient session) holds: while mail of that pair waits in the spool,
  a new one is forwarded behind it, or spooled behind it when that cannot be done now.
- :meth:`Sender.wait` outlasts the database being away: it forwards the mail itself once
  the database answers, and waits for the reply until its timeout, as any ask does.
- :meth:`Sender.forward` forwards the spool (``birddog spool forward``; the daemon, the
  worker and the MCP server do it at start and while mail waits).

The spool cannot help inside a caller's own transaction: that transaction cannot commit
without the database, so :func:`birddog.enqueue_accepted_job` stays what it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final

import structlog

from birddog.asking import (
    DEFAULT_ASK_TIMEOUT_S,
    DEFAULT_SEND_TIMEOUT_S,
    Asked,
    Asking,
    still_owed,
)
from birddog.core.ask import address_text
from birddog.core.errors import (
    AskTimedOut,
    DatabaseRefused,
    SpoolFailed,
    StoreBusy,
    StoreRefused,
    StoreUnavailable,
    StoreUnreachable,
)
from birddog.core.mail import AgentAddress, Mail
from birddog.core.spool import Outgoing
from birddog.runtime import Backoff
from birddog.spool import ForwardReport, SpoolForwarder, SqliteSpool

if TYPE_CHECKING:
    from birddog.core.ask_facts import AskFacts
    from birddog.core.jobs import Job

log = structlog.get_logger("birddog.sending")

__all__ = ["DATABASE_UNREACHABLE", "FORWARD_WRITE_TIMEOUT_S", "Sender", "open_sender"]

DATABASE_UNREACHABLE: Final = "database unreachable"
"""Why a mail is spooled when no connection to the database could be opened."""

BEHIND_SPOOLED: Final = "behind mail still waiting in the spool"
"""Why a mail is spooled while the database answers: earlier mail of its lane still waits."""

FORWARD_WRITE_TIMEOUT_S: Final = 30.0
"""The longest a forwarded mail waits for a database connection."""

INSUFFICIENT_PRIVILEGE: Final = "42501"
"""The SQLSTATE of a statement this login may not run: a concern of the login, not the mail."""

WAIT_POLL_S: Final = 2.0
"""While the database is away, a wait looks again at least this often."""


class Sender:
    """Sends mail and asks questions, durably, spooling what the database cannot take now.

    One per process, like the :class:`~birddog.Asking` it is built over (see the module).

    Args:
        asking: the process's asking (its ask store writes every mail).
        spool: the local spool.
        describe: the reason a quarantined mail keeps for a refused write (the server's
            words for a refused statement); default: the error's message.
        poll_s: while the database is away, a wait looks again at least this often.
    """

    def __init__(
        self,
        *,
        asking: Asking,
        spool: SqliteSpool,
        describe: Callable[[BaseException], str] = str,
        poll_s: float = WAIT_POLL_S,
    ) -> None:
        self.asking = asking
        self.spool = spool
        self.poll_s = poll_s
        self.forwarder = SpoolForwarder(spool, self._forward_one, describe=describe)

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
        """Send a mail as an agent job (see :meth:`birddog.Asking.send`), or spool it.

        Returns:
            What was sent; ``spooled`` says why when it waits in the spool instead.

        Raises:
            InvalidInput: a bad address, key or content, naming the field.
            ContentTooLarge: the content is above the limit.
            UnknownAgent: ``to`` has no route and its session was never sent work.
            NotAMailbox: ``mailbox_required`` and the sender's route posts to an inbox URL.
            JobConflict: the key was used before for another mail.
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        outgoing = self.asking.outgoing(
            to=to,
            from_=from_,
            content=content,
            key=key,
            reply_to=reply_to,
            mailbox_required=mailbox_required,
            priority=priority,
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
    ) -> Asked:
        """Send a question whose reply goes to the asker's mailbox (see :meth:`send`).

        Raises:
            NotAMailbox: the asker's route posts to an inbox URL (checked when the mail
                reaches the database).
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

    async def enqueue(
        self, job: Job, *, keep_stored_time: bool = False, timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    ) -> Asked:
        """Enqueue an agent job with mail as it is (``birddog send --job-id``), or spool it.

        Args:
            job: the job, from :func:`birddog.agent_job`, carrying mail.
            keep_stored_time: a job already stored under this id lends its mail's
                ``createdAt`` (the caller did not pin one), so a retry is a replay.
            timeout_s: the longest wait for a database connection.

        Returns:
            What was sent: ``replay`` for an identical job already stored.

        Raises:
            InvalidJobPayload: the job carries no mail.
            JobConflict: a job with this id exists with different fields.
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        outgoing = Outgoing(job=job, checked=False, keep_stored_time=keep_stored_time)
        _ = outgoing.lane  # a spooled job carries mail: refused now, not when forwarded
        return await self.post(outgoing, timeout_s=timeout_s)

    async def post(self, outgoing: Outgoing, *, timeout_s: float = DEFAULT_SEND_TIMEOUT_S) -> Asked:
        """Write one mail to the database, or to the spool when the database is unreachable.

        Args:
            outgoing: the mail and how its write is checked.
            timeout_s: the longest wait for a database connection (and for a forwarder
                that holds the spool).

        Returns:
            What was sent, or that it was spooled and why.

        Raises:
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        lane = outgoing.lane
        if await self.spool.has_waiting(lane):
            # Earlier mail of this lane waits: it goes first, or this one waits behind it.
            report = await self.forwarder.forward(lane=lane, wait_s=timeout_s)
            if report.kept:
                return await self._spool(outgoing, DATABASE_UNREACHABLE)
            if await self.spool.has_waiting(lane):
                return await self._spool(outgoing, BEHIND_SPOOLED)
        try:
            return await self._write(outgoing, timeout_s=timeout_s)
        except StoreUnreachable as exc:
            return await self._spool(outgoing, DATABASE_UNREACHABLE, cause=exc)

    async def _write(self, outgoing: Outgoing, *, timeout_s: float) -> Asked:
        """Write to the database; a connection lost mid-way is tried once more (a replay)."""
        try:
            posted = await self.asking.asks.write(outgoing, timeout_s=timeout_s)
        except (StoreUnreachable, StoreBusy, StoreRefused):
            raise
        except StoreUnavailable as exc:
            log.warning("send_retried", key=outgoing.mail.key, error=type(exc).__name__)
            posted = await self.asking.asks.write(outgoing, timeout_s=timeout_s)
        return Asked.of(outgoing, replay=posted.replay, mailbox_added=posted.mailbox_added)

    async def _spool(
        self, outgoing: Outgoing, reason: str, *, cause: BaseException | None = None
    ) -> Asked:
        try:
            await self.spool.put(outgoing)
        except SpoolFailed as exc:
            if cause is None:
                raise
            raise SpoolFailed(f"{cause}; and the spool could not take the mail: {exc}") from exc
        log.warning("mail_spooled", key=outgoing.mail.key, reason=reason)
        return Asked.of(outgoing, replay=False, mailbox_added=False, spooled=reason)

    async def _forward_one(self, outgoing: Outgoing) -> None:
        try:
            await self._write(outgoing, timeout_s=FORWARD_WRITE_TIMEOUT_S)
        except StoreRefused as exc:
            if getattr(exc.__cause__, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
                raise
            # This process's login may not do what the mail needs (a worker's role reads no
            # routes, which a checked send looks at): the mail is sound, so it waits, in
            # order, for a forwarder whose login may (the daemon, a sender).
            raise DatabaseRefused(
                f"this process's database login may not forward {outgoing.mail.key!r} ({exc}); "
                "it waits for the daemon, a sender or birddog spool forward"
            ) from exc

    async def forward(self, *, wait_s: float = 0.0) -> ForwardReport:
        """Forward the spool into the database once, in order (``birddog spool forward``).

        Args:
            wait_s: how long to wait for another forwarder that holds the spool.

        Returns:
            What was forwarded, quarantined, or kept because the database is away.

        Raises:
            SpoolFailed: the spool cannot be read or written.
        """
        return await self.forwarder.forward(wait_s=wait_s)

    async def forward_waiting(self) -> ForwardReport:
        """Forward the spool if mail waits in it (a process's side task: cheap when empty).

        Returns:
            What was done (nothing, for an empty spool).

        Raises:
            StoreUnavailable: mail waits and the database is away (the side task retries).
            SpoolFailed: the spool cannot be read or written.
        """
        if not await self.spool.has_waiting():
            return ForwardReport()
        report = await self.forward()
        if report.kept:
            raise StoreUnavailable(f"the spool's mail waits: {report.error}")
        return report

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
        spooled = await self.spool.mail(key)
        if spooled is not None:
            return spooled
        return await self.asking.asks.mail(key, timeout_s=timeout_s)

    async def wait_for_answer(self, asked: Asked, *, timeout_s: float) -> str:
        """Wait for the reply to an ask (see :meth:`wait`)."""
        return await self.wait(asked.key, asked.asker, timeout_s=timeout_s)

    async def wait(
        self, key: str, asker: AgentAddress, *, timeout_s: float, explain: bool = True
    ) -> str:
        """Wait for the reply to mail ``key``; the database away only makes it wait longer.

        While the mail is still spooled, it is forwarded as soon as the database answers;
        while the database is away, the wait looks again every ``poll_s`` at most.

        Args:
            key: the mail key.
            asker: whose mailbox the reply lands in.
            timeout_s: the longest wait.
            explain: on a timeout, look up where the ask stands for the error's message
                (False: a caller that will wait again).

        Returns:
            The answer's content.

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply within ``timeout_s`` (the message says when the mail
                itself still waits in the spool); it is still owed.
            BirdDogError: the spooled mail was refused when forwarded here (an unknown
                target, a conflicting key: the error the send would have raised).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        backoff = Backoff(cap_s=self.poll_s)
        while True:
            left = deadline - loop.time()
            if await self.spool.is_waiting(key):
                report = await self.forwarder.forward(wait_s=0.0)
                if key in report.refused:
                    raise report.refused[key]
                if await self.spool.is_waiting(key):
                    if left <= 0:
                        raise _still_spooled(key, asker, timeout_s)
                    await asyncio.sleep(min(backoff.next(), left))
                    continue
            try:
                return await self.asking.wait(key, asker, timeout_s=left, explain=explain)
            except AskTimedOut as exc:
                raise still_owed(key, asker, timeout_s, exc.facts) from None
            except StoreBusy:
                raise
            except StoreUnavailable:
                if deadline - loop.time() <= 0:
                    raise still_owed(key, asker, timeout_s) from None
                await asyncio.sleep(min(backoff.next(), max(deadline - loop.time(), 0.0)))

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
        """Ask and wait for the answer (see :meth:`birddog.Asking.ask`), spooling if need be.

        A question spooled while the database is away is forwarded once it answers, and
        the wait goes on until ``timeout_s``.

        Raises:
            AskFailed: the work ended otherwise than ``completed``.
            AskTimedOut: no reply in time (``.key``); it is still owed to the mailbox.
            InvalidInput: bad input; nothing was written.
            UnknownAgent: ``to`` is not an agent session BirdDog knows.
            NotAMailbox: the asker's route posts to an inbox URL.
            JobConflict: the key was used before for something else.
            StoreBusy: no database connection was free in time; nothing was asked.
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        asked = await self.send_ask(
            to=to, from_=from_, content=content, key=key, timeout_s=timeout_s, priority=priority
        )
        try:
            return await self.wait_for_answer(asked, timeout_s=deadline - loop.time())
        except AskTimedOut as exc:
            # Said for the whole call, not for what was left of it after the send.
            raise await self.timed_out(asked, timeout_s, exc.facts) from None

    async def timed_out(
        self, asked: Asked, timeout_s: float, facts: AskFacts | None = None
    ) -> AskTimedOut:
        """The error for no reply to ``asked`` within ``timeout_s``, saying where the mail is.

        Args:
            asked: the question.
            timeout_s: how long was waited, for the message.
            facts: where the ask stands, as the last look found it (None: unknown).

        Returns:
            The error: the reply still owed, and whether the mail itself still waits in
            the spool.

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        if await self.spool.is_waiting(asked.key):
            return _still_spooled(asked.key, asked.asker, timeout_s)
        return still_owed(asked.key, asked.asker, timeout_s, facts)


def _still_spooled(key: str, asker: AgentAddress, timeout_s: float) -> AskTimedOut:
    """No reply in time, and the mail itself still waits in the spool."""
    text = address_text(asker)
    return AskTimedOut(
        f"no reply to {key!r} within {timeout_s:g} s: the mail is still in the local spool "
        f"(the database is unreachable) and is forwarded once it answers; the reply will land "
        f"in the mailbox of {text} (birddog inbox {text})",
        key=key,
        asker=text,
    )


def open_sender(
    pool: Any, listen_dsn: str | None, **options: Any
) -> AbstractAsyncContextManager[Sender]:
    """The process's :class:`Sender` over an asyncpg pool and the local spool.

    Make one per process and send and ask through it; while the database cannot be
    reached, mail goes to the spool and is forwarded (in order, exactly once) by the
    sender itself while it is open, by a daemon on this host, or by ``birddog spool
    forward``::

        pool = await birddog.postgres.pool.create_pool(dsn, min_size=0)  # opens while away
        async with birddog.open_sender(pool, dsn) as sender:
            sent = await sender.send(to="upper:s-upper", from_="me:s-me", content="hi")

    Args:
        pool: an asyncpg pool on the BirdDog database; with ``min_size=0`` it can be made
            while the database is away.
        listen_dsn: the database for the listening connection (direct, not through
            PgBouncer); None: waits poll only.
        **options: ``spool_path``, ``spool_max_bytes``, ``spool_max_age_s`` (default: the
            ``BIRDDOG_SPOOL_*`` settings), ``forward_every_s`` (default
            ``BIRDDOG_SPOOL_FORWARD_S``; 0: no forwarding of its own), ``poll_s``,
            ``clock``, ``max_content_bytes``.

    Returns:
        An async context manager yielding the :class:`Sender`.
    """
    from birddog.bootstrap import open_sender as wired  # noqa: PLC0415 - import birddog stays light

    return wired(pool, listen_dsn, **options)
