"""Per-agent identity in PostgreSQL: the agents ``birddog agent add`` made, and their tokens.

An agent that acts as itself (through the MCP or A2A HTTP endpoints) presents a bearer
token naming one of its sessions. :class:`PostgresAgents` issues tokens (shown once, never
stored: the table keeps the SHA-256 digest), revokes them, lists them (ids, sessions,
creation and last use; never a token or a digest) and authenticates a caller::

    agents = PostgresAgents(pool)
    added = await agents.add(agent_address("alice:s-alice"))  # route, token
    print(added.token)                                         # the only time it is shown
    assert await agents.authenticate(added.token) == added.address

Authentication goes through ``birddog.agent_token_use``, a ``SECURITY DEFINER`` function:
a server's role needs no privilege on the token table itself. A token that is not a
token (malformed, another prefix) never reaches the database.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when it is
unreachable or refuses (this login may not create or drop roles, say); a call that
failed so wrote nothing.
"""

from __future__ import annotations

import secrets
from datetime import datetime

import structlog

from birddog.core.errors import AgentNotFound, InvalidInput
from birddog.core.mail import AgentAddress
from birddog.core.text import printable
from birddog.core.tokens import (
    TOKEN_BYTES,
    AgentAdded,
    AgentInfo,
    AgentLogin,
    IssuedToken,
    TokenInfo,
    make_token,
    token_digest,
)
from birddog.postgres.pool import Connection, Pool, store_errors
from birddog.postgres.sql import queries

__all__ = [
    "AgentAdded",
    "AgentInfo",
    "AgentLogin",
    "IssuedToken",
    "PostgresAgents",
    "TokenInfo",
]

log = structlog.get_logger("birddog.agents")


