"""Routes looked up by agent over a short cache: one lookup per agent at a time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import asyncpg

from birddog.ports import Route
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

__all__ = ["RouteCache"]


class RouteCache:
    """Routes looked up by agent, each kept ``cache_s`` seconds; one lookup per agent at a time.

    An unknown agent is never cached, so a route added a moment ago is found.

    Args:
        pool: the pool.
        cache_s: how long a looked-up route is reused (0 turns the cache off).
        opened: a route from its row, its secrets opened.
    """

    def __init__(
        self, pool: Pool, *, cache_s: float, opened: Callable[[asyncpg.Record], Route]
    ) -> None:
        self.pool = pool
        self.cache_s = cache_s
        self._opened = opened
        self._cache: dict[str, tuple[float, Route]] = {}
        self._looking: dict[str, asyncio.Future[Route | None]] = {}

    def forget(self, agent_id: str | None = None) -> None:
        """Drop the cached route of ``agent_id`` (of every agent when None)."""
        if agent_id is None:
            self._cache.clear()
        else:
            self._cache.pop(agent_id, None)

    async def get(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown.

        Raises:
            SecretUnreadable: its stored secret opens with none of the configured keys.
        """
        cached = self._cache.get(agent_id)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        # One lookup per agent at a time: when the cached route ends, the posts in flight
        # to that agent all ask at once, and they share the first one's answer.
        pending = self._looking.get(agent_id)
        if pending is None:
            pending = asyncio.ensure_future(self._look_up(agent_id, now))
            self._looking[agent_id] = pending
            # Its error reaches every caller; one that was cancelled meanwhile reads none.
            pending.add_done_callback(_retrieved)
        return await asyncio.shield(pending)

    async def _look_up(self, agent_id: str, now: float) -> Route | None:
        try:
            with store_errors("route lookup"):
                record = await self.pool.fetchrow(queries["routes_get"], agent_id)
        finally:
            del self._looking[agent_id]
        if record is None:
            self._cache.pop(agent_id, None)
            return None
        found = self._opened(record)
        if self.cache_s > 0:
            self._cache[agent_id] = (now + self.cache_s, found)
        return found


def _retrieved(future: asyncio.Future[Route | None]) -> None:
    # Read the error of a shared lookup, so asyncio never reports it as never retrieved.
    if not future.cancelled():
        future.exception()
