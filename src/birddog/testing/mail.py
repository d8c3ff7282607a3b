"""The mail fakes: the ask store and the mailboxes, in memory, over the job store fake.

:class:`InMemoryAsks` checks and writes each mail as ``birddog.send_mail`` does (the
asker's route, the target known, the key's replay rules, a mailbox route for the sender),
enqueueing its job into an :class:`~birddog.testing.InMemoryJobs`.
:class:`InMemoryMailbox` holds the replies delivered into mailboxes; :meth:`deliver`
stands for the drain writing one, and every wait for it ends then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Final

from birddog.core.ask import (
    Posted,
    key_conflict,
    replay_conflicts,
    unknown_target,
    with_asker_mailbox,
)
from birddog.core.ask_facts import AskFacts
from birddog.core.delivery import OutboxRow, RowState
from birddog.core.errors import (
    InvalidInput,
    InvalidJobPayload,
    StoreUnavailable,
    StoreUnreachable,
)
from birddog.core.jobs import AgentJobPayload, Job, JobState, decode_agent_job
from birddog.core.mail import AgentAddress, Mail, Reply
from birddog.core.mailbox import MailboxEntry
from birddog.core.spool import Outgoing, with_created_at
from birddog.ports import Clock
from birddog.runtime import wait_event
from birddog.testing.clock import FrozenClock
from birddog.testing.jobs import InMemoryJobs, StoredJob
from birddog.testing.outbox import InMemoryOutbox
from birddog.testing.routes import InMemoryRoutes

__all__ = ["FOLLOW_POLL_S", "InMemoryAsks", "InMemoryMailbox", "mail_of"]

FOLLOW_POLL_S: Final = 0.05
"""How often :meth:`InMemoryMailbox.follow` looks again when no arrival woke it."""


class InMemoryMailbox:
    """The mailboxes in a dict: replies delivered, waited for, read and acknowledged.

    Args:
        clock: stamps deliveries and acknowledgements.

    Attributes:
        entries: every reply delivered, by reply key.
        away: set it to a reason to make every call raise
            :class:`~birddog.StoreUnreachable`, as a database that cannot be reached.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or FrozenClock()
        self.entries: dict[str, MailboxEntry] = {}
        self.away: str | None = None
        self._arrived = asyncio.Event()

    def deliver(self, reply: Reply) -> MailboxEntry:
        """Put ``reply`` into its recipient's mailbox, as the drain does; waiters see it.

        A reply delivered before is kept as it was (delivery is at least once).
        """
        entry = self.entries.get(reply.key)
        if entry is None:
            entry = MailboxEntry(
                key=reply.key,
                agent_id=reply.to.agent_id,
                session_id=reply.to.session_id,
                in_reply_to=reply.in_reply_to,
                command_id=reply.reply.command_id,
                outcome=reply.reply.outcome,
                reply=reply,
                delivered_at=self.clock.now(),
            )
            self.entries[reply.key] = entry
        self._arrived.set()
        return entry

    def deliver_from(self, outbox: InMemoryOutbox) -> list[MailboxEntry]:
        """Deliver every reply ``outbox`` delivered into a mailbox (its ``mailbox`` dict)."""
        return [self.deliver(reply) for _, reply in sorted(outbox.mailbox.items())]

    async def wait(
        self, key: str, timeout_s: float, *, owner: AgentAddress | None = None
    ) -> MailboxEntry | None:
        """The reply to mail ``key`` once in a mailbox (``owner``'s); None after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while True:
            _reach(self.away)
            self._arrived.clear()
            found = self._first_reply(key, owner)
            if found is not None:
                return found
            left = deadline - loop.time()
            if left <= 0 or not await wait_event(self._arrived, left):
                return self._first_reply(key, owner)

    async def ack(self, keys: Sequence[str], *, timeout_s: float | None = None) -> list[str]:
        """Mark replies read; the keys that were unread and now are read."""
        _reach(self.away)
        now = self.clock.now()
        acked = []
        for key in dict.fromkeys(keys):
            entry = self.entries.get(key)
            if entry is not None and entry.read_at is None:
                self.entries[key] = _read(entry, now)
                acked.append(key)
        return acked

    async def read(
        self,
        agent_id: str,
        session_id: str | None = None,
        *,
        limit: int = 100,
        since: datetime | None = None,
        exclude: Sequence[str] = (),
    ) -> list[MailboxEntry]:
        """Unread replies of ``agent_id`` (of ``session_id``), oldest delivery first."""
        unread = [
            entry
            for entry in self._by_delivery()
            if entry.read_at is None
            and entry.agent_id == agent_id
            and (session_id is None or entry.session_id == session_id)
            and (since is None or entry.delivered_at >= since)
            and entry.key not in exclude
        ]
        return unread[:limit]

    async def latest(
        self, owner: AgentAddress, *, limit: int = 100, timeout_s: float | None = None
    ) -> list[MailboxEntry]:
        """The latest replies in ``owner``'s mailbox, read or not, newest first."""
        owned = [entry for entry in self._by_delivery() if entry.addressed_to(owner)]
        return owned[::-1][:limit]

    async def unread_count(self, owner: AgentAddress, *, timeout_s: float | None = None) -> int:
        """How many unread replies ``owner``'s mailbox holds."""
        return sum(
            entry.read_at is None and entry.addressed_to(owner) for entry in self.entries.values()
        )

    async def owned(
        self, keys: Sequence[str], owner: AgentAddress, *, timeout_s: float | None = None
    ) -> dict[str, MailboxEntry]:
        """The replies among ``keys`` that are in ``owner``'s mailbox, read or not."""
        found = (self.entries.get(key) for key in keys)
        return {entry.key: entry for entry in found if entry and entry.addressed_to(owner)}

    async def replies(
        self, mail_keys: Sequence[str], *, timeout_s: float | None = None
    ) -> list[MailboxEntry]:
        """Every reply to any of ``mail_keys`` in any mailbox, by mail key then reply key."""
        wanted = set(mail_keys)
        return sorted(
            (entry for entry in self.entries.values() if entry.in_reply_to in wanted),
            key=lambda entry: (entry.in_reply_to, entry.key),
        )

    async def follow(
        self,
        agent_id: str,
        session_id: str | None = None,
        *,
        stop: asyncio.Event,
        limit: int = 100,
    ) -> AsyncIterator[list[MailboxEntry]]:
        """Yield unread replies in batches as they arrive, each once, until ``stop`` is set."""
        seen: set[str] = set()
        while not stop.is_set():
            _reach(self.away)
            self._arrived.clear()
            batch = await self.read(agent_id, session_id, limit=limit, exclude=list(seen))
            if batch:
                yield batch
                seen.update(entry.key for entry in batch)
                continue
            # Waits share the arrival event (each clears it): look again now and then, as
            # PostgresMailbox looks again when no notification came.
            await wait_event(self._arrived, FOLLOW_POLL_S)

    def _first_reply(self, key: str, owner: AgentAddress | None) -> MailboxEntry | None:
        candidates = [
            entry
            for entry in self.entries.values()
            if entry.in_reply_to == key and (owner is None or entry.addressed_to(owner))
        ]
        return min(candidates, key=lambda entry: entry.key, default=None)

    def _by_delivery(self) -> list[MailboxEntry]:
        return sorted(self.entries.values(), key=lambda entry: (entry.delivered_at, entry.key))


