"""The retry schedule: how long a failed reply waits before its next attempt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

Random = Callable[[], float]
"""A source of jitter: returns a float in ``[0, 1)``, like ``random.Random().random``."""


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """A bounded retry schedule: delays doubling from ``base_delay_s``, capped, with jitter.

    A reply may be attempted ``max_attempts`` times; it dies after the last failed attempt,
    or at the first failure or deferral once it is older than ``max_age_s``. A deferral
    (a transient refusal with a time to come back) moves the reply without using an
    attempt, but never past ``max_deferral_s`` from now nor past the reply's age limit.

    Attributes:
        max_attempts: attempts before a failing reply dies (default 20).
        base_delay_s: the delay after the first failure (default 1 s).
        max_delay_s: the longest delay between attempts (default 1 h).
        jitter: the spread around each delay, as a fraction (default 0.2: 80% to 120%).
        max_age_s: the age after which a reply that still fails dies (default 24 h).
        max_deferral_s: the longest a single deferral may move a reply (default 1 h).
    """

    max_attempts: int = 20
    base_delay_s: float = 1.0
    max_delay_s: float = 3600.0
    jitter: float = 0.2
    max_age_s: float = 86400.0
    max_deferral_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0 or self.max_deferral_s < 0:
            raise ValueError("delays must not be negative")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if self.max_age_s <= 0:
            raise ValueError("max_age_s must be positive")

    def delay_s(self, attempts: int, rng: Random) -> float:
        """The wait after the ``attempts``-th failed attempt.

        Args:
            attempts: how many attempts have failed so far (1 after the first failure).
            rng: the jitter source.

        Returns:
            ``base * 2**(attempts-1)``, capped at ``max_delay_s``, spread by the jitter and
            capped again.
        """
        exponent = min(max(attempts - 1, 0), 62)
        delay = min(self.max_delay_s, self.base_delay_s * 2.0**exponent)
        spread = 1.0 - self.jitter + 2.0 * self.jitter * rng()
        return min(self.max_delay_s, delay * spread)

    def retry_at(self, *, attempts: int, now: datetime, rng: Random) -> datetime | None:
        """When the next attempt is due, or None when the attempts are spent.

        Args:
            attempts: how many attempts have failed so far.
            now: the time of the last failure.
            rng: the jitter source.

        Returns:
            The next due time, or None after ``max_attempts`` failures.
        """
        if attempts >= self.max_attempts:
            return None
        return now + timedelta(seconds=self.delay_s(attempts, rng))

    def deadline(self, created_at: datetime) -> datetime:
        """The time after which a reply created at ``created_at`` dies at its next failure."""
        return created_at + timedelta(seconds=self.max_age_s)
