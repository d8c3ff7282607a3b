"""Fakes for tests, one for every port of :mod:`birddog.ports`, holding state you can inspect.

Each fake obeys the same contract as its real adapter: one contract suite per port runs
against both (``tests/integration/*_contract.py``), and :data:`FAKES` names the fake of
every port (a unit test fails when a port has none).

- :class:`InMemoryOutbox` (``rows``, ``receipts``, ``mailbox``): the outbox, dead-letter
  replay and rows in a caller's transaction; :class:`RecordingTransport` and
  :class:`RecordingParcelTransport` (``sent``): the transports; :class:`ManualWake`
  (``scheduled``): the wake; :class:`FrozenClock`: the clock.
- :class:`InMemoryJobs` (``jobs``): the job store; :class:`ManualListener` and
  :class:`ManualNotices`: what a ``LISTEN`` hears.
- :class:`InMemoryAsks` and :class:`InMemoryMailbox` (``entries``): the ask store and
  the mailboxes; :class:`InMemoryRoutes` (``routes``): the route book and its edits;
  :class:`InMemorySpool` (``rows``): the local spool; :class:`InMemoryTokenBook`.
- :class:`InMemoryAdmin`: the operator's pages over those fakes; :class:`InMemorySentJobs`:
  sent jobs read back (A2A tasks); :class:`InMemoryDaemonRow`: a process's row;
  :class:`InMemoryLiveSessions` (``sessions``): live sessions; :class:`InMemoryDigests`
  (``own``): the routes' digest schedules.
- The operator's commands: :class:`InMemoryOutboxAdmin` (outbox counts and lists),
  :class:`InMemoryJobAdmin` (job counts, cancels), :class:`InMemoryReports` (``daemons``:
  the processes seen; status and check), :class:`InMemoryRetention` (prune) and
  :class:`InMemoryAgents` (agents and their tokens, into an :class:`InMemoryTokenBook`).
"""

from __future__ import annotations

from typing import Final

from birddog.ports import ClaimedJob
from birddog.testing.admin import (
    DaemonSeen,
    InMemoryJobAdmin,
    InMemoryOutboxAdmin,
    InMemoryReports,
    InMemoryRetention,
)
from birddog.testing.clock import FrozenClock, ManualWake
from birddog.testing.digests import InMemoryDigests
from birddog.testing.jobs import InMemoryJobs, StoredJob
from birddog.testing.listening import ManualListener, ManualNotices
from birddog.testing.live import InMemoryLiveSessions
from birddog.testing.mail import InMemoryAsks, InMemoryMailbox
from birddog.testing.operator import InMemoryAdmin, InMemoryDaemonRow, InMemorySentJobs
from birddog.testing.outbox import InMemoryOutbox
from birddog.testing.routes import InMemoryRoutes
from birddog.testing.spool import InMemorySpool
from birddog.testing.tokens import InMemoryAgents, InMemoryTokenBook
from birddog.testing.transport import (
    Answer,
    AnswerFn,
    RecordingParcelTransport,
    RecordingTransport,
)

__all__ = [
    "FAKES",
    "Answer",
    "AnswerFn",
    "DaemonSeen",
    "FrozenClock",
    "InMemoryAdmin",
    "InMemoryAgents",
    "InMemoryAsks",
    "InMemoryDaemonRow",
    "InMemoryDigests",
    "InMemoryJobAdmin",
    "InMemoryJobs",
    "InMemoryLiveSessions",
    "InMemoryMailbox",
    "InMemoryOutbox",
    "InMemoryOutboxAdmin",
    "InMemoryReports",
    "InMemoryRetention",
    "InMemoryRoutes",
    "InMemorySentJobs",
    "InMemorySpool",
    "InMemoryTokenBook",
    "ManualListener",
    "ManualNotices",
    "ManualWake",
    "RecordingParcelTransport",
    "RecordingTransport",
    "StoredJob",
]

FAKES: Final[dict[str, type]] = {
    "Outbox": InMemoryOutbox,
    "DeadLetterReplay": InMemoryOutbox,
    "DeadLetters": InMemoryOutbox,
    "OutboxRows": InMemoryOutbox,
    "Transport": RecordingTransport,
    "ParcelTransport": RecordingParcelTransport,
    "WakeScheduler": ManualWake,
    "WakeBoard": ManualWake,
    "Clock": FrozenClock,
    "Listener": ManualListener,
    "Notices": ManualNotices,
    "TokenBook": InMemoryTokenBook,
    "JobStore": InMemoryJobs,
    "JobBacklog": InMemoryJobs,
    "JobReaper": InMemoryJobs,
    "JobCancels": InMemoryJobs,
    "TurnRecords": InMemoryJobs,
    "ClaimedJobLike": ClaimedJob,
    "AskStore": InMemoryAsks,
    "Answers": InMemoryMailbox,
    "Mailbox": InMemoryMailbox,
    "RouteBook": InMemoryRoutes,
    "RouteHolds": InMemoryRoutes,
    "RouteEdits": InMemoryRoutes,
    "RouteList": InMemoryRoutes,
    "PushRoutes": InMemoryRoutes,
    "Spool": InMemorySpool,
    "SpoolAdmin": InMemorySpool,
    "Admin": InMemoryAdmin,
    "SentJobs": InMemorySentJobs,
    "DaemonRow": InMemoryDaemonRow,
    "OutboxAdmin": InMemoryOutboxAdmin,
    "JobAdmin": InMemoryJobAdmin,
    "Reports": InMemoryReports,
    "Retention": InMemoryRetention,
    "AgentAccounts": InMemoryAgents,
    "RouteAdmin": InMemoryRoutes,
    "MailboxFeed": InMemoryMailbox,
    "LiveSessions": InMemoryLiveSessions,
    "Digests": InMemoryDigests,
}
"""The fake of every port, by the port's name in :mod:`birddog.ports`."""
