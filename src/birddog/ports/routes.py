"""The route ports: where an agent's replies go, their edits and holds, and the token book.

And the operator's administration of routes (``birddog route ...``, ``secrets reseal``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from birddog.core.mail import AgentAddress
from birddog.core.policy import NO_POLICY, RoutePolicy
from birddog.ports.delivery import RouteKind
from birddog.ports.digests import Digests

__all__ = [
    "PushRoutes",
    "ResealReport",
    "Route",
    "RouteAdmin",
    "RouteBook",
    "RouteEdits",
    "RouteHolds",
    "RouteList",
    "RouteSummary",
    "TokenBook",
]


@dataclass(frozen=True, slots=True)
class Route:
    """Where an agent's replies go, how they are signed, and whether the agent is held.

    Attributes:
        agent_id: the recipient agent id.
        url: the inbox URL (``http`` or ``https`` only), set by the operator, never by mail;
            None for a mailbox route.
        secret: the Standard Webhooks signing secret, ``whsec_<base64>``; None for a
            mailbox route (nothing is posted, so nothing is signed).
        enabled: False while the recipient is held: its rows stay, untouched and unaged.
        kind: ``http`` (posted to ``url``), ``mailbox`` (written to ``birddog.mailbox``) or
            ``a2a`` (an A2A push config: posted to ``url`` as a StreamResponse, with the
            ``Authorization`` and token ``secret`` holds as JSON).
        batch_size: the most replies put in one signed POST (1: one reply per post).
        held_at: when the current hold began (None while enabled).
        previous_secret: a rotated-out secret that still signs, beside ``secret``, until
            ``previous_secret_until``.
        previous_secret_until: when ``previous_secret`` stops signing.
        policy: what the route overrides of the daemon's defaults (post timeout, age
            limit, attempts) for this recipient.
    """

    agent_id: str
    url: str | None
    secret: str | None
    enabled: bool = True
    kind: RouteKind = "http"
    batch_size: int = 1
    held_at: datetime | None = None
    previous_secret: str | None = None
    previous_secret_until: datetime | None = None
    policy: RoutePolicy = NO_POLICY

    def __repr__(self) -> str:
        return (
            f"Route(agent_id={self.agent_id!r}, kind={self.kind!r}, url={self.url!r}, "
            f"enabled={self.enabled}, batch_size={self.batch_size})"
        )

    def signing_secrets(self, now: datetime) -> list[str]:
        """The secrets a post is signed with at ``now``.

        The current secret first, then the previous one while its overlap lasts.

        Args:
            now: the time of the post.

        Returns:
            One or two secrets; empty for a mailbox route.
        """
        secrets = [self.secret] if self.secret is not None else []
        if (
            self.previous_secret is not None
            and self.previous_secret_until is not None
            and now < self.previous_secret_until
        ):
            secrets.append(self.previous_secret)
        return secrets


@dataclass(frozen=True, slots=True)
class RouteSummary:
    """What anyone may know of a route: whose it is, its kind, and whether it is held.

    Attributes:
        agent_id: the recipient agent id.
        kind: ``http``, ``mailbox`` or ``a2a`` (see :class:`Route`).
        enabled: False while the recipient is held.
    """

    agent_id: str
    kind: RouteKind
    enabled: bool = True


class RouteBook(Protocol):
    """Looks up where an agent's replies go."""

    async def route(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown."""
        ...


class TokenBook(Protocol):
    """Tells which agent session a bearer token names (the caller of an HTTP endpoint)."""

    async def authenticate(self, token: str) -> AgentAddress | None:
        """The agent session ``token`` names; None for an unknown, revoked or malformed one.

        Never raises for what the caller presented; only a database that is away raises
        (:class:`~birddog.StoreUnavailable`).
        """
        ...


class RouteHolds(Protocol):
    """Holds and releases recipients (``PostgresRoutes``)."""

    async def hold(self, agent_id: str) -> Route:
        """Hold an agent: its replies wait, untouched and unaged."""
        ...

    async def release(self, agent_id: str) -> Route:
        """Release a held agent; its waiting replies go out now."""
        ...


class RouteEdits(RouteHolds, RouteBook, Protocol):
    """Adds, changes, holds and releases routes (``PostgresRoutes``; the console)."""

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
        """Add an agent's route: an inbox URL (its secret made when not given) or a mailbox."""
        ...

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
        """Change an agent's inbox URL, secret, batch size or policy (None keeps each)."""
        ...


class PushRoutes(Protocol):
    """The A2A server's routes (``birddog a2a``): who answers, and its push configs' routes.

    Reads no URL or secret but a push config's own, and writes push configs' routes
    only (kind ``a2a``), so the server runs on a role of its own (``birddog_a2a``).
    """

    async def known(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has a route (an agent with one answers over A2A)."""
        ...

    async def push_route(self, agent_id: str) -> Route | None:
        """The route of push config ``agent_id`` (kind ``a2a``); None for any other."""
        ...

    async def add_push_route(self, agent_id: str, url: str, secret: str) -> Route:
        """Store push config ``agent_id`` as its route of kind ``a2a`` (the URL checked)."""
        ...


class RouteList(Protocol):
    """Reads routes without their secrets: every one, or one agent's kind (``PostgresRoutes``).

    The MCP tool ``agents`` lists every summary; the MCP server reads its caller's only.
    Summaries read no URL, so a sender's or an agent's login may read them.
    """

    async def list(self) -> list[Route]:
        """Every route, by agent id."""
        ...

    async def summaries(self, agent_id: str | None = None) -> Sequence[RouteSummary]:
        """Every route's agent id, kind and hold, by agent id; no URL, no secret read.

        Args:
            agent_id: only this agent's (none, or one; read by its key alone).
        """
        ...


@dataclass(frozen=True, slots=True)
class ResealReport:
    """What a reseal of the routes' secrets did (``birddog secrets reseal``).

    Attributes:
        routes: routes holding at least one stored secret.
        resealed: secrets written again in the configured form.
    """

    routes: int
    resealed: int


class RouteAdmin(RouteEdits, RouteList, Protocol):
    """The operator's route commands: edits, holds, rotation, removal (``PostgresRoutes``).

    And each route's digest schedule, in :attr:`digests`.
    """

    @property
    def digests(self) -> Digests:
        """The routes' digest schedules (``route add/update --digest``) and the mail waiting."""
        ...

    async def missing(self, agent_ids: Sequence[str]) -> list[str]:
        """Which of ``agent_ids`` have no route, each once, in the order given."""
        ...

    async def rotate(self, agent_id: str, *, overlap_s: float) -> Route:
        """Give an ``http`` route a new secret; the old one keeps signing for ``overlap_s``.

        Raises ``RouteNotFound`` for an agent with no route.
        """
        ...

    async def remove(self, agent_id: str) -> None:
        """Remove an agent's route (raises ``RouteNotFound`` when it has none)."""
        ...

    async def reseal(self) -> ResealReport:
        """Write every stored secret again in the configured form (sealed or plain)."""
        ...
