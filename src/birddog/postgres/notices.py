"""One LISTEN connection per process, shared by everyone in it who waits for a notification.

A process that waits for many things at once (a thousand asks gathered by an
orchestrator, an MCP server with many agents waiting) must not spend a connection per
waiter: :class:`PostgresNotices` keeps one dedicated connection (never a pooled one) that
LISTENs on the mailbox and job channels, and routes each notification to the
subscriptions that asked for its channel and payload (an agent id, a queue). A
notification is only a hint: a subscriber always looks again, and polls as a backstop,
so a lost one costs latency, never a reply. After the connection was lost and opened
again, every subscription is told, since a notification may have been missed meanwhile.

Without a DSN there is no connection at all, and subscriptions only ever time out: the
waiters' polls carry them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from typing import Final

import structlog

from birddog.postgres.jobs import JOBS_CHANNEL
from birddog.postgres.wake import WakeListener
from birddog.runtime import stop_task, wait_event

__all__ = ["MAILBOX_CHANNEL", "PostgresNotices", "Subscription"]

MAILBOX_CHANNEL: Final = "birddog_mailbox"
"""The channel a mailbox delivery is announced on (payload: the agent id)."""

CHECK_S: Final = 10.0
"""How often an idle listening connection is checked (and replaced when it died)."""

log = structlog.get_logger("birddog.notices")


class Subscription:
    """Notifications of one channel (and payload) heard for one subscriber.

    Args:
        channel: the channel.
        payload: only notifications with this payload (None: every one).
        wake: an event to set as well on each one (a waiter that waits on several).
    """

    def __init__(
        self, channel: str, payload: str | None = None, wake: asyncio.Event | None = None
    ) -> None:
        self.channel = channel
        self.payload = payload
        self._event = asyncio.Event()
        self._wake = wake
        self._heard: set[str] | None = set()

    def heard(self, payload: str | None) -> None:
        """Record a notification; None: anything may have happened (a reconnect)."""
        if payload is None:
            self._heard = None
        elif self._heard is not None:
            self._heard.add(payload)
        self._event.set()
        if self._wake is not None:
            self._wake.set()

    def take(self) -> set[str] | None:
        """The payloads heard since the last take; None when anything may have happened."""
        heard, self._heard = self._heard, set()
        self._event.clear()
        return heard

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a notification; True when one came since the last wait."""
        notified = await wait_event(self._event, timeout_s)
        self._event.clear()
        return notified


class PostgresNotices:
    """The process's one listening connection, and the subscriptions it serves.

    The connection is opened on the first subscription and kept until :meth:`close`;
    a lost one is replaced with backoff (:class:`~birddog.postgres.wake.WakeListener`).

    Args:
        dsn: the database for the LISTEN connection (``BIRDDOG_LISTEN_URL`` or the DSN);
            None: no connection, subscriptions only time out.
        channels: the channels to LISTEN on.
        check_s: how often an idle connection is checked.
    """

    def __init__(
        self,
        dsn: str | None,
        *,
        channels: Sequence[str] = (JOBS_CHANNEL, MAILBOX_CHANNEL),
        check_s: float = CHECK_S,
    ) -> None:
        self.dsn = dsn
        self.channels = list(channels)
        self.check_s = check_s
        self._subscriptions: set[Subscription] = set()
        self._reconnected: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None
        self._listener: WakeListener | None = None

    @property
    def connected(self) -> bool:
        """Whether the listening connection is open right now."""
        return self._listener is not None and self._listener.connected

    @contextlib.contextmanager
    def subscribe(
        self, channel: str, payload: str | None = None, *, wake: asyncio.Event | None = None
    ) -> Iterator[Subscription]:
        """Hear ``channel`` (only ``payload``, if given) for as long as the block lasts.

        Args:
            channel: one of the channels this process listens on.
            payload: only notifications with this payload.
            wake: an event to set as well on each notification.

        Yields:
            The subscription.
        """
        if channel not in self.channels:
            raise ValueError(f"{channel!r} is not one of the channels listened on")
        subscription = Subscription(channel, payload, wake)
        self._subscriptions.add(subscription)
        self._start()
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)

    @contextlib.contextmanager
    def reconnects(self, event: asyncio.Event) -> Iterator[asyncio.Event]:
        """Set ``event`` each time the connection is open again after it was lost.

        Opens the connection (if it is not open yet) for as long as the block lasts, so a
        process that waits on nothing else still hears that the database is back.

        Args:
            event: set on each reconnect (never on the first connection).

        Yields:
            ``event``.
        """
        self._reconnected.add(event)
        self._start()
        try:
            yield event
        finally:
            self._reconnected.discard(event)

    def _start(self) -> None:
        if self.dsn is None or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.create_task(self._run(self.dsn), name="birddog-notices")

    async def close(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self, dsn: str) -> None:
        listener = WakeListener(dsn, self.channels, on_notify=self._heard)
        self._listener = listener
        try:
            async with listener:
                self._everything()  # whatever was announced before now was not heard
                while True:
                    reconnects = listener.reconnects
                    await listener.wait(self.check_s)
                    if listener.reconnects != reconnects:
                        self._everything()
                        for event in list(self._reconnected):
                            event.set()
        finally:
            self._listener = None

    def _heard(self, channel: str, payload: str) -> None:
        for subscription in list(self._subscriptions):
            if subscription.channel == channel and subscription.payload in (None, payload):
                subscription.heard(payload)

    def _everything(self) -> None:
        for subscription in list(self._subscriptions):
            subscription.heard(None)
