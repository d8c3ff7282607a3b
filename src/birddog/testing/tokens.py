"""The token book fake and the agents' accounts: bearer tokens and the sessions they name."""

from __future__ import annotations

import secrets
from datetime import datetime

from birddog.core.errors import AgentNotFound, InvalidInput
from birddog.core.mail import AgentAddress
from birddog.core.tokens import (
    TOKEN_BYTES,
    AgentAdded,
    AgentInfo,
    AgentLogin,
    IssuedToken,
    TokenInfo,
    make_token,
)
from birddog.ports import Clock
from birddog.testing.routes import InMemoryRoutes

__all__ = ["InMemoryAgents", "InMemoryTokenBook"]


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


class InMemoryAgents:
    """Agents that act as themselves and their tokens (a :class:`~birddog.ports.AgentAccounts`).

    Tokens it issues authenticate in ``tokens`` (the token book fake), as
    ``PostgresAgents`` both issues and authenticates; an agent added without a route gets
    a mailbox route in ``routes``. A login asked for is named but made nowhere (the fakes
    have no database to log in to).

    Args:
        routes: the route book (a mailbox route for an agent without one).
        clock: when agents and tokens are made.
        tokens: the token book the tokens go into (default: a fresh one).

    Attributes:
        agents: every agent added, by id: when, its login, its tokens by id.
    """

    def __init__(
        self, *, routes: InMemoryRoutes, clock: Clock, tokens: InMemoryTokenBook | None = None
    ) -> None:
        self.routes = routes
        self.clock = clock
        self.tokens = tokens if tokens is not None else InMemoryTokenBook()
        self.agents: dict[str, _Agent] = {}

    async def add(self, address: AgentAddress, *, login: bool = False) -> AgentAdded:
        """Add an agent: a mailbox route when it has none, its first token, a login if asked.

        Raises:
            InvalidInput: the agent was added before.
        """
        if address.agent_id in self.agents:
            raise InvalidInput(
                f"agent {address.agent_id!r} was added before; issue another token "
                f"with: birddog agent token {address.agent_id}",
                field="agentId",
            )
        made = (
            AgentLogin(login=f"birddog_agent_{secrets.token_hex(4)}", password=_password())
            if login
            else None
        )
        self.agents[address.agent_id] = _Agent(
            self.clock.now(), None if made is None else made.login
        )
        mailbox = await self.routes.route(address.agent_id) is None
        if mailbox:
            await self.routes.add(address.agent_id, kind="mailbox")
        return AgentAdded(issued=await self.issue(address), mailbox_added=mailbox, login=made)

    async def issue(self, address: AgentAddress) -> IssuedToken:
        """Issue another token for an agent that was added.

        Raises:
            AgentNotFound: the agent was never added.
        """
        agent = self._agent(address.agent_id)
        token = self.tokens.issue(address)
        issued = IssuedToken(
            token_id="tok_" + secrets.token_hex(6),
            address=address,
            token=token,
            created_at=self.clock.now(),
        )
        agent.tokens[issued.token_id] = (token, issued)
        return issued

    async def revoke(self, agent_id: str, *, token_id: str | None = None) -> list[str]:
        """End the agent's tokens (or only ``token_id``); the ids revoked, oldest first.

        Raises:
            AgentNotFound: the agent was never added.
        """
        agent = self._agent(agent_id)
        ended = [tid for tid in agent.tokens if token_id in (None, tid)]
        for tid in ended:
            token, _ = agent.tokens.pop(tid)
            self.tokens.revoke(token)
        return ended

    async def revoke_login(self, agent_id: str) -> str | None:
        """Forget the agent's login; the login, or None when it had none (or is unknown)."""
        agent = self.agents.get(agent_id)
        if agent is None:
            return None
        login, agent.login = agent.login, None
        return login

    async def list(self) -> list[AgentInfo]:
        """Every agent by id, with its live tokens oldest first (never a token's text)."""
        return [
            AgentInfo(
                agent_id=agent_id,
                created_at=agent.created_at,
                login=agent.login,
                tokens=tuple(
                    TokenInfo(
                        token_id=issued.token_id,
                        session_id=issued.address.session_id,
                        created_at=issued.created_at,
                        last_used_at=None,
                    )
                    for _, issued in agent.tokens.values()
                ),
            )
            for agent_id, agent in sorted(self.agents.items())
        ]

    def _agent(self, agent_id: str) -> _Agent:
        agent = self.agents.get(agent_id)
        if agent is None:
            raise AgentNotFound(
                f"no agent {agent_id!r} was added; add it with: birddog agent add {agent_id}"
            )
        return agent


class _Agent:
    """One agent as :class:`InMemoryAgents` keeps it."""

    def __init__(self, created_at: datetime, login: str | None) -> None:
        self.created_at = created_at
        self.login = login
        self.tokens: dict[str, tuple[str, IssuedToken]] = {}


def _password() -> str:
    return secrets.token_urlsafe(24)
