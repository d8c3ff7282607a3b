"""A2A push configs as reply addresses: their agent ids and what their route's secret holds.

A push config (URL, optional ``Authorization`` scheme and credentials, optional token)
is a reply address ``a2a-push:<digest>``; its route (kind ``a2a``) holds the URL, and its
secret (sealed at rest like any route secret) is the JSON :func:`push_secret` writes:
what each delivery of a push sends as headers (:func:`push_headers`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

from birddog.core.errors import InvalidInput

__all__ = [
    "PUSH_AGENT_PREFIX",
    "PUSH_CONTENT_TYPE",
    "SIGNING_TOKEN_PREFIX",
    "TOKEN_HEADER",
    "is_push_agent",
    "push_agent_id",
    "push_config_id",
    "push_headers",
    "push_secret",
    "push_signing_secret",
]

PUSH_AGENT_PREFIX: Final = "a2a-push:"
"""Every push config's agent id begins so."""

TOKEN_HEADER: Final = "X-A2A-Notification-Token"  # noqa: S105 - a header's name
"""The header the config's token travels in (the A2A spec's name)."""

PUSH_CONTENT_TYPE: Final = "application/a2a+json"
"""The media type of a push's body (the A2A SDKs' own)."""

SIGNING_TOKEN_PREFIX: Final = "whsec_"  # noqa: S105 - a prefix
"""A config token that begins so is a Standard Webhooks secret: pushes are signed with it."""

_MOST_CHARS: Final = 4096


def push_agent_id(*, task_id: str, config_id: str) -> str:
    """The agent id of one push config of one task (stable: setting it again is a replay).

    Args:
        task_id: the task.
        config_id: the config's id (the caller's, or BirdDog's default).

    Returns:
        ``a2a-push:<40 hex digits>``.
    """
    digest = hashlib.sha256(f"{task_id}\n{config_id}".encode()).hexdigest()[:40]
    return PUSH_AGENT_PREFIX + digest


def is_push_agent(agent_id: str) -> bool:
    """Whether an agent id is a push config's."""
    return agent_id.startswith(PUSH_AGENT_PREFIX)


def push_secret(*, config_id: str, scheme: str, credentials: str, token: str) -> str:
    """What a push route's secret holds: the config's id, ``Authorization`` and token.

    Args:
        config_id: the config's id (shown back by Get/List).
        scheme: the ``Authorization`` scheme (``Bearer``; empty: no header).
        credentials: its credentials.
        token: the config's token (empty: none).

    Returns:
        The JSON to store (sealed) as the route's secret.

    Raises:
        InvalidInput: a value holds a line break or control character, or is too long.
    """
    for name, value in (("scheme", scheme), ("credentials", credentials), ("token", token)):
        if len(value) > _MOST_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise InvalidInput(
                f"{name}: at most {_MOST_CHARS} characters, no control characters",
                field=f"authentication.{name}",
            )
    if " " in scheme:
        raise InvalidInput("scheme: one word, e.g. Bearer", field="authentication.scheme")
    authorization = f"{scheme} {credentials}".strip() if scheme else ""
    return json.dumps({"configId": config_id, "authorization": authorization, "token": token})


def push_headers(secret: str) -> dict[str, str]:
    """The headers a push delivery sends, from its route's secret.

    Args:
        secret: the route's opened secret (:func:`push_secret`).

    Returns:
        ``Authorization`` and the token header, each only when the config has one.

    Raises:
        InvalidInput: the secret is not what :func:`push_secret` writes.
    """
    try:
        facts = json.loads(secret)
        authorization, token = facts["authorization"], facts["token"]
    except (ValueError, TypeError, KeyError):
        raise InvalidInput("a push route's secret is not a push config", field="secret") from None
    if not isinstance(authorization, str) or not isinstance(token, str):
        raise InvalidInput("a push route's secret is not a push config", field="secret")
    headers: dict[str, str] = {}
    if authorization:
        headers["Authorization"] = authorization
    if token and not token.startswith(SIGNING_TOKEN_PREFIX):
        # A signing secret is a key: it signs the push (push_signing_secret), never travels.
        headers[TOKEN_HEADER] = token
    return headers


def push_signing_secret(secret: str) -> str | None:
    """The Standard Webhooks secret a push is signed with: the config's ``whsec_`` token.

    Args:
        secret: the route's opened secret (:func:`push_secret`).

    Returns:
        The token when it is a ``whsec_`` secret, else None (the push goes unsigned).
    """
    try:
        token = json.loads(secret).get("token", "")
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and token.startswith(SIGNING_TOKEN_PREFIX) else None


def push_config_id(secret: str) -> str:
    """The config id a push route's secret names (empty when it names none)."""
    try:
        value = json.loads(secret).get("configId", "")
    except (ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""