class PostgresAgents:
    """The agents and their bearer tokens (a :class:`~birddog.ports.TokenBook`).

    Args:
        pool: the asyncpg pool on the BirdDog database.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def add(self, address: AgentAddress, *, login: bool = False) -> AgentAdded:
        """Add an agent: its mailbox route when it has no route, its first token, a login.

        All in one transaction: nothing is written when any part fails.

        Args:
            address: the agent and the session its first token names.
            login: also make a database login for the agent, a member of ``birddog_agent``
                (``birddog migrate --roles`` must have run, and this login must be allowed
                to create roles): it reads its own mailbox and jobs only.

        Returns:
            The token and the login's password (each shown once), and whether a mailbox
            route was added.

        Raises:
            InvalidInput: the agent was added before (issue another token instead).
        """
        address = _address(address)
        made: AgentLogin | None = None
        with store_errors("agent add"):
            async with self.pool.acquire() as conn, conn.transaction():
                if await conn.fetchrow(queries["agents_add"], address.agent_id) is None:
                    raise InvalidInput(
                        f"agent {address.agent_id!r} was added before; issue another token "
                        f"with: birddog agent token {address.agent_id}",
                        field="agentId",
                    )
                route: bool = await conn.fetchval(
                    queries["routes_ensure_mailbox"], address.agent_id
                )
                issued = await self._insert_token(conn, address)
                if login:
                    password = secrets.token_urlsafe(24)
                    name = await conn.fetchval(
                        queries["agents_create_login"], address.agent_id, password
                    )
                    made = AgentLogin(login=name, password=password)
        log.info(
            "agent_added",
            agent_id=printable(address.agent_id),
            token_id=issued.token_id,
            mailbox_added=route,
            login=None if made is None else made.login,
        )
        return AgentAdded(issued=issued, mailbox_added=route, login=made)

    async def issue(self, address: AgentAddress) -> IssuedToken:
        """Issue another token for an agent that was added.

        Args:
            address: the agent and the session the token names.

        Returns:
            The token, shown once.

        Raises:
            AgentNotFound: the agent was never added.
        """
        address = _address(address)
        with store_errors("agent token"):
            async with self.pool.acquire() as conn:
                issued = await self._insert_token(conn, address)
        log.info(
            "agent_token_issued", agent_id=printable(address.agent_id), token_id=issued.token_id
        )
        return issued

    async def _insert_token(self, conn: Connection, address: AgentAddress) -> IssuedToken:
        token = make_token(secrets.token_bytes(TOKEN_BYTES))
        digest = token_digest(token)
        token_id = "tok_" + secrets.token_hex(6)
        record = await conn.fetchrow(
            queries["agents_token_insert"],
            token_id,
            address.agent_id,
            address.session_id,
            digest,
        )
        if record is None:
            raise AgentNotFound(
                f"no agent {address.agent_id!r} was added; add it with: "
                f"birddog agent add {address.agent_id}"
            )
        return IssuedToken(
            token_id=record["token_id"],
            address=address,
            token=token,
            created_at=record["created_at"],
        )

    async def revoke(self, agent_id: str, *, token_id: str | None = None) -> list[str]:
        """End an agent's tokens: every one, or the one with ``token_id``.

        Args:
            agent_id: the agent.
            token_id: only this token (None: all of the agent's tokens).

        Returns:
            The ids of the tokens revoked (none when there was nothing to revoke).

        Raises:
            AgentNotFound: the agent was never added.
        """
        with store_errors("agent revoke"):
            async with self.pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval(queries["agents_exists"], agent_id):
                    raise AgentNotFound(f"no agent {agent_id!r} was added")
                records = await conn.fetch(queries["agents_revoke"], agent_id, token_id)
        revoked = [record["token_id"] for record in records]
        log.info("agent_tokens_revoked", agent_id=printable(agent_id), token_ids=revoked)
        return revoked

    async def revoke_login(self, agent_id: str) -> str | None:
        """End an agent's database login: forgotten and dropped, so it connects no more.

        Args:
            agent_id: the agent.

        Returns:
            The login dropped, or None when the agent had none.
        """
        with store_errors("agent revoke"):
            login: str | None = await self.pool.fetchval(queries["agents_drop_login"], agent_id)
        if login is not None:
            log.info("agent_login_dropped", agent_id=printable(agent_id), login=login)
        return login

    async def list(self) -> list[AgentInfo]:
        """Every agent that was added, with its live tokens (never a token's text).

        Returns:
            The agents by id, each with its tokens oldest first.
        """
        with store_errors("agent list"):
            records = await self.pool.fetch(queries["agents_list"])
        agents: dict[str, tuple[datetime, str | None, list[TokenInfo]]] = {}
        for record in records:
            _, _, tokens = agents.setdefault(
                record["agent_id"], (record["created_at"], record["login"], [])
            )
            if record["token_id"] is not None:
                tokens.append(
                    TokenInfo(
                        token_id=record["token_id"],
                        session_id=record["session_id"],
                        created_at=record["token_created_at"],
                        last_used_at=record["last_used_at"],
                    )
                )
        return [
            AgentInfo(agent_id=agent_id, created_at=created_at, tokens=tuple(tokens), login=login)
            for agent_id, (created_at, login, tokens) in agents.items()
        ]

    async def authenticate(self, token: str) -> AgentAddress | None:
        """The agent session a bearer token names, recording its use (once a minute at most).

        Args:
            token: what the caller presented (anything: it is checked first).

        Returns:
            The address, or None for a malformed, unknown or revoked token.
        """
        digest = token_digest(token)
        if digest is None:
            return None
        with store_errors("agent authenticate"):
            record = await self.pool.fetchrow(queries["agents_token_use"], digest)
        if record is None:
            return None
        try:
            return AgentAddress(agent_id=record["agent_id"], session_id=record["session_id"])
        except InvalidInput:
            # A row SQL filled with an id BirdDog would never write names nobody.
            log.warning("agent_token_unreadable", token_id=printable(str(record["token_id"])))
            return None


def _address(address: AgentAddress) -> AgentAddress:
    if not isinstance(address, AgentAddress):
        raise InvalidInput("an agent address is needed (AGENT or AGENT:SESSION)", field="agent")
    return address
