"""Routes' signing secrets: made, checked, sealed at rest, opened when a row is read.

Secrets are stored sealed when ``BIRDDOG_SECRET_KEY`` is set (:mod:`birddog.sealing`), as
given otherwise; every read opens them, so the rest of BirdDog only sees plain secrets.
"""

from __future__ import annotations

import base64
import binascii
import secrets

import asyncpg

from birddog.core.errors import InvalidSecret, SecretUnreadable
from birddog.core.policy import POLICY_FIELDS, RoutePolicy
from birddog.ports import ResealReport, Route
from birddog.sealing import SecretBox, route_context

__all__ = [
    "SECRET_PREFIX",
    "ResealReport",
    "RouteSecrets",
    "check_secret",
    "new_secret",
    "policy_of",
]

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
"""Standard Webhooks secrets start with this."""


def new_secret() -> str:
    """A new signing secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def check_secret(secret: str) -> str:
    """``secret`` if it is a Standard Webhooks signing secret.

    Raises:
        InvalidSecret: not ``whsec_`` followed by non-empty base64.
    """
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


class RouteSecrets:
    """Routes' secrets at rest: sealed before they are stored, opened when read, resealed.

    Args:
        box: seals and opens secrets (no key: stored as given).
    """

    def __init__(self, box: SecretBox) -> None:
        self.box = box

    def sealed(self, agent_id: str, secret: str) -> str:
        """``secret`` as stored for ``agent_id``'s route."""
        return self.box.seal(secret, context=route_context(agent_id))

    def route(self, record: asyncpg.Record, *, must_open: bool = True) -> Route:
        """A route from its row, its secrets opened.

        Args:
            record: the row.
            must_open: False where no secret is needed (a hold): secrets that do not
                open are left out (None) instead of failing.

        Raises:
            SecretUnreadable: a stored secret opens with none of the configured keys.
        """
        context = route_context(record["agent_id"])
        secret, previous = record["secret"], record["previous_secret"]
        if not must_open:
            try:
                self.route(record)
            except SecretUnreadable:
                secret = previous = None
        return Route(
            agent_id=record["agent_id"],
            url=record["url"],
            secret=None if secret is None else self.box.open(secret, context=context),
            enabled=record["enabled"],
            kind=record["kind"],
            batch_size=record["batch_size"],
            held_at=record["held_at"],
            previous_secret=None if previous is None else self.box.open(previous, context=context),
            previous_secret_until=record["previous_secret_until"],
            policy=policy_of(record),
        )

    def resealed(self, agent_id: str, stored: str | None) -> str | None:
        """``stored`` in the form the current key asks for (as it is when already so)."""
        if stored is None or self.box.is_current(stored):
            return stored
        context = route_context(agent_id)
        return self.box.seal(self.box.open(stored, context=context), context=context)


def policy_of(record: asyncpg.Record) -> RoutePolicy:
    """The policy columns of a route's row."""
    return RoutePolicy(**{name: record[name] for name in POLICY_FIELDS})
