"""The A2A server's routes in PostgreSQL: who answers, and its push configs' routes.

``birddog a2a`` runs as ``birddog_a2a``, which reads no route's URL or secret: whether an
agent has a route is ``routes_missing`` (agent ids only), and a push config's route
(kind ``a2a``, agent id ``a2a-push:...``) is stored and read back through the ``SECURITY
DEFINER`` functions ``birddog.a2a_push_route_add`` and ``birddog.a2a_push_route``, which
touch such routes only. Secrets are sealed and opened as every route's
(:mod:`birddog.postgres.route_secrets`).

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

from birddog.core.egress import EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput
from birddog.core.push import is_push_agent
from birddog.core.text import shown_key
from birddog.ports import Route
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.route_secrets import RouteSecrets
from birddog.postgres.sql import queries
from birddog.sealing import SecretBox

__all__ = ["PostgresPushRoutes"]


class PostgresPushRoutes:
    """The A2A server's routes (a :class:`~birddog.ports.PushRoutes`).

    Args:
        pool: the connection pool.
        push_egress: the policy a push config's URL must pass (default: public only).
        box: seals secrets before they are stored and opens them when read (default:
            no key: secrets stored as given).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        push_egress: EgressPolicy | None = None,
        box: SecretBox | None = None,
    ) -> None:
        self.pool = pool
        self.push_egress = push_egress if push_egress is not None else EgressPolicy().for_pushes()
        self._secrets = RouteSecrets(box if box is not None else SecretBox())

    async def known(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has a route (reads no URL and no secret)."""
        with store_errors("route known"):
            missing = await self.pool.fetch(queries["routes_missing"], [agent_id])
        return not missing

    async def push_route(self, agent_id: str) -> Route | None:
        """The route of an A2A push config (kind ``a2a``), its secret opened; else None.

        Raises:
            SecretUnreadable: its stored secret opens with none of the configured keys.
        """
        with store_errors("push route"):
            record = await self.pool.fetchrow(queries["a2a_push_route"], agent_id)
        return None if record is None else self._secrets.route(record)

    async def add_push_route(self, agent_id: str, url: str, secret: str) -> Route:
        """Store an A2A push config as its route (kind ``a2a``), its URL checked, its secret sealed.

        Args:
            agent_id: the push config's agent id (``a2a-push:...``).
            url: where its notifications go; checked against the push egress policy.
            secret: what each notification carries (its token or header), sealed at rest.

        Raises:
            InvalidInput: not a push config's agent id, a URL the push egress policy
                refuses, or that agent id has a route already.
        """
        if not is_push_agent(agent_id):
            raise InvalidInput(
                "a push config's route has an agent id a2a-push:...", field="agentId"
            )
        url = check_route_url(url, self.push_egress)
        stored = self._secrets.sealed(agent_id, secret)
        with store_errors("push route add"):
            record = await self.pool.fetchrow(queries["a2a_push_route_add"], agent_id, url, stored)
        if record is None:
            raise InvalidInput(
                f"agent {shown_key(agent_id)} already has a route; update it instead",
                field="agentId",
            )
        return self._secrets.route(record)
