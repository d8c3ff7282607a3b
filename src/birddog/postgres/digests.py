"""Digests in PostgreSQL: the routes' ``digest_daily``/``digest_every_s``, ``jobs.digest_at``.

:class:`PostgresDigests` is the :class:`~birddog.ports.Digests` port. ``birddog.enqueue``
gives each informational job its digest time (``birddog._digest_at``), and the claim
holds it back from workers until then (``birddog._digest_hold``).

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when it is
away.
"""

from __future__ import annotations

from collections.abc import Sequence

from birddog.core.digests import DEFAULT_DIGEST, DigestSchedule, DigestWait
from birddog.core.errors import InvalidInput, RouteNotFound
from birddog.core.jobs import RESERVED_QUEUE_PREFIX
from birddog.core.text import shown_key
from birddog.postgres.job_rows import Row
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

__all__ = ["PostgresDigests"]


class PostgresDigests:
    """Digest schedules and waiting mail over an asyncpg pool (:class:`~birddog.ports.Digests`).

    Args:
        pool: the pool on the BirdDog database.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def schedule(self, agent_id: str) -> DigestSchedule:
        """``agent_id``'s digest schedule: its route's own, or the default."""
        with store_errors("digest schedule"):
            row = await self.pool.fetchrow(queries["digest_get"], agent_id)
        return DEFAULT_DIGEST if row is None else _schedule(row)

    async def set_schedule(self, agent_id: str, schedule: DigestSchedule | None) -> DigestSchedule:
        """Set ``agent_id``'s route's digest schedule (None: the default); the schedule now.

        Raises:
            RouteNotFound: the agent has no route.
        """
        daily = None if schedule is None else schedule.daily
        every_s = None if schedule is None else schedule.every_s
        with store_errors("digest schedule"):
            found = await self.pool.fetchval(queries["digest_set"], agent_id, daily, every_s)
        if found is None:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        return DEFAULT_DIGEST if schedule is None else schedule

    async def schedules(self) -> dict[str, DigestSchedule]:
        """Every route's digest schedule (its own, or the default), by agent id."""
        with store_errors("digest schedules"):
            rows = await self.pool.fetch(queries["digest_list"])
        return {row["agent_id"]: _schedule(row) for row in rows}

    async def waiting(
        self, *, queues: Sequence[str] | None = None, agents: Sequence[str] | None = None
    ) -> DigestWait:
        """The jobs of ``queues`` and ``agents`` (both None: every queue) waiting for a digest."""
        for names, field in ((queues, "queues"), (agents, "agents")):
            if isinstance(names, str):
                raise InvalidInput(f"{field} must be a list of names, not a string", field=field)
        with store_errors("digest waiting"):
            row = await self.pool.fetchrow(
                queries["jobs_digest_waiting"],
                None if queues is None else list(queues),
                RESERVED_QUEUE_PREFIX,
                None if agents is None else list(agents),
            )
        return DigestWait() if row is None else DigestWait(row["jobs"], row["next_at"])


def _schedule(row: Row) -> DigestSchedule:
    """A route row's schedule (neither column set: the default)."""
    if row["digest_every_s"] is not None:
        return DigestSchedule(every_s=float(row["digest_every_s"]))
    if row["digest_daily"] is not None:
        return DigestSchedule(daily=row["digest_daily"])
    return DEFAULT_DIGEST
