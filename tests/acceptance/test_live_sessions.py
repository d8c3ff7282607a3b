"""Live sessions first: a live MCP session gets its mail before a worker beside it spawns.

``birddog mcp --as bob:s-bob`` (driven by the mcp SDK's client) and ``birddog worker
--command`` for bob (its agent counts its own spawns in a file) run side by side on one
database, bob's route's live grace set to two seconds. The live session takes its mail
through ``next_task`` with no spawn; mail it leaves untaken past the grace goes to the
worker, never while the session's turn runs; a SIGKILLed MCP server stops counting within
its TTL, and the task it held is recovered by the usual policy and answered by the worker.
Over HTTP without ``--as``, each token's caller is live from its first request until its MCP
session closes (the client's DELETE) or idles out.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from birddog import AgentAddress, AgentWork, Job, Mail, agent_job
from birddog.core.jobs import Recovery
from birddog.postgres.pool import Pool, create_pool
from tests.support import enqueue, eventually
from tests.support.cli import Daemon, cli, token_of
from tests.support.mcp import (
    ACCEPT,
    INITIALIZE,
    call,
    http_client,
    http_session,
    json_errlog,
    server_url,
    stdio_mcp,
)

BOB = "bob:s-bob"
ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
GRACE_S = 2.0
GRACE_DELTA = timedelta(seconds=GRACE_S + 0.5)
LEASE_S = 3.0
TOKEN = "tok-" + "b" * 40

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def mail_job(job_id: str, content: str = "hello", *, recoveries: int | None = None) -> Job:
    """Job ``job_id``: a task from alice to bob's session (queued again ``recoveries`` times)."""
    to = AgentAddress(agent_id="bob", session_id="s-bob")
    mail = Mail(
        key=f"m-{job_id}", to=to, from_=ALICE, reply_to=[ALICE], content=content, created_at=1
    )
    recovery = None if recoveries is None else Recovery(max_recoveries=recoveries)
    work = AgentWork(job_id=job_id, session_id="s-bob", command_fact_id=job_id, recovery=recovery)
    return agent_job(work, mail)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[Pool]:
    """A pool on the test database, bob's route a mailbox with a two-second live grace."""
    added = await cli(database_url, "route", "add", "bob", "--mailbox", "--live-grace", "2s")
    assert added.returncode == 0, added.stderr
    assert "live grace 2s" in added.stdout
    made = await create_pool(database_url, max_size=4)
    assert await made.fetchval("SELECT live_grace_s FROM birddog.routes") == GRACE_S
    yield made
    await made.close()


@pytest.fixture
def spawns(tmp_path: Path) -> Path:
    """The file bob's command agent appends one line to per spawn."""
    return tmp_path / "spawns"


@pytest.fixture
def worker(database_url: str, spawns: Path, pool: Pool) -> Iterator[Daemon]:
    """``birddog worker --command`` for bob: its agent counts its spawns and shouts."""
    del pool  # the route first
    command = f"sh -c 'echo $$ >> {spawns}; tr a-z A-Z'"
    started = Daemon(
        database_url,
        "--command",
        command,
        "--agent",
        "bob",
        command="worker",
        BIRDDOG_JOB_LEASE_S=str(LEASE_S),
    )
    yield started
    started.kill()


@pytest.fixture
def errlog() -> Iterator[Any]:
    """Where the MCP server's stderr goes (every line must be JSON)."""
    with json_errlog() as log:
        yield log


def spawned(spawns: Path) -> int:
    """How many times bob's command agent started."""
    return len(spawns.read_text().splitlines()) if spawns.exists() else 0


async def job(pool: Pool, job_id: str) -> dict[str, Any]:
    """What the database says of a job: state, outcome, worker, times, reply content."""
    row = await pool.fetchrow(
        "SELECT state, outcome, worker_id, created_at, started_at, settled_at, result_content "
        "FROM birddog.jobs WHERE job_id = $1",
        job_id,
    )
    assert row is not None, job_id
    return dict(row)


async def settled(pool: Pool, job_id: str, within_s: float = 30) -> dict[str, Any]:
    """The job once settled (failing loudly with what was last seen)."""
    return await eventually(
        lambda: job(pool, job_id),
        f"job {job_id} settled",
        until=lambda seen: seen["state"] == "settled",
        within_s=within_s,
        every_s=0.1,
    )


async def live_holders(pool: Pool) -> list[str]:
    """The holders of bob's live sessions that still count."""
    rows = await pool.fetch(
        "SELECT holder FROM birddog.live_sessions WHERE queue_key = $1 AND expires_at > now()",
        "bob\x1fs-bob",
    )
    return [row["holder"] for row in rows]


