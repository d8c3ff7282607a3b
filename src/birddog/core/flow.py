"""How many posts one recipient may have in flight: adaptive, per recipient, pure.

The rule is TCP's congestion control, per recipient:

- **slow start**: a recipient not heard from lately (never, or not within ``quiet_s``)
  starts at ``initial`` posts in flight and doubles with every acceptance, so a crowd of
  silent or hanging recipients holds ``initial`` slots each until its first timeout, not
  the whole window;
- **multiplicative decrease**: a failure, a timeout or a deferral drops the recipient to
  one post in flight until it answers again;
- **additive increase**: after that, each acceptance adds one, up to ``ceiling``
  (``per_recipient``).

Besides the posts in flight, the engine may hold claimed rows ready for a recipient: as
many as it can post within ``horizon_s`` at its measured pace (none while its pace is
unknown), so a fast recipient keeps its slots busy between claims while a slow one holds
no more than it can use. A post still out longer than the pace promised is evidence too:
the pace used is at least that post's age, so a recipient that suddenly slows down gives
its ready rows back at once instead of holding the window until its posts end.

Nothing here reads a clock: every call takes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class Signal(StrEnum):
    """What an answer says about a recipient's capacity."""

    OK = "ok"
    """Accepted: grow."""
    CONGESTED = "congested"
    """Failed, timed out or deferred: drop to one post in flight."""
    NEUTRAL = "neutral"
    """Answered but says nothing about capacity (a rejection): no change."""


@dataclass(slots=True)
class RecipientFlow:
    """What is known of one recipient.

    Attributes:
        limit: posts allowed in flight.
        slow_start: whether an acceptance doubles the limit (else adds one).
        heard_at: when it last answered.
        pace_s: the smoothed time one post takes, None until one finished.
    """

    limit: int
    slow_start: bool
    heard_at: datetime
    pace_s: float | None = None


class FlowControl:
    """Per-recipient limits on posts in flight, adapting to each recipient's answers.

    Args:
        ceiling: the most posts in flight to one recipient (``per_recipient``).
        initial: where slow start begins (at most ``ceiling``).
        quiet_s: a recipient not heard from for this long starts again with slow start.
        horizon_s: claimed rows held ready for a recipient: what it can take in this long.
        hold_max: the most rows (in flight and ready) held for one recipient.
        smoothing: the weight of the newest duration in the recipient's pace.
    """

    def __init__(
        self,
        *,
        ceiling: int,
        initial: int = 2,
        quiet_s: float = 60.0,
        horizon_s: float = 0.5,
        hold_max: int = 256,
        smoothing: float = 0.2,
    ) -> None:
        if ceiling < 1 or initial < 1:
            raise ValueError("ceiling and initial must be at least 1")
        self.ceiling = ceiling
        self.initial = min(initial, ceiling)
        self.quiet = timedelta(seconds=quiet_s)
        self.horizon_s = horizon_s
        self.hold_max = max(hold_max, ceiling)
        self.smoothing = smoothing
        self._known: dict[str, RecipientFlow] = {}

    def limit(self, agent_id: str, *, now: datetime) -> int:
        """The posts ``agent_id`` may have in flight at ``now``."""
        flow = self._current(agent_id, now)
        return self.initial if flow is None else flow.limit

    def hold(self, agent_id: str, *, now: datetime, waited_s: float = 0.0) -> int:
        """The rows (in flight and ready) the engine may hold for ``agent_id`` at ``now``.

        Args:
            agent_id: the recipient.
            now: the current time.
            waited_s: how long its oldest post in flight has been out (0: none is).
        """
        flow = self._current(agent_id, now)
        if flow is None:
            return self.initial
        if flow.pace_s is None:
            return flow.limit
        pace_s = max(flow.pace_s, waited_s, 1e-6)
        ready = int(flow.limit * self.horizon_s / pace_s)
        return min(self.hold_max, flow.limit + ready)

    def answered(self, agent_id: str, signal: Signal, *, seconds: float, now: datetime) -> None:
        """Learn from one finished post to ``agent_id``.

        Args:
            agent_id: the recipient.
            signal: what the answer says about its capacity.
            seconds: how long the post took.
            now: when it finished.
        """
        flow = self._current(agent_id, now)
        if flow is None:
            flow = RecipientFlow(limit=self.initial, slow_start=True, heard_at=now)
            self._known[agent_id] = flow
        flow.heard_at = now
        seconds = max(seconds, 0.0)
        flow.pace_s = (
            seconds
            if flow.pace_s is None
            else flow.pace_s + self.smoothing * (seconds - flow.pace_s)
        )
        if signal is Signal.OK:
            grown = flow.limit * 2 if flow.slow_start else flow.limit + 1
            flow.limit = min(self.ceiling, grown)
        elif signal is Signal.CONGESTED:
            flow.limit = 1
            flow.slow_start = False

    def forget_quiet(self, *, now: datetime) -> None:
        """Drop what is known of recipients not heard from within ``quiet_s`` (memory bound)."""
        self._known = {
            agent: flow for agent, flow in self._known.items() if now - flow.heard_at <= self.quiet
        }

    def known(self, agent_id: str) -> RecipientFlow | None:
        """What is known of ``agent_id`` (for tests and metrics), quiet or not."""
        return self._known.get(agent_id)

    def _current(self, agent_id: str, now: datetime) -> RecipientFlow | None:
        flow = self._known.get(agent_id)
        if flow is None or now - flow.heard_at > self.quiet:
            return None
        return flow
