"""A thousand asks at once on a pool of ten: each answers, or times out on time.

The orchestrator's shape: one process fans a question out with ``asyncio.gather``. Its
waits share one listener and hold no pool connection, so a pool far smaller than the
number of asks serves them all (it once hung for ever: 200 asks on a pool of 60). The
asked agents are served by a real ``birddog worker`` and a real drain daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from mcp import ClientSession, stdio_client

from birddog import Asking, AskTimedOut, open_asking
from birddog.clock import SystemClock
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support.cli import Daemon, cli_env, run_to_end
from tests.support.mcp import server_params

ASKS = 1000
LATE_S = 3.0
"""How late past its timeout the last of a thousand asks may end: on time, not hanging.

Alone on this machine the last ends within 0.9 s of its timeout; beside the rest of the
suite (three workers on two cores) it has ended 2.5 s late, the time a starved process
takes to wake a thousand waits. A hang is minutes, never seconds.
"""
SESSIONS = 100
"""The asks go to this many sessions of one agent: a session takes one turn at a time."""


async def timed_ask(asking: Asking, index: int, timeout_s: float) -> tuple[str | None, float]:
    """Ask one question; its answer (None: timed out) and how long the call took."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        answer: str | None = await asking.ask(
            to=f"echo:s-{index % SESSIONS}",
            from_="fan:s-fan",
            content=f"question {index}",
            timeout_s=timeout_s,
        )
    except AskTimedOut:
        answer = None
    return answer, loop.time() - began


@pytest.fixture
async def small_pool(database_url: str) -> AsyncIterator[Pool]:
    """The asking process's pool: ten connections for a thousand asks."""
    pool = await create_pool(database_url, min_size=1, max_size=10)
    yield pool
    await pool.close()


@pytest.fixture
async def echo_agent(pg_pool: Pool, daemons: Callable[..., Daemon]) -> None:
    """The asked agent has a mailbox route, and a drain daemon delivers the replies."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("echo", kind="mailbox")
    daemons()


@pytest.mark.usefixtures("echo_agent")
async def test_a_thousand_asks_on_a_pool_of_ten_are_all_answered(
    database_url: str, small_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """Every one of 1,000 concurrent asks gets its own answer, none past its timeout."""
    daemons(
        "--handler",
        "tests.acceptance.handlers:echo",
        command="worker",
        BIRDDOG_WORKER_CONCURRENCY="32",
    )
    timeout_s = 90.0
    async with open_asking(small_pool, database_url) as asking:
        results = await asyncio.gather(*(timed_ask(asking, i, timeout_s) for i in range(ASKS)))
    answers = [answer for answer, _ in results]
    assert answers == [f"echo: question {i}" for i in range(ASKS)]
    slowest = max(took for _, took in results)
    assert slowest <= timeout_s, slowest


@pytest.mark.usefixtures("echo_agent")
async def test_a_thousand_asks_with_no_worker_all_time_out_on_time(
    database_url: str, small_pool: Pool
) -> None:
    """With nobody answering, each of 1,000 asks times out on time (within LATE_S of it)."""
    timeout_s = 15.0  # long enough for 1,000 sends through ten connections on a busy machine
    async with open_asking(small_pool, database_url) as asking:
        results = await asyncio.gather(*(timed_ask(asking, i, timeout_s) for i in range(ASKS)))
    assert [answer for answer, _ in results] == [None] * ASKS
    took = sorted(took for _, took in results)
    assert took[0] >= timeout_s - 0.05, took[0]
    assert took[-1] <= timeout_s + LATE_S, took[-1]
    asked = await small_pool.fetchval("SELECT count(*) FROM birddog.jobs")
    assert asked == ASKS  # every question was asked, and stays owed


# ---- the same shape through one MCP server, and through the command line -------------


async def timed_tool_ask(
    session: ClientSession, index: int, wait_s: float
) -> tuple[dict[str, Any], float]:
    """One ask through the MCP server; its structured result and how long the call took."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    result = await session.call_tool(
        "ask",
        {"to": f"echo:s-{index % SESSIONS}", "content": f"question {index}", "wait_s": wait_s},
    )
    assert not result.is_error, result.content
    return dict(result.structured_content or {}), loop.time() - began


@contextlib.asynccontextmanager
async def mcp_server(database_url: str) -> AsyncIterator[tuple[ClientSession, Any]]:
    """``birddog mcp --as fan:s-fan`` over stdio (its pool: ten connections), and its log."""
    params = server_params(cli_env(database_url), "--as", "fan:s-fan")
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session, errlog


