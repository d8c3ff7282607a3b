"""Routes in PostgreSQL: agent id -> inbox URL and signing secret, or a mailbox; held or not.

A route whose ``enabled`` is false holds its agent: the outbox leaves that agent's rows
pending, untouched, until the route is released, and their age stands still meanwhile
(on release each row has the age it had when the hold began). Secrets are stored as given
(the recipient needs the same secret to verify) and never logged; ``Route.__repr__``
hides them.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time

import asyncpg
from pydantic import TypeAdapter, ValidationError

from birddog.clock import SystemClock
from birddog.core.egress import URL_MAX_LENGTH, EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput, InvalidSecret, RouteNotFound
from birddog.core.model import Id
from birddog.ports import Clock, Route, RouteKind
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries
from birddog.postgres.wake import schedule_wake_on

__all__ = ["BATCH_MAX", "SECRET_PREFIX", "URL_MAX_LENGTH", "PostgresRoutes", "new_secret"]

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
"""Standard Webhooks secrets start with this."""

BATCH_MAX = 1000
"""The most replies one batched POST may carry."""

_AGENT_ID: TypeAdapter[str] = TypeAdapter(Id)


def new_secret() -> str:
    """A new signing secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _check_agent_id(agent_id: str) -> str:
    try:
        return _AGENT_ID.validate_python(agent_id)
    except ValidationError as exc:
        messages = "; ".join(str(err["msg"]) for err in exc.errors())
        raise InvalidInput(f"invalid agentId: {messages}", field="agentId") from None


def _check_secret(secret: str) -> str:
    if not isinstance(secret, str):
        raise InvalidSecret(field="secret")
    if not secret.startswith(SECRET_PREFIX):
        # Verifiers accept a bare key, but an operator's secret without the prefix is
        # usually something else pasted by mistake (a password, a token).
        raise InvalidSecret("signing secret must start with whsec_", field="secret")
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret(
            "signing secret must be whsec_ followed by base64", field="secret"
        ) from None
    if not key:
        raise InvalidSecret("signing secret must not be empty", field="secret")
    return secret


def _check_batch_size(batch_size: int) -> int:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise InvalidInput("batch size must be a whole number", field="batchSize")
    if not 1 <= batch_size <= BATCH_MAX:
        raise InvalidInput(f"batch size must be 1 to {BATCH_MAX}", field="batchSize")
    return batch_size


def _route(record: asyncpg.Record) -> Route:
    return Route(
        agent_id=record["agent_id"],
        url=record["url"],
        secret=record["secret"],
        enabled=record["enabled"],
        kind=record["kind"],
        batch_size=record["batch_size"],
        held_at=record["held_at"],
        previous_secret=record["previous_secret"],
        previous_secret_until=record["previous_secret_until"],
    )


