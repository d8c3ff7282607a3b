"""Runs the MCP server (``birddog mcp``): the one file that runs it.

:func:`run_mcp` opens the adapters, builds the agent tools
(:func:`birddog.bootstrap.build_agent_tools`) and serves them with the ``mcp`` SDK
(:mod:`birddog.mcp.server`): over stdio until the
client closes stdin, or over streamable HTTP on 127.0.0.1 until SIGTERM/SIGINT. The
identity gets a mailbox route when it has none; a task it took stops being renewed when
the server stops, so recovery applies. The identity's session is live while the server
runs, and each HTTP caller's while a connection of it lives (:mod:`birddog.service.live`):
its tasks are offered to it before any worker. The server starts even while the database is
unreachable (send and ask spool then), and forwards this host's spool beside serving
(:func:`~birddog.processes.sides.forward_spool`).
"""

from __future__ import annotations

import asyncio
import secrets

import structlog

from birddog.bootstrap import MCP_POOL_SIZE, Announce, build_agent_tools, open_adapters, token_book
from birddog.core.ask import address_text, parse_address
from birddog.core.errors import InvalidSetting, StoreUnavailable
from birddog.core.mail import AgentAddress
from birddog.ports import TokenBook
from birddog.processes.sides import ProcessTasks, forward_spool
from birddog.runtime import stop_on_signals
from birddog.service.live import LiveAnnouncer
from birddog.settings import Settings

log = structlog.get_logger("birddog.processes.mcp")

__all__ = ["run_mcp"]


async def run_mcp(
    settings: Settings,
    *,
    caller: str | None,
    http: bool,
    port: int,
    channel: bool,
    token: str | None,
    announce: Announce,
    insecure_as: str | None = None,
) -> None:
    """Serve the mail room as MCP tools until stdin ends (stdio) or SIGTERM/SIGINT (HTTP).

    Args:
        settings: the settings.
        caller: ``AGENT:SESSION`` every call acts as; None (HTTP only): each request's
            per-agent token names its caller.
        http: serve streamable HTTP on 127.0.0.1 instead of stdio.
        port: the HTTP port.
        channel: declare Claude Code's ``claude/channel`` and push replies and tasks.
        token: the bearer token of ``caller`` over HTTP (None: a fresh one, announced).
        announce: told the URL and the token (over HTTP) and the embedded server's DSN.
        insecure_as: ``AGENT:SESSION`` of the test mode (HTTP on loopback only): every
            request is that agent session, and no token is checked.

    Raises:
        InvalidInput: ``caller`` is not ``AGENT:SESSION``.
        InvalidSetting: no ``--as`` over stdio; the test mode without ``--http`` or
            with ``--as``.
    """
    from birddog.mcp.http import OneToken, serve_http  # noqa: PLC0415 - an extra
    from birddog.mcp.server import serve_stdio  # noqa: PLC0415 - an extra

    tested = parse_address(insecure_as, "--insecure-test-mode") if insecure_as else None
    if tested is not None and (not http or caller is not None):
        raise InvalidSetting(
            "--insecure-test-mode AGENT:SESSION names the one identity of an --http server: "
            "give it with --http, without --as",
            field="--insecure-test-mode",
        )
    identity = parse_address(caller, "--as") if caller is not None else tested
    if identity is None and not http:
        raise InvalidSetting("over stdio, give the identity: --as AGENT:SESSION", field="--as")
    done = asyncio.Event()
    async with (
        open_adapters(settings, announce=announce, pool_size=MCP_POOL_SIZE, lazy=True) as adapters,
        ProcessTasks(stop=done) as sides,
    ):
        agent_tools = build_agent_tools(adapters)
        services = agent_tools.services
        if identity is not None:
            try:
                if await agent_tools.prepare(identity):
                    log.info("mcp_mailbox_added", agent_id=identity.agent_id)
            except StoreUnavailable as exc:
                log.warning("mcp_database_unavailable", error=type(exc).__name__)
        await _announce_live(sides, services.live, identity)
        # The process's one listening connection says when the database is back.
        with services.notices.reconnects(asyncio.Event()) as back:
            forward_spool(sides, services.sender, every_s=settings.spool_forward_s, back=back)
            try:
                tokens: TokenBook | None = None
                if tested is not None:
                    _warn_test_mode(tested, announce)
                elif identity is None:
                    # Many agents: each request's per-agent token (birddog agent add) names
                    # its caller, whose mailbox route agent add made.
                    tokens = token_book(adapters)
                elif not http:
                    await serve_stdio(agent_tools, identity, channel=channel)
                    return
                else:
                    tokens = OneToken(token or secrets.token_urlsafe(32), identity)

                def ready(url: str) -> None:
                    if tested is not None:
                        announce(
                            f"BirdDog MCP server in the insecure test mode as {insecure_as}: {url}"
                        )
                        return
                    if identity is None:
                        announce(f"BirdDog MCP server for the agents' tokens: {url}")
                        return
                    announce(f"BirdDog MCP server for {caller}: {url}")
                    if token is None and isinstance(tokens, OneToken):
                        announce(f"bearer token (BIRDDOG_MCP_TOKEN to choose one): {tokens.token}")

                with stop_on_signals() as stop:
                    await serve_http(
                        agent_tools,
                        tokens,
                        port=port,
                        channel=channel,
                        insecure_as=tested,
                        sessions_per_caller=settings.mcp_sessions_per_token,
                        session_idle_s=settings.mcp_session_idle_s,
                        ready=ready,
                        stop=stop,
                    )
            finally:
                done.set()
                await agent_tools.close()


async def _announce_live(
    sides: ProcessTasks, live: LiveAnnouncer | None, identity: AgentAddress | None
) -> None:
    """Keep the sessions this server serves live while it runs, and leave them at its end.

    Its identity (``--as``, the test mode's) for its whole life; an HTTP caller's while a
    connection of it lives (the server's middleware holds those). Beaten until the body
    ends, left as the last word, before the leases of the tasks taken lapse.
    """
    if live is None:
        return
    sides.every("live_sessions", live.every_s, live.beat, finish=True)
    sides.at_end(live.leave_all)
    if identity is not None:
        await live.hold(identity)


def _warn_test_mode(caller: AgentAddress, announce: Announce) -> None:
    """Say loudly, on stderr and in the log, that this server checks no token."""
    text = address_text(caller)
    log.warning("mcp_insecure_test_mode", caller=text)
    announce(
        f"WARNING: --insecure-test-mode: every request to this server acts as {text}, with "
        "no token checked (loopback only; for tools that cannot send a header, such as the "
        "MCP conformance suite). Never use it for real agents."
    )
