"""The in-memory live sessions: beats, leaves and graces in dicts, on a clock of its own."""

from __future__ import annotations

from datetime import timedelta

from birddog.core.errors import RouteNotFound
from birddog.core.live import (
    DEFAULT_LIVE_GRACE_S,
    LiveSession,
    check_grace,
    check_live_ids,
    clamp_ttl,
)
from birddog.core.text import shown_key
from birddog.ports import Clock
from birddog.testing.clock import FrozenClock
from birddog.testing.routes import InMemoryRoutes

__all__ = ["InMemoryLiveSessions"]


class InMemoryLiveSessions:
    """Live sessions by (agent, session, holder): the fake of :class:`~birddog.ports.LiveSessions`.

    The TTL is bounded as the database bounds it; a session past its expiry is not live.
    The grace is kept per agent with a route in ``routes``.

    Args:
        clock: what "now" is (default: a frozen clock).
        routes: the route book whose agents may have a grace (default: an empty one).

    Attributes:
        sessions: every live session announced and not left, by (agent, session, holder),
            expired ones included.
        graces: each agent's own grace.
        beats: how many beats were made.
    """

    def __init__(self, *, clock: Clock | None = None, routes: InMemoryRoutes | None = None) -> None:
        self.clock: Clock = clock or FrozenClock()
        self.routes = routes if routes is not None else InMemoryRoutes(clock=self.clock)
        self.sessions: dict[tuple[str, str, str], LiveSession] = {}
        self.graces: dict[str, float] = {}
        self.beats = 0

    async def beat(self, *, agent_id: str, session: str, holder: str, ttl_s: float) -> float:
        """Keep ``holder``'s live session live for ``ttl_s`` more (bounded); the TTL granted."""
        check_live_ids(agent_id, session, holder)
        now = self.clock.now()
        granted = clamp_ttl(ttl_s)
        key = (agent_id, session, holder)
        known = self.sessions.get(key)
        started = known.started_at if known is not None and known.expires_at > now else now
        self.sessions[key] = LiveSession(
            agent_id=agent_id,
            session=session,
            holder=holder,
            started_at=started,
            expires_at=now + timedelta(seconds=granted),
        )
        self.beats += 1
        return granted

    async def leave(self, *, agent_id: str, session: str, holder: str) -> bool:
        """End ``holder``'s live session now; whether it had one."""
        check_live_ids(agent_id, session, holder)
        return self.sessions.pop((agent_id, session, holder), None) is not None

    async def live(self, *, agent_id: str | None = None) -> list[LiveSession]:
        """The live sessions (of ``agent_id``, or all), by agent, session and holder."""
        now = self.clock.now()
        return [
            found
            for key, found in sorted(self.sessions.items())
            if found.expires_at > now and agent_id in (None, key[0])
        ]

    async def grace(self, agent_id: str) -> float:
        """How long ``agent_id``'s jobs wait for its live sessions."""
        return self.graces.get(agent_id, DEFAULT_LIVE_GRACE_S)

    async def set_grace(self, agent_id: str, grace_s: float | None) -> float:
        """Set ``agent_id``'s grace (None: the default); the grace now.

        Raises:
            RouteNotFound: the agent has no route in ``routes``.
            InvalidInput: not a time from 0 to a day.
        """
        if grace_s is not None:
            check_grace(grace_s)
        if agent_id not in self.routes.routes:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        if grace_s is None:
            self.graces.pop(agent_id, None)
            return DEFAULT_LIVE_GRACE_S
        self.graces[agent_id] = grace_s
        return grace_s
