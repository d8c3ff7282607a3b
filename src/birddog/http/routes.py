"""``StaticRoutes``: a route book in a dict, for tests and small fixed setups.

Production routes live in Postgres (``birddog.postgres``); this one obeys the same
:class:`~birddog.ports.RouteBook` port and holds state you can inspect (``routes``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from birddog.core.egress import EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput, RouteNotFound
from birddog.core.text import shown_key
from birddog.http import signing
from birddog.ports import Route


class StaticRoutes:
    """A dict-backed route book: agent id -> inbox URL, signing secret, enabled.

    Args:
        routes: the initial routes; a later route for the same agent id wins.
        egress: the policy a route's URL must pass (default: the internal-mode policy).

    Attributes:
        routes: the routes by agent id.
    """

    def __init__(self, routes: Iterable[Route] = (), *, egress: EgressPolicy | None = None) -> None:
        self.egress = egress if egress is not None else EgressPolicy()
        self.routes: dict[str, Route] = {}
        for item in routes:
            self.put(item)

    async def route(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown."""
        return self.routes.get(agent_id)

    def add(
        self, agent_id: str, url: str, *, secret: str | None = None, enabled: bool = True
    ) -> Route:
        """Add or replace the route of an agent.

        Args:
            agent_id: the recipient agent id.
            url: its inbox URL, ``http`` or ``https``.
            secret: the signing secret; a new one is generated when not given.
            enabled: False to add it held.

        Returns:
            The stored route (read its ``secret`` to configure the recipient's inbox).

        Raises:
            InvalidInput: the URL is not http(s) with a host, carries credentials or is
                refused by the egress policy.
            InvalidSecret: the secret is not ``whsec_<base64>``.
        """
        return self.put(
            Route(
                agent_id=agent_id,
                url=url,
                secret=secret if secret is not None else signing.generate_secret(),
                enabled=enabled,
            )
        )

    def put(self, route: Route) -> Route:
        """Store a route as given, replacing any route for its agent.

        Args:
            route: the route to store.

        Returns:
            The route.

        Raises:
            InvalidInput: the agent id is empty, or the URL is not http(s) with a host,
                carries credentials or is refused by the egress policy.
            InvalidSecret: the secret is not ``whsec_<base64>``.
        """
        if not route.agent_id:
            raise InvalidInput("agent id must not be empty", field="agentId")
        if route.kind == "http":
            if route.url is None or route.secret is None:
                raise InvalidInput("an http route needs a URL and a secret", field="url")
            check_route_url(route.url, self.egress)
            signing.secret_key(route.secret)
        self.routes[route.agent_id] = route
        return route

    def hold(self, agent_id: str) -> Route:
        """Hold an agent: its replies stay pending, untouched, until released.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        return self._set_enabled(agent_id, enabled=False)

    def release(self, agent_id: str) -> Route:
        """Release a held agent so its replies are delivered again.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        return self._set_enabled(agent_id, enabled=True)

    def remove(self, agent_id: str) -> bool:
        """Forget an agent's route; its later replies die as ``unknown_recipient``.

        Returns:
            Whether there was a route to remove.
        """
        return self.routes.pop(agent_id, None) is not None

    def _set_enabled(self, agent_id: str, *, enabled: bool) -> Route:
        current = self.routes.get(agent_id)
        if current is None:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        updated = dataclasses.replace(current, enabled=enabled)
        self.routes[agent_id] = updated
        return updated
