"""The ports BirdDog is written against: outbox, transport, wake, routes, tokens, asks and more.

Each is a small ``Protocol`` with keyword-only arguments, in a module by concept:
:mod:`~birddog.ports.delivery` (outbox, transports, wake, clock, listener),
:mod:`~birddog.ports.routes` (routes, their edits and holds, tokens),
:mod:`~birddog.ports.mail` (the ask store, mailboxes, notices, sent jobs, the spool),
:mod:`~birddog.ports.jobs` (the job store and what goes with it),
:mod:`~birddog.ports.live` (live sessions) and
:mod:`~birddog.ports.operator` (the console's reads and actions, with the values its pages
carry). Every name is importable from here. ``birddog.testing`` has a fake for every port;
``birddog.postgres``, ``birddog.http`` and ``birddog.sqlite`` the real adapters.
"""

from birddog.ports.delivery import (
    HTTP_ROUTE,
    Clock,
    Listener,
    Outbox,
    OutboxRows,
    Page,
    ParcelTransport,
    RouteHint,
    RouteKind,
    Settled,
    Transport,
    WakeBoard,
    WakeScheduler,
)
from birddog.ports.jobs import (
    ClaimedJob,
    ClaimedJobLike,
    DaemonRow,
    JobBacklog,
    JobCancels,
    JobReaper,
    JobStore,
    TurnRecords,
)
from birddog.ports.live import LiveSessions
from birddog.ports.mail import (
    Answers,
    AskStore,
    Mailbox,
    Notices,
    SentJobs,
    Spool,
    SpoolAdmin,
)
from birddog.ports.operator import (
    JOB_STATES,
    PENDING_STATUSES,
    PREVIEW_CHARS,
    Admin,
    DeadLetterReplay,
    DeadLetters,
    Listing,
    Overview,
    Story,
)
from birddog.ports.routes import (
    Route,
    RouteBook,
    RouteEdits,
    RouteHolds,
    RouteList,
    TokenBook,
)

__all__ = [
    "HTTP_ROUTE",
    "JOB_STATES",
    "PENDING_STATUSES",
    "PREVIEW_CHARS",
    "Admin",
    "Answers",
    "AskStore",
    "ClaimedJob",
    "ClaimedJobLike",
    "Clock",
    "DaemonRow",
    "DeadLetterReplay",
    "DeadLetters",
    "JobBacklog",
    "JobCancels",
    "JobReaper",
    "JobStore",
    "Listener",
    "Listing",
    "LiveSessions",
    "Mailbox",
    "Notices",
    "Outbox",
    "OutboxRows",
    "Overview",
    "Page",
    "ParcelTransport",
    "Route",
    "RouteBook",
    "RouteEdits",
    "RouteHint",
    "RouteHolds",
    "RouteKind",
    "RouteList",
    "SentJobs",
    "Settled",
    "Spool",
    "SpoolAdmin",
    "Story",
    "TokenBook",
    "Transport",
    "TurnRecords",
    "WakeBoard",
    "WakeScheduler",
]
