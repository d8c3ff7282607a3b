"""Mailboxes in PostgreSQL: replies delivered into ``birddog.mailbox``, pulled by their agent.

An agent without an HTTP server takes its replies from a mailbox route: the drain daemon
writes each reply into ``birddog.mailbox`` in the transaction that writes its receipt and
sends ``NOTIFY birddog_mailbox`` (payload: the agent id). :class:`Mailbox` is the reading
side::

    mailbox = Mailbox(pool)
    for entry in await mailbox.read("alice"):           # unread, oldest first
        print(entry.outcome, entry.content)
    await mailbox.ack([entry.key for entry in entries])  # now they are read
    answer = await mailbox.wait("mail-1", timeout_s=240)  # the reply to one mail, or None

A notification is only a hint: every wait re-queries, and polls as a backstop, so a
missed or lost notification costs latency, never a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import asyncpg
import structlog

from birddog.clock import SystemClock
from birddog.core.errors import InvalidInput
from birddog.core.mail import AgentAddress, Outcome, Reply, reply_from_wire
from birddog.ports import Clock
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

__all__ = ["MAILBOX_CHANNEL", "Mailbox", "MailboxEntry"]

MAILBOX_CHANNEL: Final = "birddog_mailbox"
"""The channel a mailbox delivery is announced on (payload: the agent id)."""

READ_LIMIT: Final = 100
"""The most replies one :meth:`Mailbox.read` returns by default."""

FOLLOW_LOOKBACK: Final = timedelta(seconds=60)
"""How far back :meth:`Mailbox.follow` looks again: deliveries commit in parallel, so one
stamped a little earlier may become visible after a later one was already seen."""

log = structlog.get_logger("birddog.mailbox")


@dataclass(frozen=True, slots=True)
class MailboxEntry:
    """One reply in a mailbox.

    Attributes:
        key: the reply key, ``outbox:<mail key>:reply:<index>``.
        agent_id: the agent it is addressed to.
        session_id: the session it is addressed to.
        in_reply_to: the key of the mail it answers.
        command_id: the command fact id of the work that settled.
        outcome: how that work ended.
        reply: the reply itself; None when the stored JSON is not a reply this version
            can read (then ``problem`` says why).
        delivered_at: when it was delivered into the mailbox.
        read_at: when it was acknowledged (None while unread).
        problem: why ``reply`` could not be read, else None.
    """

    key: str
    agent_id: str
    session_id: str
    in_reply_to: str
    command_id: str
    outcome: Outcome | str
    reply: Reply | None
    delivered_at: datetime
    read_at: datetime | None = None
    problem: str | None = None

    @property
    def content(self) -> str:
        """The reply's content ("" when the reply could not be read)."""
        return self.reply.content if self.reply is not None else ""

    @property
    def diagnostic(self) -> str | None:
        """Why the work did not complete, when the outcome carries a diagnostic."""
        if self.reply is None:
            return self.problem
        return self.reply.reply.diagnostic

    @property
    def sender(self) -> AgentAddress | None:
        """The agent session that answered (the mail's recipient)."""
        return self.reply.from_ if self.reply is not None else None


def entry_from_record(record: asyncpg.Record | dict[str, Any]) -> MailboxEntry:
    """The mailbox entry for a record of ``birddog.mailbox`` (``reply`` as JSON text).

    A reply this version cannot read still makes an entry, with ``problem`` set, so one
    bad row never hides the others.

    Args:
        record: the columns of the ``mailbox_unread`` / ``mailbox_answer`` queries.

    Returns:
        The entry.
    """
    reply: Reply | None = None
    problem: str | None = None
    try:
        reply = reply_from_wire(json.loads(record["reply"]))
    except (InvalidInput, ValueError) as exc:
        problem = f"the stored reply cannot be read: {exc}"
    outcome: Outcome | str
    try:
        outcome = Outcome(record["outcome"])
    except ValueError:
        outcome = record["outcome"]
    return MailboxEntry(
        key=record["key"],
        agent_id=record["agent_id"],
        session_id=record["session_id"],
        in_reply_to=record["in_reply_to"],
        command_id=record["command_id"],
        outcome=outcome,
        reply=reply,
        delivered_at=record["delivered_at"],
        read_at=record["read_at"],
        problem=problem,
    )


