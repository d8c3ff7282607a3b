"""Delivery policies per route: one recipient's own post timeout, age limit and attempts.

The daemon's settings (``BIRDDOG_POST_TIMEOUT_S``, ``BIRDDOG_MAX_AGE_S``,
``BIRDDOG_MAX_ATTEMPTS``) are the defaults; a route may override any of them for its
recipient (``birddog route add|update AGENT --post-timeout 120s --max-age 6h
--max-attempts 50``), so an agent whose turns take minutes and an inbox that must answer
in a second no longer share one timeout. The post timeout is applied by the transport,
per request; the age limit and the attempts by the delivery decision, per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from birddog.core.errors import InvalidInput
from birddog.core.schedule import RetrySchedule

__all__ = ["MAX_ATTEMPTS_LIMIT", "NO_POLICY", "POLICY_FIELDS", "RoutePolicy"]

MAX_ATTEMPTS_LIMIT = 100_000
"""The most attempts a route may allow a reply (its age limit usually ends it first)."""


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    """What a route overrides of the daemon's delivery defaults; None keeps the default.

    Attributes:
        post_timeout_s: a post to this recipient without an answer after this fails.
        max_age_s: a reply to it older than this dies at its next failure or deferral.
        max_attempts: attempts before a reply to it dies.
    """

    post_timeout_s: float | None = None
    max_age_s: float | None = None
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("post_timeout_s", "max_age_s"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int | float) and math.isfinite(value) and value > 0
            ):
                raise InvalidInput(f"{_flag(name)} must be a finite time above 0", field=name)
        attempts = self.max_attempts
        if attempts is not None and (
            not isinstance(attempts, int)
            or isinstance(attempts, bool)
            or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidInput(
                f"--max-attempts must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT:,}",
                field="max_attempts",
            )

    @property
    def empty(self) -> bool:
        """Nothing is overridden: the daemon's defaults apply."""
        return all(getattr(self, f.name) is None for f in fields(self))

    def schedule(self, default: RetrySchedule) -> RetrySchedule:
        """The retry schedule for this recipient's rows: ``default`` with the overrides.

        Args:
            default: the daemon's schedule.

        Returns:
            ``default`` itself when nothing is overridden (no copy per row).
        """
        if self.max_age_s is None and self.max_attempts is None:
            return default
        return replace(
            default,
            max_age_s=default.max_age_s if self.max_age_s is None else self.max_age_s,
            max_attempts=default.max_attempts if self.max_attempts is None else self.max_attempts,
        )

    def post_timeout(self, default_s: float) -> float:
        """The post timeout for this recipient: the route's, else ``default_s``."""
        return default_s if self.post_timeout_s is None else self.post_timeout_s

    def merged(self, changes: RoutePolicy, *, cleared: frozenset[str] = frozenset()) -> RoutePolicy:
        """This policy with ``changes`` set and the ``cleared`` fields back to the default.

        Args:
            changes: the fields to set (None: keep this policy's).
            cleared: names of fields to reset to the daemon's default.

        Returns:
            The new policy.
        """
        values: dict[str, object] = {}
        for name in POLICY_FIELDS:
            change = getattr(changes, name)
            values[name] = (
                None if name in cleared else getattr(self, name) if change is None else change
            )
        return RoutePolicy(**values)  # type: ignore[arg-type]


POLICY_FIELDS = tuple(f.name for f in fields(RoutePolicy))
"""The names of the policy's fields, in order (also its columns in ``birddog.routes``)."""

NO_POLICY = RoutePolicy()
"""No override: the daemon's defaults."""


def _flag(name: str) -> str:
    return "--" + name.removesuffix("_s").replace("_", "-")