def _read(entry: MailboxEntry, at: datetime) -> MailboxEntry:
    return MailboxEntry(
        key=entry.key,
        agent_id=entry.agent_id,
        session_id=entry.session_id,
        in_reply_to=entry.in_reply_to,
        command_id=entry.command_id,
        outcome=entry.outcome,
        reply=entry.reply,
        delivered_at=entry.delivered_at,
        read_at=at,
        problem=entry.problem,
    )


class InMemoryAsks:
    """The ask store over the job store fake, the route book fake and the mailbox fake.

    Args:
        jobs: where each mail's job is enqueued (its outbox holds the replies).
        routes: the agents' routes (the target known, the asker's mailbox).
        mailbox: where replies land (for :meth:`facts`; default: a fresh one).

    Attributes:
        workers_recent: how many workers :meth:`facts` says beat lately.
        daemons_recent: how many drain daemons :meth:`facts` says beat lately.
        away: set it to a reason to make every call raise
            :class:`~birddog.StoreUnreachable` (nothing reaches the store).
        lose_writes: the next this many writes commit, then raise
            :class:`~birddog.StoreUnavailable`, as a connection lost before the answer.
        writes: how many writes reached the store.
        server: what :meth:`server_identity` answers (None: a login that may not tell).
    """

    def __init__(
        self,
        *,
        jobs: InMemoryJobs,
        routes: InMemoryRoutes,
        mailbox: InMemoryMailbox | None = None,
    ) -> None:
        self.jobs = jobs
        self.routes = routes
        self.mailbox = mailbox if mailbox is not None else InMemoryMailbox(clock=jobs.clock)
        self.workers_recent = 0
        self.daemons_recent = 0
        self.away: str | None = None
        self.lose_writes = 0
        self.writes = 0
        self.server: str | None = "memory/1"

    async def send(
        self,
        job: Job,
        *,
        mailbox_for: AgentAddress | None,
        require_mailbox: bool,
        timeout_s: float,
    ) -> Posted:
        """Check, then enqueue the job of a mail, in the order ``birddog.send_mail`` does.

        Raises:
            InvalidJobPayload: the job carries no mail.
            UnknownAgent: the target has no route and its session was never sent work.
            JobConflict: the key was sent before with another mail, or the job id.
            InvalidInput: a mailbox route asked for an agent other than the sender.
        """
        sending = decode_agent_job(job)
        mail = sending.mail
        if mail is None:
            raise InvalidJobPayload("a mail to send carries mail", field="mail")
        route = None if mailbox_for is None else await self.routes.route(mailbox_for.agent_id)
        if require_mailbox and mailbox_for == mail.from_:
            job = with_asker_mailbox(job)
        if not await self._known(mail.to):
            raise unknown_target(mail.to)
        stored = self._stored_mail(mail.key)
        if stored is not None:
            differing = replay_conflicts(stored.mail, mail) if stored.mail else ["content"]
            if stored.kind != sending.kind:
                differing.append("kind")
            if differing:
                raise key_conflict(mail.key, differing)
            return Posted(replay=True, mailbox_added=False)
        wanted = mailbox_for is not None and route is None
        if wanted and mailbox_for != mail.from_:
            raise InvalidInput("a mailbox route goes only to the mail's sender", field="from")
        inserted = await self.jobs.enqueue(job)
        if wanted and mailbox_for is not None:
            await self.routes.add(mailbox_for.agent_id, kind="mailbox")
        return Posted(replay=not inserted, mailbox_added=wanted and inserted)

    async def write(self, outgoing: Outgoing, *, timeout_s: float) -> Posted:
        """Write one mail as its sender asked: checked (:meth:`send`) or enqueued as it is.

        Raises:
            JobConflict: the key (checked) or the job id was sent before with another mail.
            StoreUnreachable: ``away`` is set; nothing was written.
            StoreUnavailable: the write committed, and ``lose_writes`` lost its answer.
        """
        _reach(self.away)
        self.writes += 1
        posted = await self._write(outgoing, timeout_s=timeout_s)
        if self.lose_writes > 0:
            self.lose_writes -= 1
            raise StoreUnavailable("database unavailable during send: connection lost")
        return posted

    async def _write(self, outgoing: Outgoing, *, timeout_s: float) -> Posted:
        if outgoing.checked:
            return await self.send(
                outgoing.job,
                mailbox_for=outgoing.mailbox_for,
                require_mailbox=outgoing.require_mailbox,
                timeout_s=timeout_s,
            )
        job = outgoing.job
        if outgoing.require_known and not await self._known(outgoing.mail.to):
            raise unknown_target(outgoing.mail.to)
        stored = self.jobs.jobs.get(job.job_id)
        if outgoing.keep_stored_time and stored is not None:
            stored_mail = mail_of(stored.job)
            if stored_mail is not None:
                job = with_created_at(job, stored_mail.created_at)
        inserted = await self.jobs.enqueue(job)
        return Posted(replay=not inserted, mailbox_added=False)

    async def server_identity(self, *, timeout_s: float) -> str | None:
        """:attr:`server`, as a server would name itself.

        Raises:
            StoreUnreachable: ``away`` is set.
        """
        _reach(self.away)
        return self.server

    async def ensure_mailbox(self, agent_id: str, *, timeout_s: float) -> bool:
        """Give ``agent_id`` a mailbox route when it has none; True when one was added."""
        _reach(self.away)
        if await self.routes.route(agent_id) is not None:
            return False
        await self.routes.add(agent_id, kind="mailbox")
        return True

    async def mail(self, key: str, *, timeout_s: float) -> Mail | None:
        """The mail sent under ``key`` (the first job carrying it), or None."""
        _reach(self.away)
        stored = self._stored_mail(key)
        return None if stored is None else stored.mail

    async def facts(self, key: str, asker: AgentAddress, *, timeout_s: float) -> AskFacts:
        """Where the ask with mail ``key`` stands for ``asker``: its job, its reply."""
        _reach(self.away)
        now = self.jobs.clock.now()
        stored = next(
            (s for s in self._by_order() if (m := mail_of(s.job)) is not None and m.key == key),
            None,
        )
        if stored is None:
            return AskFacts(now=now)
        job = stored.job
        rows = [
            row
            for row in self._outbox_rows()
            if row.reply.in_reply_to == key and row.recipient == asker
        ]
        row = min(rows, key=lambda r: r.key, default=None)
        entry = await self.mailbox.wait(key, 0, owner=asker)
        return AskFacts(
            now=now,
            job_state=job.state.value,
            queue=job.queue,
            job_created_at=stored.created_at,
            started_at=stored.created_at if job.state is JobState.RUNNING else None,
            outcome=None if job.outcome is None else job.outcome.value,
            workers_recent=self.workers_recent,
            daemons_recent=self.daemons_recent,
            reply_key=row.key if row is not None else (entry.key if entry else None),
            reply_state=None if row is None else row.state.value,
            reply_attempts=0 if row is None else row.attempts,
            reply_due_at=None if row is None or row.state is RowState.DEAD else row.due_at,
            last_error=None if row is None else row.last_error,
            dead_reason=None if row is None or row.dead_reason is None else str(row.dead_reason),
            delivered_at=None if entry is None else entry.delivered_at,
        )

    async def _known(self, target: AgentAddress) -> bool:
        """Whether ``target`` can be asked: its agent has a route, or its session had work."""
        if await self.routes.route(target.agent_id) is not None:
            return True
        return any(stored.job.queue == target.session_id for stored in self.jobs.jobs.values())

    def _stored_mail(self, key: str) -> AgentJobPayload | None:
        for stored in self._by_order():
            mail = mail_of(stored.job)
            if mail is not None and mail.key == key:
                return decode_agent_job(stored.job)
        return None

    def _by_order(self) -> list[StoredJob]:
        return sorted(self.jobs.jobs.values(), key=lambda s: (s.created_at, s.job.job_id))

    def _outbox_rows(self) -> list[OutboxRow]:
        outbox = self.jobs.outbox
        return list(outbox.rows.values()) if isinstance(outbox, InMemoryOutbox) else []


def _reach(away: str | None) -> None:
    """Raise what a call to a database that cannot be reached raises."""
    if away is not None:
        raise StoreUnreachable(f"database unreachable: {away}")


def mail_of(job: Job) -> Mail | None:
    """The mail a job carries (None: none, or not an agent job)."""
    try:
        return decode_agent_job(job).mail
    except InvalidInput:
        return None