async def test_a_live_session_takes_its_mail_before_the_worker_beside_it(
    database_url: str, pool: Pool, worker: Daemon, spawns: Path, errlog: Any
) -> None:
    """next_task gets the mail with no spawn; mail left past the grace goes to the worker after the turn."""
    env = {"BIRDDOG_JOB_LEASE_S": str(LEASE_S)}
    async with stdio_mcp(database_url, BOB, errlog, **env) as bob:
        [holder] = await eventually(lambda: live_holders(pool), "bob's live session", within_s=30)
        assert holder.startswith("mcp:")
        await enqueue(pool, mail_job("first"))
        task, text, _ = await call(bob, "next_task", wait_s=30)
        assert (task["status"], task["job_id"]) == ("task", "first"), text
        # While bob's turn runs, a second mail waits past the grace: not the worker's yet.
        await enqueue(pool, mail_job("second", "shout this"))
        second = await job(pool, "second")
        await eventually(
            lambda: pool.fetchval(
                "SELECT now() > $1::timestamptz", second["created_at"] + GRACE_DELTA
            ),
            "the second mail past its grace",
            within_s=10,
        )
        assert (await job(pool, "second"))["state"] == "queued"
        _, text, is_error = await call(bob, "answer", job_id="first", content="done by bob")
        assert not is_error, text
        # Bob has gone quiet (no next_task): the worker takes it now, one spawn.
        answered = await settled(pool, "second")
    first = await job(pool, "first")
    assert (first["outcome"], first["result_content"]) == ("completed", "done by bob")
    assert first["worker_id"] == holder
    assert (answered["outcome"], answered["result_content"]) == ("completed", "SHOUT THIS")
    assert answered["worker_id"] != holder
    assert answered["started_at"] >= first["settled_at"]  # one turn at a time per session
    assert spawned(spawns) == 1
    # The server left its live session on its way out.
    assert await live_holders(pool) == []


async def test_a_killed_live_server_stops_counting_and_its_task_is_recovered(
    database_url: str, pool: Pool, worker: Daemon, spawns: Path
) -> None:
    """SIGKILL of a live MCP server: its session lapses within the TTL; its task, recovered, is the worker's."""
    server = Daemon(
        database_url,
        "--as",
        BOB,
        "--http",
        "--port",
        "0",
        command="mcp",
        BIRDDOG_MCP_TOKEN=TOKEN,
        BIRDDOG_JOB_LEASE_S=str(LEASE_S),
    )
    try:
        url = await server_url(server)
        [holder] = await eventually(lambda: live_holders(pool), "bob's live session", within_s=30)
        await enqueue(pool, mail_job("taken", "take me", recoveries=1))
        client = http_session(url, TOKEN)
        bob = await client.__aenter__()
        task, text, _ = await call(bob, "next_task", wait_s=30)
        assert task["job_id"] == "taken", text
        assert spawned(spawns) == 0
        os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)
        # The client's own end fails against a dead server: what matters is the database.
        with contextlib.suppress(Exception):
            await client.__aexit__(None, None, None)
        await eventually(
            lambda: live_holders(pool),
            "the killed server's session lapsed",
            until=lambda holders: holders == [],
            within_s=20,
            every_s=0.2,
        )
    except BaseException:
        server.kill()
        raise
    server.kill()
    answered = await settled(pool, "taken", within_s=60)
    assert (answered["outcome"], answered["result_content"]) == ("completed", "TAKE ME")
    assert answered["worker_id"] != holder
    assert spawned(spawns) == 1


async def test_the_live_grace_is_set_put_back_and_checked_by_route_update(
    database_url: str, pool: Pool
) -> None:
    """Route update --live-grace sets it, 'default' puts 30s back; a bad value or route is one line."""
    changed = await cli(database_url, "route", "update", "bob", "--live-grace", "90s")
    assert (changed.returncode, changed.stdout.strip()) == (0, "route bob: live grace 1m 30s")
    assert await pool.fetchval("SELECT live_grace_s FROM birddog.routes") == 90
    back = await cli(database_url, "route", "update", "bob", "--live-grace", "default")
    assert back.stdout.strip() == "route bob: live grace 30s"
    assert await pool.fetchval("SELECT live_grace_s FROM birddog.routes") is None
    for args in (
        ("bob", "--live-grace", "-1s"),
        ("bob", "--live-grace", "2d"),
        ("nobody", "--live-grace", "1s"),
    ):
        refused = await cli(database_url, "route", "update", *args)
        assert refused.returncode != 0, refused.stdout
        assert "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) <= 3, refused.stderr


