"""Agent identity, the pure part: tokens, the addresses they name, what agents are given.

A token is a bearer credential for one agent session (``AGENT:SESSION``): the MCP and A2A
HTTP endpoints take it as the caller's identity. It is ``bd_`` followed by 43 URL-safe
base64 characters (32 random bytes), shown once when it is issued; BirdDog stores only its
SHA-256 digest and looks tokens up by that digest, so the database never holds one.

The random bytes come from the caller (the adapter reads ``secrets``): the core reads no
random source of its own.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from birddog.core.errors import InvalidInput
from birddog.core.mail import AgentAddress

TOKEN_PREFIX: Final = "bd_"  # noqa: S105 - a prefix, not a secret
"""Every agent token starts with this, so a leaked one is recognisable (and scannable)."""

TOKEN_BYTES: Final = 32
"""The random bytes in a token."""

DEFAULT_SESSION: Final = "default"
"""The session an agent token names when ``AGENT`` is given without ``:SESSION``."""

_TOKEN = re.compile(r"bd_[A-Za-z0-9_-]{43}")
"""The exact shape of a token: the prefix and 32 bytes of unpadded URL-safe base64."""


def make_token(raw: bytes) -> str:
    """The token for 32 random bytes.

    Args:
        raw: exactly :data:`TOKEN_BYTES` bytes from a cryptographic random source.

    Returns:
        ``bd_`` and the bytes as unpadded URL-safe base64 (46 characters in all).

    Raises:
        ValueError: ``raw`` is not 32 bytes long.
    """
    if len(raw) != TOKEN_BYTES:
        raise ValueError(f"a token is made of {TOKEN_BYTES} random bytes, not {len(raw)}")
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def token_digest(token: object) -> bytes | None:
    """The SHA-256 digest a token is stored and looked up by; None when it is no token.

    Anything that does not have a token's exact shape (not a string, another prefix, a
    wrong length or alphabet) is None, so a malformed credential never reaches the
    database and never raises.

    Args:
        token: what a caller presented.

    Returns:
        The 32-byte digest, or None.
    """
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        return None
    return hashlib.sha256(token.encode("ascii")).digest()


def agent_address(value: str, *, field: str = "agent") -> AgentAddress:
    """``AGENT[:SESSION]`` as an address; without a session, :data:`DEFAULT_SESSION`.

    Args:
        value: the agent id, optionally followed by a colon and the session id.
        field: the field to name in errors.

    Returns:
        The address.

    Raises:
        InvalidInput: an empty session after the colon, or an id that is not 1 to 256
            printable characters.
    """
    agent_id, sep, session_id = value.partition(":")
    if sep and not session_id:
        raise InvalidInput(
            f"{field} must be AGENT or AGENT:SESSION, with a session after the colon",
            field=field,
        )
    try:
        return AgentAddress(agent_id=agent_id, session_id=session_id or DEFAULT_SESSION)
    except InvalidInput as exc:
        raise InvalidInput(f"invalid {field}: {exc}", field=f"{field}.{exc.field}") from None


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just issued: the only moment its text exists outside the caller.

    Attributes:
        token_id: the token's public id (for ``birddog agent revoke --token-id``).
        address: the agent session it names.
        token: the bearer token itself; show it once, store it nowhere.
        created_at: when it was issued.
    """

    token_id: str
    address: AgentAddress
    token: str
    created_at: datetime

    def __repr__(self) -> str:
        # Never the token: a repr ends up in logs and tracebacks.
        return f"IssuedToken(token_id={self.token_id!r}, address={self.address!r})"


@dataclass(frozen=True, slots=True)
class AgentLogin:
    """A database login made for one agent: the only moment its password exists.

    Attributes:
        login: the role's name (a member of ``birddog_agent``).
        password: its password; show it once, store it nowhere.
    """

    login: str
    password: str

    def __repr__(self) -> str:
        # Never the password: a repr ends up in logs and tracebacks.
        return f"AgentLogin(login={self.login!r})"

    def dsn(self, dsn: str) -> str:
        """``dsn`` (the operator's database URL) logged in as this login instead.

        Args:
            dsn: a ``postgresql://`` URL of the same database.

        Returns:
            The same host, port and database with this login and password (and no
            ``passfile``: the password is in the URL).
        """
        parts = urlsplit(dsn)
        host = parts.netloc.rpartition("@")[2]
        user = f"{quote(self.login, safe='')}:{quote(self.password, safe='')}"
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "passfile"])
        return urlunsplit(parts._replace(netloc=f"{user}@{host}", query=query))


@dataclass(frozen=True, slots=True)
class AgentAdded:
    """What ``birddog agent add`` made for one agent.

    Attributes:
        issued: its first token.
        mailbox_added: the agent had no route and got a mailbox route.
        login: its database login, when one was asked for.
    """

    issued: IssuedToken
    mailbox_added: bool
    login: AgentLogin | None = None

    @property
    def address(self) -> AgentAddress:
        """The agent session the token names."""
        return self.issued.address

    @property
    def token(self) -> str:
        """The bearer token, shown once."""
        return self.issued.token


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token as ``birddog agent list`` shows it: never its text.

    Attributes:
        token_id: the token's public id.
        session_id: the session it names.
        created_at: when it was issued.
        last_used_at: when it last authenticated a caller (to the minute); None: never.
    """

    token_id: str
    session_id: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """An agent and its live tokens.

    Attributes:
        agent_id: the agent.
        created_at: when it was added.
        tokens: its tokens, oldest first.
        login: its database login (None: it has none).
    """

    agent_id: str
    created_at: datetime
    tokens: tuple[TokenInfo, ...]
    login: str | None = None


__all__ = [
    "DEFAULT_SESSION",
    "TOKEN_BYTES",
    "TOKEN_PREFIX",
    "AgentAdded",
    "AgentInfo",
    "AgentLogin",
    "IssuedToken",
    "TokenInfo",
    "agent_address",
    "make_token",
    "token_digest",
]
