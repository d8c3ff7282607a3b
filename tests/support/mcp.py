"""``birddog mcp`` as a subprocess, driven by the mcp package's own client; every result checked.

:func:`call` (and :func:`checked`, for a result in hand) holds every result a test sees
to the rules of :mod:`birddog.mcp.texts`: a success's structured content validates
against the tool's output schema and is the JSON its text block carries; a tool error
carries no structured content.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import jsonschema
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from birddog.clock import SystemClock
from birddog.mcp.schemas import output_schema
from birddog.mcp.texts import ToolResult
from birddog.postgres.pool import create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support.cli import ROOT, Daemon, cli_env, command_line
from tests.support.waiting import eventually

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "birddog-tests", "version": "1"},
    },
}
"""A raw JSON-RPC initialize, for tests that speak HTTP to the server by hand."""
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
"""The headers a streamable HTTP client sends with each POST."""


@contextlib.asynccontextmanager
async def stdio_mcp(
    dsn: str, identity: str, errlog: Any, *args: str, **env: str
) -> AsyncIterator[ClientSession]:
    """``birddog mcp --as IDENTITY`` as a subprocess, initialized, its tools listed.

    The tools are listed first, as every host does: the client then validates each
    result's structured content against the tool's output schema.

    Args:
        dsn: the database the server uses.
        identity: ``AGENT:SESSION``.
        errlog: where the server's stderr goes.
        *args: more arguments of ``birddog mcp``.
        **env: more environment for the server.

    Yields:
        The initialized client session.
    """
    params = server_params(cli_env(dsn, **env), "--as", identity, *args)
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        yield session


def server_params(env: dict[str, str], *args: str) -> StdioServerParameters:
    """How the SDK's ``stdio_client`` starts ``birddog mcp ARGS`` (a warm fork: see the CLI)."""
    command, arguments = command_line(["mcp", *args])
    return StdioServerParameters(command=command, args=arguments, env=env, cwd=ROOT)


async def call(
    session: ClientSession, tool: str, **arguments: Any
) -> tuple[dict[str, Any], str, bool]:
    """Call a tool; its structured content, its text and whether it is an error.

    For a tool error, the first item is the facts its text block carries (it has no
    structured content).
    """
    return checked(tool, await session.call_tool(tool, arguments))


def checked(tool: str, result: types.CallToolResult) -> tuple[dict[str, Any], str, bool]:
    """A result held to the rules (see the module); as :func:`call` gives it."""
    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent), block
    return checked_parts(tool, result.structured_content, block.text, result.is_error)


def checked_result(tool: str, result: ToolResult) -> ToolResult:
    """A result of the agent tools themselves, held to the same rules; returned as it came."""
    checked_parts(tool, result.structured_content, result.text, result.is_error)
    return result


def checked_parts(
    tool: str, structured: Any, text: str, is_error: bool
) -> tuple[dict[str, Any], str, bool]:
    """The rules, on a result's structured content, text block and error flag."""
    facts = facts_of(text)
    if is_error:
        assert structured is None, f"a tool error carries structured content: {structured}"
        return facts, text, True
    assert isinstance(structured, dict), structured
    jsonschema.validate(structured, output_schema(tool))
    assert facts == structured, (text, structured)
    return dict(structured), text, False


def facts_of(text: str) -> dict[str, Any]:
    """The JSON a text block carries after its first line and a blank line ({} if none)."""
    _summary, blank, rest = text.partition("\n\n")
    if not blank:
        return {}
    facts = json.loads(rest)
    assert isinstance(facts, dict), rest
    return facts


def summary_of(text: str) -> str:
    """A text block's first line (what happened, or an error's reason)."""
    return text.partition("\n\n")[0]


@contextlib.asynccontextmanager
async def agents_room(
    factory: Any, *, slow_s: float, lease_s: float, **env: str
) -> AsyncIterator[str]:
    """A database of ``factory`` with :func:`command_agents` running on it; its DSN."""
    dsn = await factory.take()
    try:
        async with command_agents(dsn, slow_s=slow_s, lease_s=lease_s, **env):
            yield dsn
    finally:
        factory.give_back(dsn)


@contextlib.asynccontextmanager
async def command_agents(
    dsn: str, *, slow_s: float, lease_s: float, **env: str
) -> AsyncIterator[None]:
    """A drain daemon and three command agents on ``dsn``, each with a mailbox route.

    ``upper:s-upper`` answers at once (``tr a-z A-Z``), ``slow:s-slow`` the same after
    ``slow_s`` seconds, ``fail:s-fail`` exits 3 saying ``no such thing`` on stderr. The
    daemon's reaper runs every half of ``lease_s`` (the MCP sessions' lease, so that a
    lost session's task is recovered in seconds). ``env`` is more environment for the
    daemon. All are killed at the end.
    """
    pool = await create_pool(dsn, max_size=2)
    try:
        routes = PostgresRoutes(pool, clock=SystemClock())
        for agent in ("upper", "slow", "fail"):
            await routes.add(agent, kind="mailbox")
    finally:
        await pool.close()
    commands = {
        "s-upper": "tr a-z A-Z",
        "s-slow": f"sh -c 'sleep {slow_s:g}; tr a-z A-Z'",
        "s-fail": "sh -c 'echo no such thing >&2; exit 3'",
    }
    started = [Daemon(dsn, BIRDDOG_JOB_LEASE_S=str(lease_s), **env)] + [
        Daemon(dsn, "--command", command, "--queue", queue, command="worker")
        for queue, command in commands.items()
    ]
    try:
        yield
    finally:
        for daemon in started:
            daemon.kill()


@contextlib.contextmanager
def json_errlog() -> Iterator[Any]:
    """A file for a server's stderr; at the end, every line in it must be a JSON object."""
    with tempfile.TemporaryFile(mode="w+") as log:
        yield log
        log.seek(0)
        for line in log.read().splitlines():
            assert isinstance(json.loads(line), dict), line


# ---- over streamable HTTP -------------------------------------------------------------


def http_client(token: str | None) -> httpx2.AsyncClient:
    """An HTTP client for 127.0.0.1 that sends ``token`` as its bearer (no proxies)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx2.AsyncClient(
        headers=headers, trust_env=False, timeout=httpx2.Timeout(30, read=120)
    )


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """A ClientSession over the SDK's streamable HTTP client, initialized."""
    async with (
        http_client(token) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        yield session


async def server_url(server: Daemon) -> str:
    """The URL a ``birddog mcp --http`` server announced."""
    line = await eventually(
        lambda: next(
            (
                json.loads(line)["text"]
                for line in server.log().splitlines()
                if "BirdDog MCP server" in line and "http://" in line
            ),
            None,
        ),
        "the MCP server's URL",
        within_s=60,
    )
    return str(line.rsplit(" ", 1)[1])