async def test_a_live_worker_gets_its_sessions_mail_before_another_worker(
    database_url: str, pool: Pool, worker: Daemon, spawns: Path, tmp_path: Path
) -> None:
    """A worker --live bob:s-bob answers bob's mail; stopped, it leaves, and the other worker answers."""
    live_spawns = tmp_path / "live-spawns"
    live = Daemon(
        database_url,
        "--command",
        f"sh -c 'echo $$ >> {live_spawns}; rev'",
        "--live",
        BOB,
        command="worker",
    )
    try:
        [holder] = await eventually(lambda: live_holders(pool), "the live worker", within_s=30)
        assert not holder.startswith("mcp:")
        for n in range(3):
            await enqueue(pool, mail_job(f"live-{n}", "abc"))
        for n in range(3):
            answered = await settled(pool, f"live-{n}")
            assert (answered["result_content"], answered["worker_id"]) == ("cba", holder)
        assert (spawned(live_spawns), spawned(spawns)) == (3, 0)
    finally:
        code, log = live.terminate()
    assert code == 0, log
    assert await live_holders(pool) == []
    await enqueue(pool, mail_job("after", "abc"))
    answered = await settled(pool, "after", within_s=15)
    assert answered["result_content"] == "ABC"
    assert spawned(spawns) == 1


@contextlib.contextmanager
def token_server(database_url: str, **env: str) -> Iterator[Daemon]:
    """``birddog mcp --http`` for the agents' tokens (no ``--as``), stopped by its pid."""
    server = Daemon(
        database_url,
        "--http",
        "--port",
        "0",
        command="mcp",
        BIRDDOG_JOB_LEASE_S=str(LEASE_S),
        **env,
    )
    try:
        yield server
    finally:
        code, log = server.terminate()
        assert code == 0, log


async def bobs_token(database_url: str) -> str:
    """A token for bob:s-bob (``birddog agent add``)."""
    added = await cli(database_url, "agent", "add", BOB)
    assert added.returncode == 0, added.stderr
    return token_of(added.stdout)


async def test_each_http_caller_is_live_while_its_mcp_session_lives(
    database_url: str, pool: Pool, worker: Daemon, spawns: Path
) -> None:
    """A token's caller: live from its first request, next_task first, the worker after the grace, gone on close."""
    token = await bobs_token(database_url)
    with token_server(database_url) as server:
        url = await server_url(server)
        assert await live_holders(pool) == []  # nobody has called yet
        async with http_session(url, token) as bob:
            [holder] = await eventually(lambda: live_holders(pool), "bob's caller live")
            assert holder.startswith("mcp:")
            await enqueue(pool, mail_job("first"))
            task, text, _ = await call(bob, "next_task", wait_s=30)
            assert task["job_id"] == "first", text
            _, text, is_error = await call(bob, "answer", job_id="first", content="done by bob")
            assert not is_error, text
            # Bob stays connected but takes nothing: the worker waits out the grace.
            await enqueue(pool, mail_job("second", "shout this"))
            answered = await settled(pool, "second")
            assert answered["worker_id"] != holder
            assert answered["started_at"] - answered["created_at"] >= timedelta(seconds=GRACE_S)
            assert await live_holders(pool) == [holder]
        # The client closed its session (DELETE): bob stops counting at once.
        await eventually(
            lambda: live_holders(pool),
            "bob's caller left",
            until=lambda holders: holders == [],
            within_s=5,
            every_s=0.1,
        )
        await enqueue(pool, mail_job("third", "now"))
        after = await settled(pool, "third")
    assert (await job(pool, "first"))["worker_id"] == holder
    assert after["result_content"] == "NOW"
    assert after["started_at"] - after["created_at"] < timedelta(seconds=GRACE_S)
    assert spawned(spawns) == 2


async def test_an_http_callers_session_that_expires_stops_counting(
    database_url: str, pool: Pool
) -> None:
    """A caller that initializes and goes silent: live until its idle session ends, then not."""
    token = await bobs_token(database_url)
    with token_server(database_url, BIRDDOG_MCP_SESSION_IDLE_S="2") as server:
        url = await server_url(server)
        async with http_client(token) as client:
            opened = await client.post(url, json=INITIALIZE, headers=ACCEPT)
            assert opened.status_code == 200, opened.text
            await eventually(lambda: live_holders(pool), "bob's caller live")
            await eventually(
                lambda: live_holders(pool),
                "bob's idle session ended and left",
                until=lambda holders: holders == [],
                within_s=15,
                every_s=0.2,
            )
