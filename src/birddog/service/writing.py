"""The write of one mail: into the database, or into the local spool when it is unreachable.

:class:`MailWriter` is the mail service's one path to storage; the spool's forwarder
writes through it too, so a spooled mail meets the same rules later as it would have at
once.

- A connection lost in the middle of a write may or may not have committed it; the same
  mail again is a replay or the first write, so the write is tried once more.
- With a spool, mail the database cannot take because no connection could be opened
  (nothing of it reached the database: :class:`~birddog.StoreUnreachable`) is written to
  the spool, and :attr:`Asked.spooled <birddog.Asked.spooled>` says why; the call returns
  only after the spool's commit. A refused statement, a bad address or a conflict is never
  spooled: it raises, as it would without a spool.
- Order per (sender, recipient session) holds: while mail of that lane waits in the
  spool, a new one is forwarded behind it, or spooled behind it when that cannot be done
  now.
- Without a spool, the database away raises :class:`~birddog.StoreUnavailable`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import structlog

from birddog.core.errors import (
    DatabaseRefused,
    SpoolFailed,
    StoreBusy,
    StoreRefused,
    StoreUnavailable,
    StoreUnreachable,
)
from birddog.service.asked import Asked
from birddog.service.forwarding import ForwardReport, SpoolForwarder

if TYPE_CHECKING:
    from birddog.core.mail import Mail
    from birddog.core.spool import Outgoing
    from birddog.ports import AskStore, Spool

log = structlog.get_logger("birddog.sending")

__all__ = ["BEHIND_SPOOLED", "DATABASE_UNREACHABLE", "FORWARD_WRITE_TIMEOUT_S", "MailWriter"]

DATABASE_UNREACHABLE: Final = "database unreachable"
"""Why a mail is spooled when no connection to the database could be opened."""

BEHIND_SPOOLED: Final = "behind mail still waiting in the spool"
"""Why a mail is spooled while the database answers: earlier mail of its lane still waits."""

FORWARD_WRITE_TIMEOUT_S: Final = 30.0
"""The longest a forwarded mail waits for a database connection."""

INSUFFICIENT_PRIVILEGE: Final = "42501"
"""The SQLSTATE of a statement this login may not run: a concern of the login, not the mail."""


class MailWriter:
    """Writes each mail to the database, or to the spool when the database is unreachable.

    Args:
        asks: the ask store (checks and writes each mail).
        spool: the local spool; None: nothing is spooled.
        describe: the reason a quarantined mail keeps for a refused write (the server's
            words for a refused statement); default: the error's message.
    """

    def __init__(
        self,
        asks: AskStore,
        spool: Spool | None = None,
        *,
        describe: Callable[[BaseException], str] = str,
    ) -> None:
        self.asks = asks
        self.spool = spool
        self.forwarder = (
            None
            if spool is None
            else SpoolForwarder(
                spool, self._forward_one, describe=describe, identify=self._identify
            )
        )

    async def post(self, outgoing: Outgoing, *, timeout_s: float) -> Asked:
        """Write one mail to the database, or to the spool when the database is unreachable.

        Args:
            outgoing: the mail and how its write is checked.
            timeout_s: the longest wait for a database connection (and for a forwarder
                that holds the spool).

        Returns:
            What was sent, or that it was spooled and why.

        Raises:
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreUnavailable: the database failed during the write, twice (without a
                spool: or could not be reached).
            SpoolFull: the database is unreachable and the spool is full.
            SpoolFailed: the database is unreachable and the spool cannot be written.
        """
        if self.spool is None or self.forwarder is None:
            return await self.write(outgoing, timeout_s=timeout_s)
        lane = outgoing.lane
        if await self.spool.has_waiting(lane):
            # Earlier mail of this lane waits: it goes first, or this one waits behind it.
            report = await self.forwarder.forward(lane=lane, wait_s=timeout_s)
            if report.kept:
                return await self._spool(outgoing, DATABASE_UNREACHABLE)
            if await self.spool.has_waiting(lane):
                return await self._spool(outgoing, BEHIND_SPOOLED)
        try:
            return await self.write(outgoing, timeout_s=timeout_s)
        except StoreUnreachable as exc:
            return await self._spool(outgoing, DATABASE_UNREACHABLE, cause=exc)

    async def write(self, outgoing: Outgoing, *, timeout_s: float) -> Asked:
        """Write to the database; a connection lost mid-way is tried once more (a replay).

        Raises:
            StoreBusy: no database connection was free within ``timeout_s``.
            StoreRefused: the database refused the statement.
            StoreUnavailable: unreachable, or failed during the write twice.
        """
        try:
            posted = await self.asks.write(outgoing, timeout_s=timeout_s)
        except (StoreUnreachable, StoreBusy, StoreRefused):
            raise
        except StoreUnavailable as exc:
            log.warning("send_retried", key=outgoing.mail.key, error=type(exc).__name__)
            posted = await self.asks.write(outgoing, timeout_s=timeout_s)
        return Asked.of(outgoing, replay=posted.replay, mailbox_added=posted.mailbox_added)

    async def _spool(
        self, outgoing: Outgoing, reason: str, *, cause: BaseException | None = None
    ) -> Asked:
        if self.spool is None:  # post spools only with a spool
            raise SpoolFailed("no spool to keep the mail in")
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
            await self.write(outgoing, timeout_s=FORWARD_WRITE_TIMEOUT_S)
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

    async def _identify(self) -> str | None:
        """The server the writes reach (None: away, or this login may not tell)."""
        try:
            return await self.asks.server_identity(timeout_s=FORWARD_WRITE_TIMEOUT_S)
        except (StoreUnavailable, StoreRefused, DatabaseRefused):
            return None

    async def forward(self, *, wait_s: float = 0.0, adopt: bool = False) -> ForwardReport:
        """Forward the spool into the database once, in order (nothing without a spool).

        Args:
            wait_s: how long to wait for another forwarder that holds the spool.
            adopt: also mail meant for another database, or that records none.

        Raises:
            SpoolFailed: the spool cannot be read or written.
        """
        if self.forwarder is None:
            return ForwardReport()
        return await self.forwarder.forward(wait_s=wait_s, adopt=adopt)

    async def forward_waiting(self) -> ForwardReport:
        """Forward the spool if mail waits in it (a side task: cheap when it is empty).

        Raises:
            StoreUnavailable: mail waits and the database is away (the side task retries).
            SpoolFailed: the spool cannot be read or written.
        """
        if self.spool is None or not await self.spool.has_waiting():
            return ForwardReport()
        report = await self.forward()
        if report.kept:
            raise StoreUnavailable(f"the spool's mail waits: {report.error}")
        return report

    async def is_spooled(self, key: str) -> bool:
        """Whether mail under ``key`` waits in the spool (never, without one).

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        return self.spool is not None and await self.spool.is_waiting(key)

    async def spooled_mail(self, key: str) -> Mail | None:
        """The mail waiting in the spool under ``key`` (None: none, or no spool).

        Raises:
            SpoolFailed: the spool cannot be read.
        """
        return None if self.spool is None else await self.spool.mail(key)

    async def forward_for(self, key: str) -> None:
        """Forward the spool now because mail ``key`` waits in it (a wait's own forward).

        Raises:
            BirdDogError: the database refused that mail (the error its send would have
                raised): it was quarantined.
            SpoolFailed: the spool cannot be read or written.
        """
        report = await self.forward(wait_s=0.0)
        if key in report.refused:
            raise report.refused[key]
