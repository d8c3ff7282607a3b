"""The live-session port: agent sessions a running process serves now, and their grace."""

from __future__ import annotations

from typing import Protocol

from birddog.core.live import LiveSession

__all__ = ["LiveSessions"]


class LiveSessions(Protocol):
    """Announces live sessions (a beat keeps one live for its TTL), ends and lists them.

    A live session's queue is offered to it first: a worker's claim leaves its jobs to it
    until each has waited the grace of its agent's route (see :mod:`birddog.core.live`).
    """

    async def beat(self, *, agent_id: str, session: str, holder: str, ttl_s: float) -> float:
        """Keep ``holder``'s live session of ``agent_id:session`` live for ``ttl_s`` more.

        Args:
            agent_id: the agent (an agent's login may name only its own).
            session: the agent's session id.
            holder: who serves it: the worker id its own claims carry.
            ttl_s: how long it stays live without another beat (the store bounds it).

        Returns:
            The TTL granted, in seconds.

        Raises:
            InvalidInput: an empty or over-long id or holder.
            StoreRefused: an agent's login naming another agent.
        """
        ...

    async def leave(self, *, agent_id: str, session: str, holder: str) -> bool:
        """End ``holder``'s live session of ``agent_id:session`` now; whether it had one."""
        ...

    async def live(self, *, agent_id: str | None = None) -> list[LiveSession]:
        """The live sessions (of ``agent_id``, or all), by agent, session and holder."""
        ...

    async def grace(self, agent_id: str) -> float:
        """How long ``agent_id``'s jobs wait for its live sessions (the route's, or the default)."""
        ...

    async def set_grace(self, agent_id: str, grace_s: float | None) -> float:
        """Set ``agent_id``'s route's ``live_grace_s`` (None: the default); the grace now.

        Raises:
            RouteNotFound: the agent has no route.
            InvalidInput: not a time from 0 to a day.
        """
        ...