class Mailbox:
    """The reading side of mailbox routes, over an asyncpg pool.

    Args:
        pool: any asyncpg pool on the BirdDog database.
        poll_s: while waiting, look again at least this often, notification or not.
        clock: stamps acknowledgements (default: :class:`birddog.clock.SystemClock`).
    """

    def __init__(self, pool: Pool, *, poll_s: float = 2.0, clock: Clock | None = None) -> None:
        if poll_s <= 0:
            raise ValueError("poll_s must be positive")
        self.pool = pool
        self.poll_s = poll_s
        self.clock: Clock = clock or SystemClock()

    async def read(
        self,
        agent_id: str,
        session_id: str | None = None,
        *,
        limit: int = READ_LIMIT,
        since: datetime | None = None,
        exclude: Sequence[str] = (),
    ) -> list[MailboxEntry]:
        """An agent's unread replies, oldest delivery first.

        Reading does not mark anything read; :meth:`ack` does.

        Args:
            agent_id: whose mailbox.
            session_id: only replies to this session (None: every session of the agent).
            limit: the most entries returned.
            since: only replies delivered at or after this time.
            exclude: leave out these keys (already seen).

        Returns:
            Up to ``limit`` unread entries.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("mailbox read"):
            records = await self.pool.fetch(
                queries["mailbox_unread"], agent_id, session_id, since, list(exclude), limit
            )
        return [entry_from_record(record) for record in records]

    async def ack(self, keys: Sequence[str]) -> list[str]:
        """Mark replies read, so :meth:`read` and ``birddog inbox`` no longer list them.

        Args:
            keys: reply keys; unknown keys and replies already read are skipped.

        Returns:
            The keys that were unread and now are read.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        if not keys:
            return []
        with store_errors("mailbox ack"):
            records = await self.pool.fetch(queries["mailbox_ack"], list(keys), self.clock.now())
        return [record["key"] for record in records]

    async def answer(self, mail_key: str) -> MailboxEntry | None:
        """The reply to a mail, read or not, once it is in a mailbox.

        Args:
            mail_key: the key of the mail (the reply's ``inReplyTo``).

        Returns:
            The first reply to it (lowest reply key), or None while none has arrived.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("mailbox answer"):
            record = await self.pool.fetchrow(queries["mailbox_answer"], mail_key)
        return None if record is None else entry_from_record(record)

    async def wait(self, key: str, timeout_s: float) -> MailboxEntry | None:
        """Wait until the reply to mail ``key`` is in a mailbox.

        Listens on ``birddog_mailbox`` and looks again on every notification and at
        least every ``poll_s``; a reply already there (read or not) is returned at once.

        Args:
            key: the mail key (the reply's ``inReplyTo``).
            timeout_s: the longest wait.

        Returns:
            The reply, or None when none arrived within ``timeout_s``.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        async with _notifications(self.pool, MAILBOX_CHANNEL) as notified:
            while True:
                found = await self.answer(key)
                if found is not None:
                    return found
                left = deadline - loop.time()
                if left <= 0:
                    return None
                await notified.wait(min(left, self.poll_s))

    async def follow(
        self,
        agent_id: str,
        session_id: str | None = None,
        *,
        stop: asyncio.Event,
        limit: int = READ_LIMIT,
    ) -> AsyncIterator[list[MailboxEntry]]:
        """Yield unread replies as they arrive, in batches, until ``stop`` is set.

        The first batch holds what is unread now; each later one what arrived since, each
        reply once (whether or not the caller acknowledges it). Empty batches are not
        yielded.

        Args:
            agent_id: whose mailbox.
            session_id: only replies to this session (None: every session of the agent).
            stop: set to end the iteration.
            limit: the most entries in one batch.

        Yields:
            Batches of new entries, oldest first.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        seen: dict[str, datetime] = {}
        since: datetime | None = None
        async with _notifications(self.pool, MAILBOX_CHANNEL) as notified:
            while not stop.is_set():
                batch = await self.read(
                    agent_id, session_id, limit=limit, since=since, exclude=list(seen)
                )
                if batch:
                    yield batch
                for entry in batch:
                    seen[entry.key] = entry.delivered_at
                if seen:
                    since = max(seen.values()) - FOLLOW_LOOKBACK
                    seen = {key: at for key, at in seen.items() if at >= since}
                if len(batch) == limit:
                    continue
                await _first_of(notified.wait(self.poll_s), stop)


async def _first_of(waiting: Any, stop: asyncio.Event) -> None:
    """Await ``waiting`` unless ``stop`` is set first."""
    wait_task = asyncio.ensure_future(waiting)
    stop_task = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({wait_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait_task, stop_task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Hints:
    """Notifications heard on a channel: a hint to look again, nothing more."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a notification; True when one came."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), max(timeout_s, 0.0))
        notified = self._event.is_set()
        self._event.clear()
        return notified

    def heard(self, _conn: object, _pid: int, _channel: str, _payload: object) -> None:
        """The asyncpg listener callback."""
        self._event.set()


@contextlib.asynccontextmanager
async def _notifications(pool: Pool, channel: str) -> AsyncIterator[_Hints]:
    """LISTEN on ``channel`` on one pool connection, held for as long as the context lasts.

    The connection is this listener's alone until the context ends; the pool then resets
    it (``UNLISTEN *``), so nothing it heard leaks to the connection's next user. If the
    connection is lost meanwhile, waits simply time out: callers poll as a backstop.
    """
    hints = _Hints()
    with store_errors("mailbox listen"):
        conn = await pool.acquire()
    try:
        with store_errors("mailbox listen"):
            await conn.add_listener(channel, hints.heard)
        yield hints
    finally:
        # Also when the wait was cancelled (an interrupted ask): a connection released
        # with its listener still on makes the driver warn on the user's terminal.
        if not conn.is_closed():
            try:
                await conn.remove_listener(channel, hints.heard)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
                log.warning("mailbox_unlisten_failed", error=type(error).__name__)
        await pool.release(conn)
