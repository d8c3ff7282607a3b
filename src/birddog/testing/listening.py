"""The listening fakes: a listener the test rings, and the process's notices in memory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from birddog.runtime import wait_event

__all__ = ["ManualListener", "ManualNotices", "Subscribed"]


class ManualListener:
    """A listener the test rings: :meth:`notify` is a ``NOTIFY``, :meth:`wait` reports it.

    A notification given while nobody waits is kept for the next :meth:`wait`, as a
    ``LISTEN`` connection keeps it; one wait takes every notification given before it.

    Args:
        max_wait_s: the longest one :meth:`wait` lasts, whatever the caller asks (an idle
            ``LISTEN`` that times out soon); None waits as long as asked.

    Attributes:
        waits: how many times :meth:`wait` was called.
    """

    def __init__(self, *, max_wait_s: float | None = None) -> None:
        self.max_wait_s = max_wait_s
        self.waits = 0
        self._rung = asyncio.Event()

    def notify(self) -> None:
        """Announce new work, as a ``NOTIFY`` would."""
        self._rung.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (at most ``max_wait_s``) for a notification.

        Args:
            timeout_s: the longest wait the caller allows.

        Returns:
            True when notified (before or during the wait), False when the time passed.
        """
        self.waits += 1
        if self.max_wait_s is not None:
            timeout_s = min(timeout_s, self.max_wait_s)
        if not await wait_event(self._rung, timeout_s):
            return False
        self._rung.clear()
        return True


class Subscribed(ManualListener):
    """One subscription of :class:`ManualNotices`: a listener for one channel and payload.

    Args:
        channel: the channel heard.
        payload: only notifications with this payload (None: every one).
        wake: an event set as well on each one.
    """

    def __init__(self, channel: str, payload: str | None, wake: asyncio.Event | None) -> None:
        super().__init__()
        self.channel = channel
        self.payload = payload
        self.wake = wake

    def heard(self, channel: str, payload: str | None) -> None:
        """Take a notification if it is for this subscription (None payload: everything)."""
        if channel != self.channel or (
            payload is not None and self.payload is not None and payload != self.payload
        ):
            return
        self.notify()
        if self.wake is not None:
            self.wake.set()


class ManualNotices:
    """The process's notices, rung by the test (a :class:`~birddog.ports.Notices`).

    :meth:`notify` is a ``NOTIFY channel, payload``; :meth:`reconnect` the listening
    connection open again after it was lost (every subscriber hears that anything may
    have happened, and every ``reconnects`` event is set).

    Attributes:
        subscriptions: the subscriptions open now.
    """

    def __init__(self) -> None:
        self.subscriptions: list[Subscribed] = []
        self._reconnected: list[asyncio.Event] = []

    @contextlib.contextmanager
    def subscribe(
        self, channel: str, payload: str | None = None, *, wake: asyncio.Event | None = None
    ) -> Iterator[Subscribed]:
        """Hear ``channel`` (only ``payload``, if given) for as long as the block lasts."""
        subscription = Subscribed(channel, payload, wake)
        self.subscriptions.append(subscription)
        try:
            yield subscription
        finally:
            self.subscriptions.remove(subscription)

    @contextlib.contextmanager
    def reconnects(self, event: asyncio.Event) -> Iterator[asyncio.Event]:
        """Set ``event`` on each :meth:`reconnect` for as long as the block lasts."""
        self._reconnected.append(event)
        try:
            yield event
        finally:
            self._reconnected.remove(event)

    def notify(self, channel: str, payload: str) -> None:
        """Announce ``payload`` on ``channel``, as ``NOTIFY`` would."""
        for subscription in list(self.subscriptions):
            subscription.heard(channel, payload)

    def reconnect(self) -> None:
        """The connection is open again: every subscriber and ``reconnects`` event hears it."""
        for subscription in list(self.subscriptions):
            subscription.heard(subscription.channel, None)
        for event in self._reconnected:
            event.set()
