"""Mailboxes in PostgreSQL: replies delivered into ``birddog.mailbox``, pulled by their agent.

An agent without an HTTP server takes its replies from a mailbox route: the drain daemon
writes each reply into ``birddog.mailbox`` in the transaction that writes its receipt and
sends ``NOTIFY birddog_mailbox`` (payload: the agent id). :class:`PostgresMailbox` is the
reading side::

    mailbox = PostgresMailbox(pool, clock=SystemClock(), notices=PostgresNotices(dsn))
    for entry in await mailbox.read("alice"):           # unread, oldest first
        print(entry.outcome, entry.content)
    await mailbox.ack([entry.key for entry in entries])  # now they are read
    answer = await mailbox.wait("mail-1", timeout_s=240)  # the reply to one mail, or None

Waits share one listener: every :meth:`PostgresMailbox.wait` of a process is answered
by one watch, which looks for all of them with one query (``in_reply_to = ANY(...)``)
when a notification names their agent, when a new waiter comes, and at least every
``poll_s``. A waiter holds no connection while it waits. A notification is only a hint:
the watch always re-queries, so a missed or lost one costs latency, never a reply.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when it is
unreachable (or no connection of the pool was free in time).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import asyncpg
import structlog

from birddog.core.errors import InvalidInput, StoreBusy, StoreUnavailable
from birddog.core.mail import AgentAddress, Outcome, Reply, reply_from_wire
from birddog.core.mailbox import MailboxEntry
from birddog.ports import Clock
from birddog.postgres.notices import MAILBOX_CHANNEL, PostgresNotices
from birddog.postgres.pool import Pool, acquire_within, store_errors
from birddog.postgres.sql import queries
from birddog.runtime import stop_task, wait_event

__all__ = ["MAILBOX_CHANNEL", "MailboxEntry", "PostgresMailbox"]

READ_LIMIT: Final = 100
"""The most replies one :meth:`PostgresMailbox.read` returns by default."""

FOLLOW_LOOKBACK: Final = timedelta(seconds=60)
"""How far back :meth:`PostgresMailbox.follow` looks again: deliveries commit in parallel,
so one stamped a little earlier may become visible after a later one was already seen."""

CHECK_TIMEOUT_S: Final = 10.0
"""The longest the watch waits for a pool connection to look for answers."""

ANSWERS_PER_QUERY: Final = 1000
"""The most mail keys one look for answers asks about."""

log = structlog.get_logger("birddog.mailbox")


def entry_from_record(record: asyncpg.Record | dict[str, Any]) -> MailboxEntry:
    """The mailbox entry for a record of ``birddog.mailbox`` (``reply`` as JSON text).

    A reply this version cannot read still makes an entry, with ``problem`` set, so one
    bad row never hides the others.

    Args:
        record: the columns of the ``mailbox_*`` queries.

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


