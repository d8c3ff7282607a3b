"""Live sessions in PostgreSQL: ``birddog.live_sessions``, announced through its functions.

:class:`PostgresLiveSessions` is the :class:`~birddog.ports.LiveSessions` port: a beat
calls ``birddog.live_heartbeat`` (the TTL bounded by the server, the agent bound to an
agent's login), a clean exit ``birddog.live_leave``; the claim reads the table through
``birddog._live_hold``. The grace is the route's ``live_grace_s``.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when it is
away, or its subclass :class:`~birddog.StoreRefused` when it refuses the statement (an
agent's login naming another agent).
"""

from __future__ import annotations

from birddog.core.errors import RouteNotFound
from birddog.core.live import DEFAULT_LIVE_GRACE_S, LiveSession, check_grace, check_live_ids
from birddog.core.text import shown_key
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

__all__ = ["PostgresLiveSessions"]


class PostgresLiveSessions:
    """Live sessions over an asyncpg pool (see :class:`~birddog.ports.LiveSessions`).

    Args:
        pool: the pool on the BirdDog database.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def beat(self, *, agent_id: str, session: str, holder: str, ttl_s: float) -> float:
        """Keep ``holder``'s live session live for ``ttl_s`` more; the TTL the server granted."""
        check_live_ids(agent_id, session, holder)
        with store_errors("live heartbeat"):
            row = await self.pool.fetchrow(
                queries["live_heartbeat"], agent_id, session, holder, float(ttl_s)
            )
        assert row is not None  # noqa: S101 - a SELECT of one function always has a row
        granted: float = (row["expires_at"] - row["at"]).total_seconds()
        return granted

    async def leave(self, *, agent_id: str, session: str, holder: str) -> bool:
        """End ``holder``'s live session now; whether it had one."""
        check_live_ids(agent_id, session, holder)
        with store_errors("live leave"):
            left: bool = await self.pool.fetchval(queries["live_leave"], agent_id, session, holder)
        return left

    async def live(self, *, agent_id: str | None = None) -> list[LiveSession]:
        """The live sessions (of ``agent_id``, or all), by agent, session and holder."""
        with store_errors("live list"):
            rows = await self.pool.fetch(queries["live_list"], agent_id)
        return [
            LiveSession(
                agent_id=row["agent_id"],
                session=row["session"],
                holder=row["holder"],
                started_at=row["started_at"],
                expires_at=row["expires_at"],
            )
            for row in rows
        ]

    async def grace(self, agent_id: str) -> float:
        """How long ``agent_id``'s jobs wait for its live sessions."""
        with store_errors("live grace"):
            grace_s = await self.pool.fetchval(queries["live_grace_get"], agent_id)
        return DEFAULT_LIVE_GRACE_S if grace_s is None else float(grace_s)

    async def set_grace(self, agent_id: str, grace_s: float | None) -> float:
        """Set ``agent_id``'s route's ``live_grace_s`` (None: the default); the grace now.

        Raises:
            RouteNotFound: the agent has no route.
            InvalidInput: not a time from 0 to a day.
        """
        if grace_s is not None:
            check_grace(grace_s)
        with store_errors("live grace"):
            found = await self.pool.fetchval(queries["live_grace_set"], agent_id, grace_s)
        if found is None:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        return DEFAULT_LIVE_GRACE_S if grace_s is None else grace_s
