"""``birddog agent ...``: agents that act as themselves, with bearer tokens.

``agent add AGENT[:SESSION]`` gives an agent what it needs (a mailbox route when it has
no route, a token, and with ``--login`` a database login that sees its own mailbox and
jobs only); ``agent token`` issues another token, ``agent revoke`` ends them (and the
login), ``agent list`` shows agents, their logins and their tokens' ids, never a token. A
token is printed once, on the line that starts with ``token:``, a login's URL on the line
that starts with ``DATABASE_URL=``; BirdDog keeps only the token's digest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from birddog.cli import main, print_rows, with_services
from birddog.core.errors import InvalidInput
from birddog.core.mail import AgentAddress
from birddog.core.text import printable
from birddog.core.tokens import DEFAULT_SESSION, agent_address

if TYPE_CHECKING:
    from birddog.core.tokens import AgentAdded, AgentInfo, IssuedToken
    from birddog.service.entry import Services

ADDRESS_HELP = f"AGENT or AGENT:SESSION; without a session the token names {DEFAULT_SESSION!r}."


def _address(_ctx: click.Context, _param: click.Parameter, value: str) -> AgentAddress:
    try:
        return agent_address(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


def _echo_token(issued: IssuedToken) -> None:
    address = issued.address
    click.echo(
        f"token {issued.token_id} for "
        f"{printable(address.agent_id)}:{printable(address.session_id)} "
        "(shown once: store it now; BirdDog keeps only its digest)"
    )
    click.echo(f"token: {issued.token}")


@main.group()
def agent() -> None:
    """Agents that act as themselves: bearer tokens for the MCP and A2A endpoints."""


@agent.command("add", epilog=ADDRESS_HELP)
@click.argument("address", metavar="AGENT[:SESSION]", callback=_address)
@click.option(
    "--login",
    is_flag=True,
    help="Also make a database login for AGENT (needs `migrate --roles` and a login that may "
    "create roles): it reads its own mailbox and jobs only. Its DATABASE_URL is printed once.",
)
@click.pass_context
def agent_add(ctx: click.Context, address: AgentAddress, login: bool) -> None:
    """Add AGENT: a mailbox route when it has no route, a token, a login (each printed once)."""

    async def add(adapters: Services) -> tuple[AgentAdded, str]:
        return await adapters.agents.add(address, login=login), adapters.dsn

    added, dsn = with_services(ctx, add)
    route = "its replies go to its mailbox" if added.mailbox_added else "it keeps its route"
    click.echo(f"agent {printable(address.agent_id)} added; {route}")
    _echo_token(added.issued)
    if added.login is not None:
        click.echo(
            f"database login {added.login.login} (shown once: store it now; it reads "
            f"{printable(address.agent_id)}'s own mailbox and jobs only)"
        )
        click.echo(f"DATABASE_URL={added.login.dsn(dsn)}")


@agent.command("token", epilog=ADDRESS_HELP)
@click.argument("address", metavar="AGENT[:SESSION]", callback=_address)
@click.pass_context
def agent_token(ctx: click.Context, address: AgentAddress) -> None:
    """Issue another token for AGENT (printed once); its other tokens stay valid."""
    _echo_token(with_services(ctx, lambda s: s.agents.issue(address)))


@agent.command("revoke")
@click.argument("agent_id", metavar="AGENT")
@click.option("--token-id", default=None, help="End this token only (see `birddog agent list`).")
@click.pass_context
def agent_revoke(ctx: click.Context, agent_id: str, token_id: str | None) -> None:
    """End AGENT's tokens and its database login, or only the token --token-id names."""

    async def revoke(adapters: Services) -> tuple[list[str], str | None]:
        revoked = await adapters.agents.revoke(agent_id, token_id=token_id)
        dropped = None if token_id is not None else await adapters.agents.revoke_login(agent_id)
        return revoked, dropped

    revoked, dropped = with_services(ctx, revoke)
    if token_id is not None and not revoked:
        raise click.ClickException(
            f"agent {printable(agent_id)} has no token {printable(token_id)}"
        )
    if dropped is not None:
        click.echo(f"dropped the database login {dropped} of {printable(agent_id)}")
    if not revoked:
        click.echo(f"agent {printable(agent_id)} had no token to revoke")
        return
    plural = "token" if len(revoked) == 1 else "tokens"
    click.echo(f"revoked {len(revoked)} {plural} of {printable(agent_id)}: {', '.join(revoked)}")


def _rows(agents: list[AgentInfo]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for info in agents:
        base = {"agentId": info.agent_id, "addedAt": info.created_at, "login": info.login}
        if not info.tokens:
            rows.append({**base, "tokenId": None, "sessionId": None})
        rows.extend(
            {
                **base,
                "tokenId": token.token_id,
                "sessionId": token.session_id,
                "createdAt": token.created_at,
                "lastUsedAt": token.last_used_at,
            }
            for token in info.tokens
        )
    return rows


@agent.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per token (or agent).")
@click.pass_context
def agent_list(ctx: click.Context, as_json: bool) -> None:
    """List agents, their logins and tokens: id, session, creation, last use (never a token)."""
    rows = _rows(with_services(ctx, lambda s: s.agents.list()))
    print_rows(
        rows, as_json, ["agentId", "login", "tokenId", "sessionId", "createdAt", "lastUsedAt"]
    )
