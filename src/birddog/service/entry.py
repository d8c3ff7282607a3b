"""What an entry point is handed: the services and ports its commands call, typed by port.

The ``birddog`` commands receive a :class:`Services` (``birddog.cli.with_services``), never
the concrete adapters: the composition root's ``Adapters`` satisfies it (mypy checks it
where the CLI hands one over), and so does ``birddog.testing.InMemoryServices`` over the
fakes, so a command's logic runs in a unit test without a database.
"""

from __future__ import annotations

from typing import Protocol

from birddog.ports import (
    Admin,
    AgentAccounts,
    Clock,
    DeadLetterReplay,
    JobAdmin,
    LiveSessions,
    MailboxFeed,
    OutboxAdmin,
    Reports,
    Retention,
    RouteAdmin,
    SpoolAdmin,
)
from birddog.service.mail import MailService
from birddog.service.mailroom import MailRoom

__all__ = ["Services"]


class Services(Protocol):
    """The services and ports the commands call, over one database.

    Each is read-only: a command calls them and never replaces one.
    """

    @property
    def dsn(self) -> str:
        """The database's DSN (an agent's login is printed as a DSN of the same database)."""
        ...

    @property
    def clock(self) -> Clock:
        """The wall clock every adapter reads."""
        ...

    @property
    def outbox(self) -> OutboxAdmin:
        """What the outbox holds: counts, the pending and dead lists."""
        ...

    @property
    def replay(self) -> DeadLetterReplay:
        """Puts dead letters back to pending, once their cause is fixed."""
        ...

    @property
    def routes(self) -> RouteAdmin:
        """The route book and its administration."""
        ...

    @property
    def mailbox(self) -> MailboxFeed:
        """The agents' mailboxes, read now or as replies arrive."""
        ...

    @property
    def spool(self) -> SpoolAdmin:
        """This host's local spool: what it holds, its quarantine."""
        ...

    @property
    def sender(self) -> MailService:
        """The mail service: sends and asks (spooling what the database cannot take now)."""
        ...

    @property
    def jobs(self) -> JobAdmin:
        """The jobs: one by id, counts, cancels."""
        ...

    @property
    def reports(self) -> Reports:
        """Who is running and what is stuck."""
        ...

    @property
    def retention(self) -> Retention:
        """Deletes what the retention settings no longer keep."""
        ...

    @property
    def admin(self) -> Admin:
        """The operator's pages: jobs, one job, one mail's story."""
        ...

    @property
    def agents(self) -> AgentAccounts:
        """Agents that act as themselves and their bearer tokens."""
        ...

    @property
    def live(self) -> LiveSessions:
        """The live sessions (a route's live grace is set here)."""
        ...

    @property
    def room(self) -> MailRoom:
        """The mail room (when it next wakes)."""
        ...
