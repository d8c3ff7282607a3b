"""Routes in PostgreSQL: agent id -> inbox URL and signing secret, or a mailbox; held or not.

A route whose ``enabled`` is false holds its agent: the outbox leaves that agent's rows
pending, untouched, until the route is released, and their age stands still meanwhile
(on release each row has the age it had when the hold began). Secrets are never logged
(``Route.__repr__`` hides them) and are stored sealed when ``BIRDDOG_SECRET_KEY`` is set
(:mod:`birddog.sealing`, through :mod:`birddog.postgres.route_secrets`), as given
otherwise; every read opens them, so the rest of
BirdDog only sees plain secrets. A rotation (:meth:`PostgresRoutes.rotate`) keeps the old
secret signing beside the new one for an overlap, then it is forgotten.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import asyncpg
from pydantic import TypeAdapter, ValidationError

from birddog.core.egress import URL_MAX_LENGTH, EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput, RouteNotFound
from birddog.core.model import Id
from birddog.core.policy import NO_POLICY, POLICY_FIELDS, RoutePolicy
from birddog.core.text import shown_key
from birddog.ports import Clock, Route, RouteKind, RouteSummary
from birddog.postgres.digests import PostgresDigests
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.route_cache import RouteCache
from birddog.postgres.route_secrets import (
    SECRET_PREFIX,
    ResealReport,
    RouteSecrets,
    check_secret,
    new_secret,
    policy_of,
)
from birddog.postgres.sql import queries
from birddog.postgres.wake import schedule_wake_on
from birddog.sealing import SecretBox

__all__ = [
    "BATCH_MAX",
    "SECRET_PREFIX",
    "URL_MAX_LENGTH",
    "PostgresRoutes",
    "ResealReport",
    "new_secret",
]

BATCH_MAX = 1000
"""The most replies one batched POST may carry."""

_AGENT_ID: TypeAdapter[str] = TypeAdapter(Id)


def _check_agent_id(agent_id: str) -> str:
    try:
        return _AGENT_ID.validate_python(agent_id)
    except ValidationError as exc:
        messages = "; ".join(str(err["msg"]) for err in exc.errors())
        raise InvalidInput(f"invalid agentId: {messages}", field="agentId") from None


def _check_batch_size(batch_size: int) -> int:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise InvalidInput("batch size must be a whole number", field="batchSize")
    if not 1 <= batch_size <= BATCH_MAX:
        raise InvalidInput(f"batch size must be 1 to {BATCH_MAX}", field="batchSize")
    return batch_size


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
        clock: the current time, for holds and releases.
        egress: the policy a route's URL must pass when it is added or updated (default:
            the internal-mode policy).
        push_egress: the policy an A2A push config's URL (a route of kind ``a2a``) must
            pass (default: ``egress`` in public mode).
        box: seals secrets before they are stored and opens them when read (default:
            no key: secrets stored as given).
        lease_s: the daemons' claim lease (``BIRDDOG_LEASE_S``): a route's post timeout
            must be shorter, or a post could outlast its claim (None: not checked).

    Attributes:
        digests: the routes' digest schedules, and the mail waiting for its digest.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        cache_s: float = 1.0,
        clock: Clock,
        egress: EgressPolicy | None = None,
        push_egress: EgressPolicy | None = None,
        box: SecretBox | None = None,
        lease_s: float | None = None,
    ) -> None:
        self.pool = pool
        self.cache_s = cache_s
        self.clock = clock
        self.egress = egress if egress is not None else EgressPolicy()
        self.push_egress = push_egress if push_egress is not None else self.egress.for_pushes()
        self.box = box if box is not None else SecretBox()
        self.lease_s = lease_s
        self._secrets = RouteSecrets(self.box)
        self._cache = RouteCache(pool, cache_s=cache_s, opened=self._secrets.route)
        self.digests = PostgresDigests(pool)

    async def route(self, agent_id: str) -> Route | None:
        """The route for ``agent_id``, or None when the agent is unknown.

        Raises:
            SecretUnreadable: its stored secret opens with none of the configured keys.
        """
        return await self._cache.get(agent_id)

    async def missing(self, agent_ids: Sequence[str]) -> list[str]:
        """Which of ``agent_ids`` have no route: a reply to one would die ``unknown_recipient``.

        Reads no URL and no secret (a sender's role may ask).

        Args:
            agent_ids: the agents, e.g. a mail's ``replyTo``.

        Returns:
            Those without a route, each once, in the order given.
        """
        unique = list(dict.fromkeys(agent_ids))
        if not unique:
            return []
        with store_errors("route missing"):
            records = await self.pool.fetch(queries["routes_missing"], unique)
        return [record["agent_id"] for record in records]

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
        """Add the route of an agent.

        Args:
            agent_id: the recipient agent id (1 to 256 characters).
            url: its inbox URL, ``http`` or ``https`` with a host (None for a mailbox).
            secret: the signing secret, ``whsec_<base64>``; generated when not given
                (a mailbox route has none).
            enabled: False to add the agent held.
            kind: ``http`` (posted to ``url``), ``mailbox`` (written to the mailbox table) or
                ``a2a`` (an A2A push config; ``secret`` is required, its own JSON).
            batch_size: the most replies in one signed POST (1 to 1000; 1: no batches).
            policy: the daemon's defaults this recipient overrides (post timeout, age
                limit, attempts).

        Returns:
            The stored route (read its ``secret`` to configure the recipient's inbox).

        Raises:
            InvalidInput: a bad agent id, URL (credentials in it, or a host the egress
                policy refuses, included), kind, batch size or post timeout (naming the
                field), or the agent already has a route (use :meth:`update`).
            InvalidSecret: the secret is not ``whsec_<base64>``.
        """
        agent_id = _check_agent_id(agent_id)
        self._cache.forget(agent_id)
        batch_size = _check_batch_size(batch_size)
        self._check_policy(policy)
        stored: str | None = None
        if kind == "http":
            if url is None:
                raise InvalidInput("an http route needs a URL", field="url")
            url = check_route_url(url, self.egress)
            secret = check_secret(secret) if secret is not None else new_secret()
            stored = self._secrets.sealed(agent_id, secret)
        elif kind == "mailbox":
            if url is not None or secret is not None:
                raise InvalidInput("a mailbox route has no URL and no secret", field="url")
        elif kind == "a2a":
            # An A2A push config: its secret is what the post carries (birddog.a2a.push).
            if url is None or secret is None or batch_size != 1:
                raise InvalidInput("an a2a push route needs a URL and its secret", field="url")
            url = check_route_url(url, self.push_egress)
            stored = self._secrets.sealed(agent_id, secret)
        else:
            raise InvalidInput("route kind must be http, mailbox or a2a", field="kind")
        with store_errors("route add"):
            record = await self.pool.fetchrow(
                queries["routes_add"],
                agent_id,
                url,
                stored,
                bool(enabled),
                kind,
                batch_size,
                self.clock.now(),
                *(getattr(policy, name) for name in POLICY_FIELDS),
            )
        if record is None:
            raise InvalidInput(
                f"agent {shown_key(agent_id)} already has a route; update it instead",
                field="agentId",
            )
        return self._secrets.route(record)

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
        """Change an agent's inbox URL, signing secret, batch size and/or policy.

        Args:
            agent_id: the recipient agent id.
            url: the new inbox URL (None keeps it).
            secret: the new signing secret (None keeps it).
            batch_size: the new batch size, 1 to 1000 (None keeps it).
            policy: the policy fields to set (those left None are kept).
            cleared: names of policy fields (``post_timeout_s``, ``max_age_s``,
                ``max_attempts``) to set back to the daemon's default.

        Returns:
            The updated route.

        Raises:
            InvalidInput: a bad URL (see :meth:`add`), batch size or post timeout.
            InvalidSecret: the secret is not ``whsec_<base64>``.
            RouteNotFound: no route for ``agent_id``.
            SecretUnreadable: a stored secret opens with none of the configured keys
                (nothing is changed).
        """
        if url is not None:
            url = check_route_url(url, self.egress)
        stored = None
        if secret is not None:
            stored = self._secrets.sealed(agent_id, check_secret(secret))
        if batch_size is not None:
            batch_size = _check_batch_size(batch_size)
        self._check_policy(policy)
        self._cache.forget(agent_id)
        async with self._readable_route(agent_id, "route update") as (conn, current):
            final = policy_of(current).merged(policy, cleared=cleared)
            record = await conn.fetchrow(
                queries["routes_update"],
                agent_id,
                url,
                stored,
                batch_size,
                *(getattr(final, name) for name in POLICY_FIELDS),
            )
        if record is None:  # the row is locked above, so it cannot vanish in between
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        return self._secrets.route(record)

    async def hold(self, agent_id: str) -> Route:
        """Hold an agent: its replies stay pending, untouched and unaged, until released.

        Holding a held agent keeps the time its hold began.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        self._cache.forget(agent_id)
        with store_errors("route hold"):
            record = await self.pool.fetchrow(
                queries["routes_set_enabled"], agent_id, False, self.clock.now()
            )
        if record is None:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        return self._secrets.route(record, must_open=False)

    async def release(self, agent_id: str) -> Route:
        """Release a held agent and wake a drain, so its waiting replies go out now.

        The hold paused the age clock: each pending row of the agent gets back the age it
        had when the hold began (a row written during the hold starts aging now), so a long
        hold never turns into ``max_age_exceeded`` at the first failure after it.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        self._cache.forget(agent_id)
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
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
        return self._secrets.route(record, must_open=False)

    async def remove(self, agent_id: str) -> None:
        """Forget an agent's route; its later replies die as ``unknown_recipient``.

        Raises:
            RouteNotFound: no route for ``agent_id``.
        """
        self._cache.forget(agent_id)
        with store_errors("route remove"):
            record = await self.pool.fetchrow(queries["routes_remove"], agent_id)
        if record is None:
            raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")

    async def list(self) -> list[Route]:
        """Every route, by agent id, without its secrets (``secret`` is None)."""
        with store_errors("route list"):
            records = await self.pool.fetch(queries["routes_list"])
        return [
            Route(
                agent_id=record["agent_id"],
                url=record["url"],
                secret=None,
                enabled=record["enabled"],
                kind=record["kind"],
                batch_size=record["batch_size"],
                held_at=record["held_at"],
                previous_secret_until=record["previous_secret_until"],
                policy=policy_of(record),
            )
            for record in records
        ]

    async def summaries(self, agent_id: str | None = None) -> Sequence[RouteSummary]:
        """Every route's agent id, kind and hold, by agent id; no URL, no secret read.

        A sender's or an agent's role may ask. Never cached: an MCP caller's route changed
        a moment ago is read as it is now.

        Args:
            agent_id: only this agent's (none, or one; one row by its key).
        """
        with store_errors("route summaries"):
            if agent_id is None:
                records = await self.pool.fetch(queries["routes_summaries"])
            else:
                records = await self.pool.fetch(queries["routes_summary"], agent_id)
        return [
            RouteSummary(agent_id=r["agent_id"], kind=r["kind"], enabled=r["enabled"])
            for r in records
        ]

    async def rotate(self, agent_id: str, *, overlap_s: float) -> Route:
        """Give an agent a new signing secret; the old one keeps signing for ``overlap_s``.

        During the overlap every post carries two ``v1`` signatures, one per secret, so
        the recipient can switch at any moment in it; afterwards only the new secret
        signs and the old one is forgotten (:meth:`forget_previous_secrets`). A rotation
        during another's overlap replaces the older previous secret.

        Args:
            agent_id: the recipient agent id (an ``http`` route).
            overlap_s: how long the old secret keeps signing (0: not at all).

        Returns:
            The route, with the new plain secret in ``secret`` (show it to the recipient
            once).

        Raises:
            InvalidInput: a negative overlap.
            RouteNotFound: no http route for ``agent_id``.
            SecretUnreadable: its stored secret opens with none of the configured keys
                (nothing is changed).
        """
        if not overlap_s >= 0:
            raise InvalidInput("the overlap must not be negative", field="overlap")
        secret = new_secret()
        until = self.clock.now() + timedelta(seconds=overlap_s)
        self._cache.forget(agent_id)
        sealed = self._secrets.sealed(agent_id, secret)
        async with self._readable_route(agent_id, "route rotate") as (conn, _current):
            record = await conn.fetchrow(queries["routes_rotate"], agent_id, sealed, until)
        if record is None:
            raise RouteNotFound(f"no http route for agent {shown_key(agent_id)}")
        return self._secrets.route(record)

    @contextlib.asynccontextmanager
    async def _readable_route(
        self, agent_id: str, what: str
    ) -> AsyncIterator[tuple[Any, asyncpg.Record]]:
        """A transaction holding the agent's route locked, once its secrets are known to open.

        An edit whose result could not be read back (a key missing) is refused before it
        writes anything, rather than half done.

        Yields:
            The connection, and the route's row as it was locked.

        Raises:
            RouteNotFound: no route for ``agent_id``.
            SecretUnreadable: a stored secret opens with none of the configured keys.
        """
        with store_errors(what):
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(queries["routes_lock"], agent_id)
                if current is None:
                    raise RouteNotFound(f"no route for agent {shown_key(agent_id)}")
                self._secrets.route(current)
                yield conn, current

    def _check_policy(self, policy: RoutePolicy) -> None:
        """Refuse a post timeout the daemons' lease would not outlast (see ``lease_s``)."""
        timeout_s = policy.post_timeout_s
        if timeout_s is not None and self.lease_s is not None and timeout_s >= self.lease_s:
            raise InvalidInput(
                f"--post-timeout ({timeout_s:g} s) must be shorter than the daemons' lease, "
                f"BIRDDOG_LEASE_S ({self.lease_s:g} s): a post must end before its claim "
                "does; raise BIRDDOG_LEASE_S for the daemons (and here) first",
                field="post_timeout_s",
            )

    async def forget_previous_secrets(self) -> int:
        """Drop every rotated-out secret whose overlap has ended; the daemon calls this.

        Returns:
            How many routes forgot a previous secret.
        """
        with store_errors("route secret cleanup"):
            status = await self.pool.execute(
                queries["routes_forget_previous_secrets"], self.clock.now()
            )
        self._cache.forget()
        return int(status.split()[-1])

    async def reseal(self) -> ResealReport:
        """Store every secret in the form the configured key asks for (``secrets rekey``).

        Each secret is opened with any configured key and sealed under the current one
        (or stored plain when no key is set), all in one transaction; a secret already in
        that form is left as it is.

        Returns:
            How many routes hold secrets and how many secrets were written again.

        Raises:
            SecretUnreadable: a stored secret opens with none of the configured keys
                (nothing is written).
        """
        resealed = 0
        with store_errors("secrets rekey"):
            async with self.pool.acquire() as conn, conn.transaction():
                records = await conn.fetch(queries["routes_secrets_lock"])
                changed: tuple[list[str], list[str | None], list[str | None]] = ([], [], [])
                for record in records:
                    agent_id = record["agent_id"]
                    values = [
                        self._secrets.resealed(agent_id, record[k])
                        for k in ("secret", "previous_secret")
                    ]
                    written = sum(
                        new != old
                        for new, old in zip(
                            values, (record["secret"], record["previous_secret"]), strict=True
                        )
                    )
                    if written:
                        resealed += written
                        changed[0].append(agent_id)
                        changed[1].append(values[0])
                        changed[2].append(values[1])
                if changed[0]:
                    await conn.execute(queries["routes_reseal"], *changed)
        self._cache.forget()
        return ResealReport(routes=len(records), resealed=resealed)
