"""The digest port: when each agent's informational mail goes, and what waits for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from birddog.core.digests import DigestSchedule, DigestWait

__all__ = ["Digests"]


class Digests(Protocol):
    """Each route's digest schedule, and the informational jobs waiting for their digest.

    An informational job (``report``, ``receipt``) gets its digest time when it is
    enqueued, from its agent's route (see :mod:`birddog.core.digests`); no worker takes it
    before then, a live session of its session takes it at once.
    """

    async def schedule(self, agent_id: str) -> DigestSchedule:
        """``agent_id``'s digest schedule: its route's own, or the default."""
        ...

    async def set_schedule(self, agent_id: str, schedule: DigestSchedule | None) -> DigestSchedule:
        """Set ``agent_id``'s route's digest schedule (None: the default); the schedule now.

        Mail already waiting keeps the digest time it was given.

        Raises:
            RouteNotFound: the agent has no route.
        """
        ...

    async def schedules(self) -> dict[str, DigestSchedule]:
        """Every route's digest schedule (its own, or the default), by agent id."""
        ...

    async def waiting(
        self, *, queues: Sequence[str] | None = None, agents: Sequence[str] | None = None
    ) -> DigestWait:
        """The jobs of ``queues`` and ``agents`` (both None: every queue) waiting for a digest."""
        ...
