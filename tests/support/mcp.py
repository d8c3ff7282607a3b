"""``birddog mcp`` as a subprocess, driven by the mcp package's own client over stdio."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.cli import ROOT, cli_env, command_line


@contextlib.asynccontextmanager
async def stdio_mcp(
    dsn: str, identity: str, errlog: Any, *args: str, **env: str
) -> AsyncIterator[ClientSession]:
    """``birddog mcp --as IDENTITY`` as a subprocess, initialized, with the SDK's client.

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
        yield session


def server_params(env: dict[str, str], *args: str) -> StdioServerParameters:
    """How the SDK's ``stdio_client`` starts ``birddog mcp ARGS`` (a warm fork: see the CLI)."""
    command, arguments = command_line(["mcp", *args])
    return StdioServerParameters(command=command, args=arguments, env=env, cwd=ROOT)


async def call(
    session: ClientSession, tool: str, **arguments: Any
) -> tuple[dict[str, Any], str, bool]:
    """Call a tool; its structured content, its text and whether it is an error."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    return dict(result.structured_content or {}), text, result.is_error


@contextlib.contextmanager
def json_errlog() -> Iterator[Any]:
    """A file for a server's stderr; at the end, every line in it must be a JSON object."""
    with tempfile.TemporaryFile(mode="w+") as log:
        yield log
        log.seek(0)
        for line in log.read().splitlines():
            assert isinstance(json.loads(line), dict), line
