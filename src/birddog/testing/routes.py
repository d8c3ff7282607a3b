"""The in-memory route book: routes by agent id, added, changed, held and released."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from birddog.core.egress import EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput, RouteNotFound
from birddog.core.policy import NO_POLICY, RoutePolicy
from birddog.core.push import is_push_agent
from birddog.core.routing import check_batch_size, check_secret, checked_route, secret_of
from birddog.core.text import shown_key
from birddog.ports import Clock, ResealReport, Route, RouteKind, RouteSummary
from birddog.testing.clock import FrozenClock
from birddog.testing.digests import InMemoryDigests
from birddog.testing.outbox import InMemoryOutbox

__all__ = ["InMemoryRoutes"]


class InMemoryRoutes:
    """Routes in a dict: the fake of the route book, its edits, holds, list and administration.

    Routes are checked as the Postgres route book checks them
    (:func:`birddog.core.routing.checked_route`). Given an outbox, a hold holds its rows
    (their age stands still) and a release lets them go, and a mailbox route makes the
    outbox deliver its agent's replies into the mailbox.

    Args:
        clock: when holds begin and end.
        egress: where route URLs may point (default: the internal-mode policy).
        push_egress: where A2A push URLs may point (default: ``egress`` in public mode).
        outbox: the outbox whose rows follow the routes (None: none).

    Attributes:
        routes: every route by agent id, secrets included.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        egress: EgressPolicy | None = None,
        outbox: InMemoryOutbox | None = None,
        push_egress: EgressPolicy | None = None,
    ) -> None:
        self.clock: Clock = clock or FrozenClock()
        self.egress = egress if egress is not None else EgressPolicy()
        self.push_egress = push_egress if push_egress is not None else self.egress.for_pushes()
        self.outbox = outbox
        self.routes: dict[str, Route] = {}

        self._digests = InMemoryDigests(clock=self.clock, routes=self.routes)

    @property
    def digests(self) -> InMemoryDigests:
        """The routes' digest schedules (its ``jobs``: the fake jobs whose mail may wait)."""
        return self._digests

    async def route(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown."""
        return self.routes.get(agent_id)

    async def missing(self, agent_ids: Sequence[str]) -> list[str]:
        """Which of ``agent_ids`` have no route, each once, in the order given."""
        return [agent for agent in dict.fromkeys(agent_ids) if agent not in self.routes]

    async def list(self) -> list[Route]:
        """Every route, by agent id, without its secrets."""
        return [
            replace(route, secret=None, previous_secret=None)
            for _, route in sorted(self.routes.items())
        ]

    async def summaries(self, agent_id: str | None = None) -> Sequence[RouteSummary]:
        """Every route's agent id, kind and hold, by agent id (only ``agent_id``'s if given)."""
        return [
            RouteSummary(agent_id=route.agent_id, kind=route.kind, enabled=route.enabled)
            for agent, route in sorted(self.routes.items())
            if agent_id is None or agent == agent_id
        ]

    async def add(
        self,
        agent_id: str,
        url: str | None = None,
        secret: str | None = None,
        enabled: bool = True,
        *,
        kind: RouteKind = "http",
        batch_size: int = 1,
        policy: RoutePolicy = NO_POLICY,
    ) -> Route:
        """Add an agent's route (see :meth:`birddog.postgres.routes.PostgresRoutes.add`).

        Raises:
            InvalidInput: a bad field, or the agent already has a route.
            InvalidSecret: the secret is not ``whsec_<base64>``.
        """
        agent_id, url, secret, kind, batch_size = checked_route(
            agent_id=agent_id,
            url=url,
            secret=secret,
            kind=kind,
            batch_size=batch_size,
            egress=self.push_egress if kind == "a2a" else self.egress,
            fresh_secret=secret_of(secrets.token_bytes(32)),
        )
        if agent_id in self.routes:
            raise InvalidInput(
                f"agent {shown_key(agent_id)} already has a route; update it instead",
                field="agentId",
            )
        now = self.clock.now()
        route = Route(
            agent_id=agent_id,
            url=url,
            secret=secret,
            enabled=bool(enabled),
            kind=kind,
            batch_size=batch_size,
            held_at=None if enabled else now,
            policy=policy,
        )
        self.routes[agent_id] = route
        if self.outbox is not None:
            if kind == "mailbox":
                self.outbox.mailboxes.add(agent_id)
            if not enabled:
                self.outbox.hold(agent_id, now=now)
        return route

    async def known(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has a route."""
        return agent_id in self.routes

    async def push_route(self, agent_id: str) -> Route | None:
        """The route of push config ``agent_id`` (kind ``a2a``); None for any other."""
        route = self.routes.get(agent_id)
        if route is None or route.kind != "a2a" or not is_push_agent(agent_id):
            return None
        return route

    async def add_push_route(self, agent_id: str, url: str, secret: str) -> Route:
        """Store push config ``agent_id`` as its route of kind ``a2a``, its URL checked.

        Raises:
            InvalidInput: not a push config's agent id, a URL the push egress policy
                refuses, or that agent id has a route already.
        """
        if not is_push_agent(agent_id):
            raise InvalidInput(
                "a push config's route has an agent id a2a-push:...", field="agentId"
            )
        return await self.add(agent_id, url, secret, kind="a2a")

    async def update(
        self,
        agent_id: str,
        *,
        url: str | None = None,
        secret: str | None = None,
        batch_size: int | None = None,
        policy: RoutePolicy = NO_POLICY,
        cleared: frozenset[str] = frozenset(),
    ) -> Route:
        """Change an agent's inbox URL, secret, batch size or policy (None keeps each).

        Raises:
            InvalidInput: a bad URL or batch size.
            InvalidSecret: the secret is not ``whsec_<base64>``.
            RouteNotFound: no route for ``agent_id``.
        """
        route = self._route(agent_id)
        changes: dict[str, object] = {"policy": route.policy.merged(policy, cleared=cleared)}
        if url is not None:
            changes["url"] = check_route_url(url, self.egress)
        if secret is not None:
            changes["secret"] = check_secret(secret)
        if batch_size is not None:
            changes["batch_size"] = check_batch_size(batch_size)
        self.routes[agent_id] = replace(route, **changes)  # type: ignore[arg-type]
        return self.routes[agent_id]

    async def hold(self, agent_id: str) -> Route:
        """Hold an agent (a second hold keeps the first time).

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        route = self._route(agent_id)
        now = self.clock.now()
        self.routes[agent_id] = replace(route, enabled=False, held_at=route.held_at or now)
        if self.outbox is not None:
            self.outbox.hold(agent_id, now=now)
        return self.routes[agent_id]

    async def release(self, agent_id: str) -> Route:
        """Release a held agent; its rows get back the age they had at the hold.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        route = self._route(agent_id)
        self.routes[agent_id] = replace(route, enabled=True, held_at=None)
        if self.outbox is not None:
            self.outbox.release(agent_id, now=self.clock.now())
        return self.routes[agent_id]

    async def remove(self, agent_id: str) -> None:
        """Forget an agent's route.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        self._route(agent_id)
        del self.routes[agent_id]
        if self.outbox is not None:
            self.outbox.mailboxes.discard(agent_id)

    async def rotate(self, agent_id: str, *, overlap_s: float) -> Route:
        """A new secret for an ``http`` route; the old one signs beside it for ``overlap_s``.

        Raises:
            InvalidInput: a negative overlap.
            RouteNotFound: no http route for ``agent_id``.
        """
        if not overlap_s >= 0:
            raise InvalidInput("the overlap must not be negative", field="overlap")
        route = self.routes.get(agent_id)
        if route is None or route.kind != "http":
            raise RouteNotFound(f"no http route for agent {shown_key(agent_id)}")
        self.routes[agent_id] = replace(
            route,
            secret=secret_of(secrets.token_bytes(32)),
            previous_secret=route.secret,
            previous_secret_until=self.clock.now() + timedelta(seconds=overlap_s),
        )
        return self.routes[agent_id]

    async def reseal(self) -> ResealReport:
        """Secrets are kept plain here, the form with no key: none is written again."""
        holding = [
            route
            for route in self.routes.values()
            if route.secret is not None or route.previous_secret is not None
        ]
        return ResealReport(routes=len(holding), resealed=0)

    def _route(self, agent_id: str) -> Route:
        route = self.routes.get(agent_id)
        if route is None:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        return route