@contextlib.asynccontextmanager
async def failures_shown(errlog: Any) -> AsyncIterator[None]:
    """A failed assertion inside also shows what the server logged of its failed tool calls."""
    try:
        yield
    except AssertionError as exc:
        errlog.seek(0)
        failed = [line for line in errlog.read().splitlines() if "mcp_tool_failed" in line]
        raise AssertionError(
            f"{exc}\n--- the server's failed calls:\n" + "\n".join(failed[:5])
        ) from exc


def tool_times(errlog: Any, tool: str) -> list[float]:
    """How long each call of ``tool`` took inside the server, from its log."""
    errlog.seek(0)
    events = [json.loads(line) for line in errlog.read().splitlines()]
    return [
        e["took_s"] for e in events if e.get("event") == "mcp_tool_called" and e["tool"] == tool
    ]


@pytest.mark.usefixtures("echo_agent")
async def test_a_thousand_tool_asks_through_one_mcp_server(
    database_url: str, daemons: Callable[..., Daemon]
) -> None:
    """1,000 concurrent ask calls to one MCP server: all answered; with no worker, all pending.

    Pending comes within wait_s plus LATE_S, over what 1,000 concurrent calls of a tool
    that does not wait take on the same connection (the SDK's own cost per message).
    """
    worker = daemons(
        "--handler",
        "tests.acceptance.handlers:echo",
        command="worker",
        BIRDDOG_WORKER_CONCURRENCY="32",
    )
    async with mcp_server(database_url) as (session, errlog), failures_shown(errlog):
        results = await asyncio.gather(*(timed_tool_ask(session, i, 90) for i in range(ASKS)))
        assert [r["content"] for r, _ in results] == [f"echo: question {i}" for i in range(ASKS)]
        assert max(took for _, took in results) <= 90
        worker.terminate()
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.gather(*(session.call_tool("agents", {}) for _ in range(ASKS)))
        transport_s = loop.time() - began
        wait_s = 15.0
        results = await asyncio.gather(*(timed_tool_ask(session, i, wait_s) for i in range(ASKS)))
        inside = tool_times(errlog, "ask")[ASKS:]
    assert {r["status"] for r, _ in results} == {"pending"}
    # Inside the server each call ends within its wait_s plus LATE_S; what the client
    # sees adds the SDK's cost of a thousand messages each way on one connection.
    assert len(inside) == ASKS
    assert max(inside) <= wait_s + LATE_S, max(inside)
    slowest = max(took for _, took in results)
    assert slowest <= wait_s + LATE_S + 2 * transport_s, (slowest, transport_s)


CLI_ASKS = 4
"""Concurrent ``birddog ask`` processes (each a whole Python process on a 2-core machine)."""


async def timed_cli_ask(
    database_url: str, index: int, timeout_s: float, *, to: str = "echo"
) -> tuple[int, str, float]:
    """One ``birddog ask`` process; its exit status, its stdout and how long it took."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    done = await run_to_end(
        ["ask", "--to", f"{to}:s-{index}", "--from", "fan:s-cli", "--timeout", str(timeout_s),
         f"question {index}"],
        env=cli_env(database_url),
        timeout_s=timeout_s + 90,
    )  # fmt: skip
    return done.returncode, done.stdout, loop.time() - began


@pytest.mark.usefixtures("echo_agent")
async def test_concurrent_cli_asks_answer_or_time_out_on_time(
    database_url: str, daemons: Callable[..., Daemon]
) -> None:
    """Concurrent ``birddog ask`` processes all print their answer; with no worker, all exit 2.

    A process's own start (imports, connecting) comes on top of its --timeout; the
    slowest answered ask (start plus an answer at once) bounds it.
    """
    worker = daemons("--handler", "tests.acceptance.handlers:echo", command="worker")
    answered = await asyncio.gather(*(timed_cli_ask(database_url, i, 60) for i in range(CLI_ASKS)))
    assert [(code, out) for code, out, _ in answered] == [
        (0, f"echo: question {i}\n") for i in range(CLI_ASKS)
    ]
    start_s = max(took for _, _, took in answered)
    worker.terminate()
    timed_out = await asyncio.gather(*(timed_cli_ask(database_url, i, 5) for i in range(CLI_ASKS)))
    assert [code for code, _, _ in timed_out] == [2] * CLI_ASKS
    slowest = max(took for _, _, took in timed_out)
    assert slowest <= 5 + 1 + start_s, (slowest, start_s)
