"""The rules of a route, the pure part: what an agent id, a secret, a batch size may be.

The Postgres route book and its in-memory fake check a route the same way before they
store it (:func:`checked_route`), so a route one refuses the other refuses too.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, Literal

from pydantic import TypeAdapter, ValidationError

from birddog.core.egress import EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput, InvalidSecret
from birddog.core.model import Id

__all__ = [
    "BATCH_MAX",
    "SECRET_PREFIX",
    "check_agent_id",
    "check_batch_size",
    "check_secret",
    "checked_route",
    "secret_of",
]

SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - a prefix, not a secret
"""Standard Webhooks secrets start with this."""

BATCH_MAX: Final = 1000
"""The most replies one batched POST may carry."""

_AGENT_ID: TypeAdapter[str] = TypeAdapter(Id)


def secret_of(key: bytes) -> str:
    """The signing secret of ``key``: ``whsec_`` and its base64 (make ``key`` random)."""
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


def check_agent_id(agent_id: str) -> str:
    """``agent_id`` if it is an id (1 to 256 characters, no control character).

    Raises:
        InvalidInput: it is not, naming ``agentId``.
    """
    try:
        return _AGENT_ID.validate_python(agent_id)
    except ValidationError as exc:
        messages = "; ".join(str(err["msg"]) for err in exc.errors())
        raise InvalidInput(f"invalid agentId: {messages}", field="agentId") from None


def check_secret(secret: str) -> str:
    """``secret`` if it is a Standard Webhooks secret, ``whsec_`` and non-empty base64.

    Raises:
        InvalidSecret: it is not.
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


def check_batch_size(batch_size: int) -> int:
    """``batch_size`` if it is a whole number from 1 to :data:`BATCH_MAX`.

    Raises:
        InvalidInput: it is not, naming ``batchSize``.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise InvalidInput("batch size must be a whole number", field="batchSize")
    if not 1 <= batch_size <= BATCH_MAX:
        raise InvalidInput(f"batch size must be 1 to {BATCH_MAX}", field="batchSize")
    return batch_size


def checked_route(
    *,
    agent_id: str,
    url: str | None,
    secret: str | None,
    kind: str,
    batch_size: int,
    egress: EgressPolicy,
    fresh_secret: str,
) -> tuple[str, str | None, str | None, Literal["http", "mailbox", "a2a"], int]:
    """A new route's fields, checked: the agent id, URL, secret, kind and batch size.

    Args:
        agent_id: the recipient agent id.
        url: its inbox URL (an ``http`` or ``a2a`` route), None for a mailbox.
        secret: the signing secret (an ``a2a`` route: its own JSON); None for an ``http``
            route takes ``fresh_secret``.
        kind: ``http``, ``mailbox`` or ``a2a``.
        batch_size: the most replies in one post.
        egress: where posts may connect.
        fresh_secret: the secret an ``http`` route gets when none is given.

    Returns:
        ``(agent_id, url, secret, kind, batch_size)`` to store.

    Raises:
        InvalidInput: a bad agent id, URL, kind or batch size, naming the field.
        InvalidSecret: an ``http`` route's secret is not ``whsec_<base64>``.
    """
    agent_id = check_agent_id(agent_id)
    batch_size = check_batch_size(batch_size)
    if kind == "http":
        if url is None:
            raise InvalidInput("an http route needs a URL", field="url")
        url = check_route_url(url, egress)
        return (
            agent_id,
            url,
            check_secret(secret) if secret is not None else fresh_secret,
            "http",
            batch_size,
        )
    if kind == "mailbox":
        if url is not None or secret is not None:
            raise InvalidInput("a mailbox route has no URL and no secret", field="url")
        return agent_id, None, None, "mailbox", batch_size
    if kind == "a2a":
        # An A2A push config: its secret is what the post carries (birddog.a2a.push).
        if url is None or secret is None or batch_size != 1:
            raise InvalidInput("an a2a push route needs a URL and its secret", field="url")
        return agent_id, check_route_url(url, egress), secret, "a2a", batch_size
    raise InvalidInput("route kind must be http, mailbox or a2a", field="kind")
