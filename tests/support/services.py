"""The commands' services over birddog.testing's fakes: a Services with no database behind it.

:class:`FakeServices` wires the fakes as the composition root wires the adapters (one
outbox, job store, route book and mailbox under every port, on one frozen clock), so a
command's logic (``status_report``, ``check_report``, ``spool_problems``) runs in a unit
test as it runs over PostgreSQL. Its fakes are its attributes: put rows in, then ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from birddog.core.egress import EgressPolicy
from birddog.service.mail import MailService
from birddog.service.mailroom import MailRoom
from birddog.service.replaying import CheckedReplay
from birddog.testing import (
    FrozenClock,
    InMemoryAdmin,
    InMemoryAgents,
    InMemoryAsks,
    InMemoryJobAdmin,
    InMemoryJobs,
    InMemoryLiveSessions,
    InMemoryMailbox,
    InMemoryOutbox,
    InMemoryOutboxAdmin,
    InMemoryReports,
    InMemoryRetention,
    InMemoryRoutes,
    InMemorySpool,
    ManualWake,
    RecordingTransport,
)

__all__ = ["FakeServices"]


@dataclass
class FakeServices:
    """A :class:`~birddog.service.entry.Services` over the fakes (mypy holds it to it)."""

    clock: FrozenClock = field(default_factory=FrozenClock)
    dsn: str = "postgresql://fake/birddog"

    def __post_init__(self) -> None:
        clock = self.clock
        self.store = InMemoryOutbox(clock=clock)
        self.job_store = InMemoryJobs(clock=clock, outbox=self.store)
        self.routes = InMemoryRoutes(clock=clock, outbox=self.store)
        self.mailbox = InMemoryMailbox(clock=clock)
        self.spool = InMemorySpool(clock=clock, path="/var/spool/birddog.sqlite")
        self.outbox = InMemoryOutboxAdmin(self.store, clock=clock)
        self.replay = CheckedReplay(self.store, self.routes, EgressPolicy())
        self.jobs = InMemoryJobAdmin(self.job_store)
        self.reports = InMemoryReports(
            outbox=self.store, jobs=self.job_store, routes=self.routes, clock=clock
        )
        self.retention = InMemoryRetention(
            outbox=self.store, jobs=self.job_store, mailbox=self.mailbox, clock=clock
        )
        self.admin = InMemoryAdmin(outbox=self.store, jobs=self.job_store, routes=self.routes)
        self.agents = InMemoryAgents(routes=self.routes, clock=clock)
        self.live = InMemoryLiveSessions(clock=clock, routes=self.routes)
        self.routes.digests.jobs = self.job_store
        self.wake = ManualWake()
        self.room = MailRoom(
            outbox=self.store, transport=RecordingTransport(), wake=self.wake, clock=clock
        )
        self.sender = MailService(
            asks=InMemoryAsks(jobs=self.job_store, routes=self.routes, mailbox=self.mailbox),
            answers=self.mailbox,
            clock=clock,
            spool=self.spool,
            poll_s=0.01,
        )
