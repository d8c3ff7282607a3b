"""The mail room: fan out replies, drain the outbox, tell when the next drain is owed.

Written against the ports (outbox, transport, wake, clock); the composition root builds the
daemon's over the Postgres outbox and the HTTP transport, the tests over the fakes.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime
from typing import Any

from birddog.core.delivery import new_row
from birddog.core.fanout import replies_for
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES, Job
from birddog.core.schedule import Random, RetrySchedule
from birddog.engine import PAGE_SIZE, DeliveryEngine, DrainReport, EngineConfig
from birddog.ports import Clock, Outbox, Transport, WakeScheduler

__all__ = ["PAGE_SIZE", "DrainReport", "MailRoom", "has_pending_delivery"]


class MailRoom:
    """Fans out replies into the outbox and delivers them through the transport.

    Delivery is the drain engine's (:mod:`birddog.engine`): :meth:`drain_outbox` runs it
    for one page, and :meth:`engine` gives the daemon its own continuous one over the same
    ports and configuration.

    Args:
        outbox: where owed replies, receipts and dead letters live.
        transport: posts one reply.
        wake: arms the timer that runs the next drain.
        clock: the current time.
        schedule: the retry schedule and age limit.
        page_size: rows per drain (default 64).
        lease_s: how long a claimed page is held before another drainer may take it.
        post_timeout_s: a post still running after this is cancelled and counts as a failure;
            None leaves the timeout to a transport that enforces its own (``HttpTransport``).
        max_content_bytes: the largest reply content fan-out accepts.
        rng: the jitter source (default: a private ``random.Random``).
        config: the engine's whole configuration (``schedule``, ``page_size``, ``lease_s``
            and ``post_timeout_s``, when given, override its fields).
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        transport: Transport,
        wake: WakeScheduler,
        clock: Clock,
        schedule: RetrySchedule | None = None,
        page_size: int | None = None,
        lease_s: float | None = None,
        post_timeout_s: float | None = 30.0,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        rng: Random | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        config = config or EngineConfig()
        changes: dict[str, Any] = {"post_timeout_s": post_timeout_s}
        if schedule is not None:
            changes["schedule"] = schedule
        if page_size is not None:
            changes["page_size"] = page_size
        if lease_s is not None:
            changes["lease_s"] = lease_s
        self.config = replace(config, **changes)
        self.outbox = outbox
        self.transport = transport
        self.wake = wake
        self.clock = clock
        self.max_content_bytes = max_content_bytes
        self.rng = rng or random.Random().random
        self._cursor: str | None = None

    @property
    def schedule(self) -> RetrySchedule:
        """The retry schedule and age limit."""
        return self.config.schedule

    @schedule.setter
    def schedule(self, value: RetrySchedule) -> None:
        self.config = replace(self.config, schedule=value)

    @property
    def page_size(self) -> int:
        """Rows per drain."""
        return self.config.page_size

    @page_size.setter
    def page_size(self, value: int) -> None:
        self.config = replace(self.config, page_size=value)

    @property
    def lease_s(self) -> float:
        """How long a claim holds its rows."""
        return self.config.lease_s

    @lease_s.setter
    def lease_s(self, value: float) -> None:
        self.config = replace(self.config, lease_s=value)

    @property
    def post_timeout_s(self) -> float | None:
        """The engine's own timeout per post (None: the transport's)."""
        return self.config.post_timeout_s

    @post_timeout_s.setter
    def post_timeout_s(self, value: float | None) -> None:
        self.config = replace(self.config, post_timeout_s=value)

    def engine(self, **changes: Any) -> DeliveryEngine:
        """A drain engine over this mail room's ports and configuration.

        Args:
            **changes: :class:`~birddog.engine.EngineConfig` fields to change for it.

        Returns:
            A fresh engine (it keeps its own posts in flight and per-recipient limits).
        """
        return DeliveryEngine(
            outbox=self.outbox,
            transport=self.transport,
            wake=self.wake,
            clock=self.clock,
            config=replace(self.config, **changes) if changes else self.config,
            rng=self.rng,
        )

    async def fan_out(
        self,
        *,
        job: Job,
        content: str,
        diagnostic: str | None = None,
        meta: Any = None,
    ) -> list[str]:
        """Write one reply per ``replyTo`` address of a settled job, then one wake.

        Replaying the same settlement writes nothing new: a key that already has a row or
        a receipt is left alone.

        Args:
            job: the settled job.
            content: the content owed to correspondents, delivered verbatim.
            diagnostic: the terminal diagnostic (failed, interrupted, outcome_unknown).
            meta: the settlement's meta; accepted for the caller's wrapper, never sent.

        Returns:
            The reply keys written by this call.
        """
        now = self.clock.now()
        replies = replies_for(
            job,
            content=content,
            diagnostic=diagnostic,
            now=now,
            max_content_bytes=self.max_content_bytes,
        )
        if not replies:
            return []
        added = await self.outbox.add([new_row(reply, now=now) for reply in replies])
        if added:
            await self.wake.schedule_wake(at=now)
        return added

    async def drain_outbox(self) -> DrainReport:
        """Post one page of due replies and store every outcome at once.

        A page is up to ``page_size`` rows in key order, continuing after the last page's
        last key (from the top once the end is reached).

        Returns:
            What the drain did; ``more`` means a wake for now was scheduled to continue.
        """
        report, self._cursor = await self.engine().drain_page(after_key=self._cursor)
        return report

    async def next_wake_at(self) -> datetime | None:
        """The earliest owed delivery, future retries included; None when nothing is owed."""
        return await self.outbox.next_due_at()


async def has_pending_delivery(outbox: Outbox) -> bool:
    """Whether any reply still awaits a delivery attempt; receipts and dead letters do not."""
    return await outbox.has_pending()
