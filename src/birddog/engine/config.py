"""The engine's sizes, timeouts and schedule: :class:`EngineConfig`, the one settings object."""

from __future__ import annotations

from dataclasses import dataclass, field

from birddog.core.schedule import RetrySchedule

PAGE_SIZE = 64
"""A drain reads at most this many rows."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything the engine needs to know besides its ports.

    Attributes:
        schedule: the retry schedule and age limit.
        page_size: the most rows one claim takes (a page).
        lease_s: how long a claim holds its rows before another drainer may take them.
        post_timeout_s: a post still running after this is cancelled and counts as a
            failure; None leaves the timeout to a transport that enforces its own.
        window_size: the most rows held at once (posts in flight and rows ready).
        per_recipient: the most posts in flight to one recipient.
        slow_start: posts in flight to a recipient not heard from lately, to begin with.
        quiet_s: a recipient silent this long starts again with ``slow_start``.
        ready_horizon_s: rows held ready for a recipient: what it can take in this long.
        linger_s: after a post finishes, how long to wait for more before storing.
        fresh_rows: while a backlog fills the window, a notification claims up to this
            many of the latest-due rows at once, beside the window's own claims (held
            beyond ``window_size``, one such claim at a time); 0 turns it off.
    """

    schedule: RetrySchedule = field(default_factory=RetrySchedule)
    page_size: int = PAGE_SIZE
    lease_s: float = 60.0
    post_timeout_s: float | None = 30.0
    window_size: int = 256
    per_recipient: int = 16
    slow_start: int = 2
    quiet_s: float = 60.0
    ready_horizon_s: float = 0.5
    linger_s: float = 0.005
    fresh_rows: int = 16

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError("page_size must be at least 1")
        if self.window_size < 1 or self.per_recipient < 1:
            raise ValueError("window_size and per_recipient must be at least 1")
        if self.fresh_rows < 0:
            raise ValueError("fresh_rows must not be negative")

    @property
    def ready_max_s(self) -> float:
        """How long a claimed row may wait, ready, before it is given back unposted.

        A post started later could still be out when the claim's lease ends, and another
        drainer could post the same reply meanwhile.
        """
        post = self.post_timeout_s if self.post_timeout_s is not None else self.lease_s / 2
        return max(0.0, self.lease_s - post) / 2


__all__ = ["PAGE_SIZE", "EngineConfig"]
