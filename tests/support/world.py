"""A mail world on fakes: birddog.testing's fakes wired together, the mail service over them.

They are wired as the composition root wires the real adapters: the ask store enqueues
into the job store, whose settlements write replies into the outbox; a test plays the
worker (claim, settle) and the drain (a reply into the asker's mailbox) with
:meth:`World.answer`. ``away`` on the ask store and the mailbox is the database that
cannot be reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from birddog import MailService, Outcome
from birddog.testing import (
    FrozenClock,
    InMemoryAsks,
    InMemoryJobs,
    InMemoryMailbox,
    InMemoryOutbox,
    InMemoryRoutes,
    InMemorySpool,
)
from tests.support.waiting import eventually


@dataclass
class World:
    """The fakes, wired together, and the mail service over them."""

    clock: FrozenClock = field(default_factory=FrozenClock)
    spooling: bool = True

    def __post_init__(self) -> None:
        self.outbox = InMemoryOutbox(clock=self.clock)
        self.jobs = InMemoryJobs(clock=self.clock, outbox=self.outbox)
        self.routes = InMemoryRoutes(clock=self.clock, outbox=self.outbox)
        self.mailbox = InMemoryMailbox(clock=self.clock)
        self.asks = InMemoryAsks(jobs=self.jobs, routes=self.routes, mailbox=self.mailbox)
        self.spool = InMemorySpool(clock=self.clock)
        self.mail = MailService(
            asks=self.asks,
            answers=self.mailbox,
            clock=self.clock,
            spool=self.spool if self.spooling else None,
            poll_s=0.01,
        )

    def away(self, reason: str | None = "connection refused") -> None:
        """Take the database away (None: bring it back)."""
        self.asks.away = self.mailbox.away = reason

    async def answer(
        self, content: str, outcome: Outcome = Outcome.COMPLETED, diagnostic: str | None = None
    ) -> None:
        """Play the worker and the drain: settle the queued job, deliver its replies."""
        claimed = await self.jobs.claim(lease_s=60)
        assert claimed is not None, "no job was queued"
        await self.jobs.settle(
            job_id=claimed.job.job_id,
            claim_token=claimed.claim_token,
            outcome=outcome,
            content=content,
            diagnostic=diagnostic,
        )
        for row in list(self.outbox.rows.values()):
            self.mailbox.deliver(row.reply)


async def queued(world: World, count: int = 1) -> None:
    """Wait until ``count`` jobs are queued (a send running in another task got there)."""
    await eventually(
        lambda: len(world.jobs.jobs), f"{count} jobs queued", until=lambda n: n >= count
    )