class PostgresMailbox:
    """The reading side of mailbox routes, over an asyncpg pool.

    Args:
        pool: any asyncpg pool on the BirdDog database.
        poll_s: while waiting, look again at least this often, notification or not.
        clock: stamps acknowledgements.
        notices: the process's listening connection (None: waits poll only).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        clock: Clock,
        poll_s: float = 2.0,
        notices: PostgresNotices | None = None,
    ) -> None:
        if poll_s <= 0:
            raise ValueError("poll_s must be positive")
        self.pool = pool
        self.poll_s = poll_s
        self.clock = clock
        self.notices = notices or PostgresNotices(None)
        self._watch = _AnswerWatch(self)

    @property
    def looks(self) -> int:
        """How many times the watch has looked for waiters' replies (one query each)."""
        return self._watch.looks

    @property
    def watch_idle(self) -> bool:
        """Whether the watch waits for a wake with nothing left to look for (for tests)."""
        return self._watch.idle

    async def close(self) -> None:
        """Stop the watch; waits still running end with no reply."""
        await self._watch.close()

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
        """
        with store_errors("mailbox read"):
            records = await self.pool.fetch(
                queries["mailbox_unread"], agent_id, session_id, since, list(exclude), limit
            )
        return [entry_from_record(record) for record in records]

    async def latest(
        self, owner: AgentAddress, *, limit: int = READ_LIMIT, timeout_s: float | None = None
    ) -> list[MailboxEntry]:
        """The latest replies in ``owner``'s mailbox, read or not, newest first."""
        async with self._connection(timeout_s, "mailbox read") as conn:
            with store_errors("mailbox read"):
                records = await conn.fetch(
                    queries["mailbox_latest"], owner.agent_id, owner.session_id, limit
                )
        return [entry_from_record(record) for record in records]

    async def unread_count(self, owner: AgentAddress, *, timeout_s: float | None = None) -> int:
        """How many unread replies ``owner``'s mailbox holds."""
        async with self._connection(timeout_s, "mailbox count") as conn:
            with store_errors("mailbox count"):
                count: int = await conn.fetchval(
                    queries["mailbox_unread_count"], owner.agent_id, owner.session_id
                )
        return count

    async def ack(self, keys: Sequence[str], *, timeout_s: float | None = None) -> list[str]:
        """Mark replies read, so :meth:`read` and ``birddog inbox`` no longer list them.

        Args:
            keys: reply keys; unknown keys and replies already read are skipped.
            timeout_s: the longest wait for a pool connection (None: the pool's own).

        Returns:
            The keys that were unread and now are read.
        """
        if not keys:
            return []
        async with self._connection(timeout_s, "mailbox ack") as conn:
            with store_errors("mailbox ack"):
                records = await conn.fetch(queries["mailbox_ack"], list(keys), self.clock.now())
        return [record["key"] for record in records]

    async def owned(
        self, keys: Sequence[str], owner: AgentAddress, *, timeout_s: float | None = None
    ) -> dict[str, MailboxEntry]:
        """The replies among ``keys`` that are in ``owner``'s mailbox, read or not.

        Args:
            keys: reply keys.
            owner: the agent session whose mailbox.
            timeout_s: the longest wait for a pool connection (None: the pool's own).

        Returns:
            The entries found, by reply key; keys of other mailboxes are left out.
        """
        if not keys:
            return {}
        async with self._connection(timeout_s, "mailbox read") as conn:
            with store_errors("mailbox read"):
                records = await conn.fetch(
                    queries["mailbox_owned"], list(keys), owner.agent_id, owner.session_id
                )
        return {record["key"]: entry_from_record(record) for record in records}

    async def answer(self, mail_key: str) -> MailboxEntry | None:
        """The reply to a mail, read or not, once it is in a mailbox.

        Args:
            mail_key: the key of the mail (the reply's ``inReplyTo``).

        Returns:
            The first reply to it (lowest reply key), or None while none has arrived.
        """
        found = await self.answers([mail_key])
        return found.get(mail_key)

    async def answers(
        self, mail_keys: Sequence[str], *, timeout_s: float | None = None
    ) -> dict[str, MailboxEntry]:
        """The first reply to each of many mails that has arrived, in one query.

        Args:
            mail_keys: keys of mails (the replies' ``inReplyTo``).
            timeout_s: the longest wait for a pool connection (None: the pool's own).

        Returns:
            Per mail key with a reply in a mailbox, its first reply (lowest reply key).

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
        """
        found: dict[str, MailboxEntry] = {}
        for entry in await self.replies(mail_keys, timeout_s=timeout_s):
            found.setdefault(entry.in_reply_to, entry)
        return found

    async def replies(
        self, mail_keys: Sequence[str], *, timeout_s: float | None = None
    ) -> list[MailboxEntry]:
        """Every reply to any of ``mail_keys`` in any mailbox, read or not, in one query.

        Args:
            mail_keys: keys of mails (the replies' ``inReplyTo``).
            timeout_s: the longest wait for a pool connection (None: the pool's own).

        Returns:
            The replies, by mail key then reply key.

        Raises:
            StoreBusy: no pool connection was free within ``timeout_s``.
        """
        if not mail_keys:
            return []
        async with self._connection(timeout_s, "mailbox answers") as conn:
            with store_errors("mailbox answers"):
                records = await conn.fetch(queries["mailbox_answers"], list(mail_keys))
        return [entry_from_record(record) for record in records]

    async def wait(
        self, key: str, timeout_s: float, *, owner: AgentAddress | None = None
    ) -> MailboxEntry | None:
        """Wait until the reply to mail ``key`` is in a mailbox.

        The process's watch looks for it (with every other waiter's, in one query) on
        each notification for ``owner``'s agent (any agent without ``owner``), when this
        wait begins, and at least every ``poll_s``; a reply already there (read or not)
        is returned at once. No connection is held while waiting.

        Args:
            key: the mail key (the reply's ``inReplyTo``).
            timeout_s: the longest wait.
            owner: only a reply in this agent session's mailbox counts.

        Returns:
            The reply, or None when none arrived within ``timeout_s``.
        """
        return await self._watch.wait(key, timeout_s, owner)

    @contextlib.asynccontextmanager
    async def _connection(self, timeout_s: float | None, operation: str) -> AsyncIterator[Any]:
        if timeout_s is None:
            with store_errors(operation):
                async with self.pool.acquire() as conn:
                    yield conn
        else:
            async with acquire_within(self.pool, timeout_s, operation) as conn:
                yield conn

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
        """
        seen: dict[str, datetime] = {}
        since: datetime | None = None
        with self.notices.subscribe(MAILBOX_CHANNEL, agent_id) as notified:
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
    stop_wait = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({wait_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait_task, stop_wait):
            await stop_task(task)


class _Waiter:
    """One caller waiting for the reply to one mail."""

    __slots__ = ("future", "key", "owner")

    def __init__(self, key: str, owner: AgentAddress | None) -> None:
        self.key = key
        self.owner = owner
        self.future: asyncio.Future[MailboxEntry] = asyncio.get_running_loop().create_future()

    def offer(self, entry: MailboxEntry) -> None:
        """Take ``entry`` if it answers this waiter (and lies in its owner's mailbox)."""
        if self.future.done() or (self.owner is not None and not entry.addressed_to(self.owner)):
            return
        self.future.set_result(entry)

    def fail(self, exc: BaseException) -> None:
        """End the wait with ``exc``."""
        if not self.future.done():
            self.future.set_exception(exc)


class _AnswerWatch:
    """Looks for the replies every waiter of a process waits for, in one query per wake.

    One task, started by the first wait: it looks for the keys of new waiters at once,
    for the keys of an agent named by a notification, and for every key at least every
    ``poll_s`` (and after the listening connection came back, since a notification may
    have been lost). A look that finds the database unreachable ends the waits it looked
    for with that error; one that cannot get a pool connection in time tries again on
    the next wake.
    """

    def __init__(self, mailbox: PostgresMailbox) -> None:
        self.mailbox = mailbox
        self._waiters: dict[str, list[_Waiter]] = {}
        self._fresh: set[str] = set()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.looks = 0
        self.idle = False

    async def wait(
        self, key: str, timeout_s: float, owner: AgentAddress | None
    ) -> MailboxEntry | None:
        waiter = _Waiter(key, owner)
        if timeout_s <= 0:  # no time to wait: one look, now
            for entry in await self.mailbox.replies([key]):
                waiter.offer(entry)
            return waiter.future.result() if waiter.future.done() else None
        self._waiters.setdefault(key, []).append(waiter)
        self._fresh.add(key)
        self._kick.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="birddog-answer-watch")
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(waiter.future)
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # answered at the deadline
            return None
        finally:
            waiting = self._waiters.get(key, [])
            if waiter in waiting:
                waiting.remove(waiter)
            if not waiting:
                self._waiters.pop(key, None)
                self._fresh.discard(key)
            if not waiter.future.done():
                waiter.future.cancel()

    async def close(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        poll_s = self.mailbox.poll_s
        with self.mailbox.notices.subscribe(MAILBOX_CHANNEL, wake=self._kick) as heard:
            next_poll = loop.time() + poll_s
            while True:
                every = loop.time() >= next_poll
                if every:
                    next_poll = loop.time() + poll_s
                agents = heard.take()
                fresh, self._fresh = self._fresh, set()
                self._kick.clear()
                if every or agents is None:
                    keys = list(self._waiters)
                elif not agents:  # only new waiters: look for theirs, not everyone's again
                    keys = [key for key in fresh if key in self._waiters]
                else:
                    keys = [
                        key
                        for key, waiting in self._waiters.items()
                        if key in fresh
                        or any(w.owner is None or w.owner.agent_id in agents for w in waiting)
                    ]
                if keys:
                    missed = await self._look(keys)
                    self._fresh |= missed
                if self._fresh:
                    continue  # a look that could not run goes again at the next wake
                timeout = next_poll - loop.time() if self._waiters else None
                self.idle = not self._kick.is_set()
                try:
                    await wait_event(self._kick, timeout)
                finally:
                    self.idle = False

    async def _look(self, keys: list[str]) -> set[str]:
        """Look for the replies to ``keys``; returns the keys it could not look for."""
        for start in range(0, len(keys), ANSWERS_PER_QUERY):
            chunk = keys[start : start + ANSWERS_PER_QUERY]
            try:
                found = await self.mailbox.replies(chunk, timeout_s=CHECK_TIMEOUT_S)
                self.looks += 1
            except StoreBusy:
                return set(keys[start:])
            except StoreUnavailable as exc:
                log.warning("mailbox_watch_failed", error=type(exc.__cause__ or exc).__name__)
                for key in chunk:
                    for waiter in self._waiters.get(key, []):
                        waiter.fail(StoreUnavailable(str(exc)))
                continue
            for entry in found:
                for waiter in self._waiters.get(entry.in_reply_to, []):
                    waiter.offer(entry)
        return set()
