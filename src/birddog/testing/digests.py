"""The in-memory digests: each route's schedule in a dict, waiting jobs read from the fake jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from birddog.core.digests import DEFAULT_DIGEST, DigestSchedule, DigestWait
from birddog.core.errors import RouteNotFound
from birddog.core.jobs import JobState
from birddog.core.text import shown_key
from birddog.ports import Clock
from birddog.testing.clock import FrozenClock
from birddog.testing.jobs import InMemoryJobs, served

__all__ = ["InMemoryDigests"]


class InMemoryDigests:
    """Digest schedules by agent: the fake of :class:`~birddog.ports.Digests`.

    ``jobs`` gives each informational job the first digest time of its agent's schedule
    (:attr:`own`) at or after its enqueue, as ``birddog.enqueue`` does, and claims none
    before it.

    Args:
        clock: what "now" is (default: a frozen clock).
        routes: the routes by agent (a route book's own, read as it changes): the agents
            that may have a schedule.
        jobs: the job store whose jobs may wait (default: an empty one).

    Attributes:
        own: each agent's own schedule (an agent without one has the default).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        routes: Mapping[str, object],
        jobs: InMemoryJobs | None = None,
    ) -> None:
        self.clock: Clock = clock or FrozenClock()
        self.routes = routes
        self.own: dict[str, DigestSchedule] = {}
        self.jobs = jobs if jobs is not None else InMemoryJobs(clock=self.clock)

    @property
    def jobs(self) -> InMemoryJobs:
        """The job store whose informational jobs wait (it reads :attr:`own` at enqueue)."""
        return self._jobs

    @jobs.setter
    def jobs(self, jobs: InMemoryJobs) -> None:
        self._jobs = jobs
        jobs.digest_schedules = self.own

    async def schedule(self, agent_id: str) -> DigestSchedule:
        """``agent_id``'s digest schedule: its own, or the default."""
        return self.own.get(agent_id, DEFAULT_DIGEST)

    async def set_schedule(self, agent_id: str, schedule: DigestSchedule | None) -> DigestSchedule:
        """Set ``agent_id``'s schedule (None: the default); the schedule now.

        Raises:
            RouteNotFound: the agent has no route in ``routes``.
        """
        if agent_id not in self.routes:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        if schedule is None:
            self.own.pop(agent_id, None)
            return DEFAULT_DIGEST
        self.own[agent_id] = schedule
        return schedule

    async def schedules(self) -> dict[str, DigestSchedule]:
        """Every route's digest schedule (its own, or the default), by agent id."""
        return {agent: await self.schedule(agent) for agent in sorted(self.routes)}

    async def waiting(
        self, *, queues: Sequence[str] | None = None, agents: Sequence[str] | None = None
    ) -> DigestWait:
        """The jobs of ``queues`` and ``agents`` (both None: every queue) waiting for a digest."""
        now = self.clock.now()
        times = [
            stored.digest_at
            for stored in self.jobs.jobs.values()
            if stored.job.state is JobState.QUEUED
            and served(stored.job, queues=queues, agents=agents)
            and stored.digest_at is not None
            and stored.digest_at > now
        ]
        return DigestWait(len(times), min(times, default=None))