class PostgresRoutes:
    """The route book port over an asyncpg pool, with the operator's edits.

    Lookups of known agents are cached for ``cache_s`` seconds, so a page of 64 posts to a
    few recipients costs a few queries, not 64. An edit made through this object takes
    effect at once here; an edit from another process (the CLI) within ``cache_s``. Holds
    never wait on the cache: the claim query skips held recipients itself. An unknown
    agent is never cached, so a route added a moment ago is found.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
        cache_s: how long a looked-up route is reused (0 turns the cache off).
        clock: the current time, for holds and releases (default:
            :class:`birddog.clock.SystemClock`).
        egress: the policy a route's URL must pass when it is added or updated (default:
            the internal-mode policy).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        cache_s: float = 1.0,
        clock: Clock | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        self.pool = pool
        self.cache_s = cache_s
        self.clock: Clock = clock or SystemClock()
        self.egress = egress if egress is not None else EgressPolicy()
        self._cache: dict[str, tuple[float, Route]] = {}

    async def route(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        cached = self._cache.get(agent_id)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        with store_errors("route lookup"):
            record = await self.pool.fetchrow(queries["routes_get"], agent_id)
        if record is None:
            self._cache.pop(agent_id, None)
            return None
        found = _route(record)
        if self.cache_s > 0:
            self._cache[agent_id] = (now + self.cache_s, found)
        return found

    async def add(
        self,
        agent_id: str,
        url: str | None = None,
        secret: str | None = None,
        enabled: bool = True,
        *,
        kind: RouteKind = "http",
        batch_size: int = 1,
    ) -> Route:
        """Add the route of an agent.

        Args:
            agent_id: the recipient agent id (1 to 256 characters).
            url: its inbox URL, ``http`` or ``https`` with a host (None for a mailbox).
            secret: the signing secret, ``whsec_<base64>``; generated when not given
                (a mailbox route has none).
            enabled: False to add the agent held.
            kind: ``http`` (posted to ``url``) or ``mailbox`` (written to the mailbox table).
            batch_size: the most replies in one signed POST (1 to 1000; 1: no batches).

        Returns:
            The stored route (read its ``secret`` to configure the recipient's inbox).

        Raises:
            InvalidInput: a bad agent id, URL (credentials in it, or a host the egress
                policy refuses, included), kind or batch size (naming the field), or the
                agent already has a route (use :meth:`update`).
            InvalidSecret: the secret is not ``whsec_<base64>``.
            StoreUnavailable: the database is unreachable.
        """
        agent_id = _check_agent_id(agent_id)
        self._cache.pop(agent_id, None)
        batch_size = _check_batch_size(batch_size)
        if kind == "http":
            if url is None:
                raise InvalidInput("an http route needs a URL", field="url")
            url = check_route_url(url, self.egress)
            secret = _check_secret(secret) if secret is not None else new_secret()
        elif kind == "mailbox":
            if url is not None or secret is not None:
                raise InvalidInput("a mailbox route has no URL and no secret", field="url")
        else:
            raise InvalidInput("route kind must be http or mailbox", field="kind")
        with store_errors("route add"):
            record = await self.pool.fetchrow(
                queries["routes_add"],
                agent_id,
                url,
                secret,
                bool(enabled),
                kind,
                batch_size,
                self.clock.now(),
            )
        if record is None:
            raise InvalidInput(
                f"agent {agent_id!r} already has a route; update it instead", field="agentId"
            )
        return _route(record)

    async def update(
        self,
        agent_id: str,
        *,
        url: str | None = None,
        secret: str | None = None,
        batch_size: int | None = None,
    ) -> Route:
        """Change an agent's inbox URL, signing secret and/or batch size.

        Args:
            agent_id: the recipient agent id.
            url: the new inbox URL (None keeps it).
            secret: the new signing secret (None keeps it).
            batch_size: the new batch size, 1 to 1000 (None keeps it).

        Returns:
            The updated route.

        Raises:
            InvalidInput: a bad URL (see :meth:`add`) or batch size.
            InvalidSecret: the secret is not ``whsec_<base64>``.
            RouteNotFound: no route for ``agent_id``.
            StoreUnavailable: the database is unreachable.
        """
        if url is not None:
            url = check_route_url(url, self.egress)
        if secret is not None:
            secret = _check_secret(secret)
        if batch_size is not None:
            batch_size = _check_batch_size(batch_size)
        self._cache.pop(agent_id, None)
        with store_errors("route update"):
            record = await self.pool.fetchrow(
                queries["routes_update"], agent_id, url, secret, batch_size
            )
        if record is None:
            raise RouteNotFound(f"no route for agent {agent_id!r}")
        return _route(record)

    async def hold(self, agent_id: str) -> Route:
        """Hold an agent: its replies stay pending, untouched and unaged, until released.

        Holding a held agent keeps the time its hold began.

        Raises:
            RouteNotFound: no route for ``agent_id``.
            StoreUnavailable: the database is unreachable.
        """
        self._cache.pop(agent_id, None)
        with store_errors("route hold"):
            record = await self.pool.fetchrow(
                queries["routes_set_enabled"], agent_id, False, self.clock.now()
            )
        if record is None:
            raise RouteNotFound(f"no route for agent {agent_id!r}")
        return _route(record)

    async def release(self, agent_id: str) -> Route:
        """Release a held agent and wake a drain, so its waiting replies go out now.

        The hold paused the age clock: each pending row of the agent gets back the age it
        had when the hold began (a row written during the hold starts aging now), so a long
        hold never turns into ``max_age_exceeded`` at the first failure after it.

        Raises:
            RouteNotFound: no route for ``agent_id``.
            StoreUnavailable: the database is unreachable.
        """
        self._cache.pop(agent_id, None)
        now = self.clock.now()
        with store_errors("route release"):
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(queries["routes_lock"], agent_id)
                record = None
                if current is not None:
                    record = await conn.fetchrow(queries["routes_set_enabled"], agent_id, True, now)
                    if current["held_at"] is not None:
                        await conn.execute(
                            queries["outbox_resume_aging"], agent_id, current["held_at"], now
                        )
                    await schedule_wake_on(conn, now)
        if record is None:
            raise RouteNotFound(f"no route for agent {agent_id!r}")
        return _route(record)

    async def remove(self, agent_id: str) -> None:
        """Forget an agent's route; its later replies die as ``unknown_recipient``.

        Raises:
            RouteNotFound: no route for ``agent_id``.
            StoreUnavailable: the database is unreachable.
        """
        self._cache.pop(agent_id, None)
        with store_errors("route remove"):
            record = await self.pool.fetchrow(queries["routes_remove"], agent_id)
        if record is None:
            raise RouteNotFound(f"no route for agent {agent_id!r}")

    async def list(self) -> list[Route]:
        """Every route, by agent id (secrets included: print them with care).

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("route list"):
            records = await self.pool.fetch(queries["routes_list"])
        return [_route(record) for record in records]
