"""The token book fake: bearer tokens and the agent sessions they name, in a dict."""

from __future__ import annotations

import secrets

from birddog.core.mail import AgentAddress
from birddog.core.tokens import TOKEN_BYTES, make_token

__all__ = ["InMemoryTokenBook"]


class InMemoryTokenBook:
    """Bearer tokens and the agent sessions they name (a :class:`~birddog.ports.TokenBook`).

    Args:
        tokens: who each token is.

    Attributes:
        tokens: who each token is; change it to revoke or add one.
    """

    def __init__(self, tokens: dict[str, AgentAddress] | None = None) -> None:
        self.tokens: dict[str, AgentAddress] = dict(tokens or {})

    def issue(self, address: AgentAddress) -> str:
        """A new token (``bd_`` and 32 random bytes, as ``birddog agent`` makes) for ``address``."""
        token = make_token(secrets.token_bytes(TOKEN_BYTES))
        self.tokens[token] = address
        return token

    def revoke(self, token: str) -> None:
        """End ``token``; an unknown one is ignored."""
        self.tokens.pop(token, None)

    async def authenticate(self, token: str) -> AgentAddress | None:
        """The agent session ``token`` names; None for an unknown or malformed one."""
        return self.tokens.get(token) if isinstance(token, str) else None
