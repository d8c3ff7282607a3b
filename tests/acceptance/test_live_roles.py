"""Live sessions under the least-privilege roles: who may announce which session.

A live session holds its agent's interactive mail back from every worker for the route's
grace, so announcing one is a right over that agent's mail: an agent's own login
announces and ends its own agent's sessions only (another agent's would be a way to keep
that agent's mail from its workers), the worker role announces for ``worker --live`` (and
the MCP server, whose login is a worker's), the sender and the reader announce nothing,
and the reader sees who is live in ``birddog status`` as metadata only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from birddog import AgentAddress, AgentWork, Job, Mail, agent_job
from birddog.clock import SystemClock
from birddog.core.errors import StoreRefused
from birddog.postgres.agents import AgentLogin, PostgresAgents
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.live import PostgresLiveSessions
from birddog.postgres.pool import Pool, create_pool
from tests.support import enqueue, eventually
from tests.support.cli import Daemon, cli, drop_agent_logins

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def task_for(job_id: str, to: AgentAddress, *, sender: AgentAddress) -> Job:
    """A task from ``sender`` to ``to``'s session, its reply back to ``sender``."""
    mail = Mail(
        key=f"m-{job_id}", to=to, from_=sender, reply_to=[sender], content="hi", created_at=1
    )
    work = AgentWork(job_id=job_id, session_id=to.session_id, command_fact_id=job_id)
    return agent_job(work, mail)


@pytest.fixture
async def agent_logins(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> AsyncIterator[Callable[[AgentAddress], AgentLogin]]:
    """Alice and bob added with logins of their own (dropped at the end)."""
    del logins  # the roles installed first
    agents = PostgresAgents(pg_pool)
    made = {a.agent_id: await agents.add(a, login=True) for a in (ALICE, BOB)}

    def login(address: AgentAddress) -> AgentLogin:
        found = made[address.agent_id].login
        assert found is not None
        return found

    try:
        yield login
    finally:
        await drop_agent_logins(database_url)


async def live_rows(pool: Pool) -> list[tuple[str, str, str]]:
    """Every live session that counts: (agent, session, holder)."""
    rows = await pool.fetch(
        "SELECT agent_id, session, holder FROM birddog.live_sessions "
        "WHERE expires_at > now() ORDER BY 1, 2, 3"
    )
    return [(row["agent_id"], row["session"], row["holder"]) for row in rows]


async def test_an_agents_login_announces_and_ends_its_own_sessions_only(
    database_url: str,
    pg_pool: Pool,
    logins: dict[str, str],
    agent_logins: Callable[[AgentAddress], AgentLogin],
) -> None:
    """Bob's login: bob's session yes; alice's neither announced nor ended, her mail not held."""
    pools = {
        a.agent_id: await create_pool(agent_logins(a).dsn(database_url), max_size=2)
        for a in (ALICE, BOB)
    }
    worker_pool = await create_pool(logins["worker"], max_size=2)
    try:
        bob = PostgresLiveSessions(pools["bob"])
        alice = PostgresLiveSessions(pools["alice"])
        assert await bob.beat(agent_id="bob", session="s-bob", holder="mcp:b", ttl_s=5) > 0
        with pytest.raises(StoreRefused, match="InsufficientPrivilege"):
            await bob.beat(agent_id="alice", session="s-alice", holder="mcp:b", ttl_s=5)
        assert await live_rows(pg_pool) == [("bob", "s-bob", "mcp:b")]
        # Alice's mail is not held back by bob's refused announce: a worker takes it now.
        await enqueue(pg_pool, task_for("for-alice", ALICE, sender=BOB))
        jobs = PostgresJobs(worker_pool, clock=SystemClock())
        claimed = await jobs.claim(queues=["s-alice"], worker_id="w-1")
        assert claimed is not None
        assert claimed.job.job_id == "for-alice"
        # Alice's own session, announced by her login, is hers to end, never bob's.
        await alice.beat(agent_id="alice", session="s-alice", holder="mcp:a", ttl_s=5)
        with pytest.raises(StoreRefused, match="InsufficientPrivilege"):
            await bob.leave(agent_id="alice", session="s-alice", holder="mcp:a")
        assert ("alice", "s-alice", "mcp:a") in await live_rows(pg_pool)
        assert await alice.leave(agent_id="alice", session="s-alice", holder="mcp:a")
        assert await bob.leave(agent_id="bob", session="s-bob", holder="mcp:b")
        assert await live_rows(pg_pool) == []
    finally:
        for pool in (*pools.values(), worker_pool):
            await pool.close()


async def test_the_sender_and_the_reader_announce_nothing(
    pg_pool: Pool, logins: dict[str, str]
) -> None:
    """A shared sender's login and the reader's: every announce and leave is refused."""
    for kind in ("sender", "reader"):
        pool = await create_pool(logins[kind], max_size=1)
        try:
            live = PostgresLiveSessions(pool)
            with pytest.raises(StoreRefused, match="InsufficientPrivilege"):
                await live.beat(agent_id="bob", session="s-bob", holder=kind, ttl_s=5)
            with pytest.raises(StoreRefused, match="InsufficientPrivilege"):
                await live.leave(agent_id="bob", session="s-bob", holder=kind)
        finally:
            await pool.close()
    assert await live_rows(pg_pool) == []


async def test_worker_live_runs_under_the_worker_role_and_the_reader_sees_it_in_status(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """A worker --live bob:s-bob as the worker login: live, answers, leaves; status as the reader lists it."""
    live = Daemon(
        logins["worker"],
        "--handler",
        "tests.acceptance.handlers:echo",
        "--live",
        f"{BOB.agent_id}:{BOB.session_id}",
        command="worker",
    )
    try:
        [(agent, session, holder)] = await eventually(
            lambda: live_rows(pg_pool), "the live worker's session", within_s=30
        )
        assert (agent, session) == ("bob", "s-bob")
        shown = await cli(logins["reader"], "status", "--json")
        assert shown.returncode == 0, shown.stderr
        [row] = json.loads(shown.stdout)["live_sessions"]
        assert set(row) == {"agent_id", "session", "holder", "started_at", "expires_at"}
        assert (row["agent_id"], row["session"], row["holder"]) == ("bob", "s-bob", holder)
        table = await cli(logins["reader"], "status")
        assert "live sessions" in table.stdout
        assert holder in table.stdout
        await enqueue(pg_pool, task_for("for-bob", BOB, sender=ALICE))
        await eventually(
            lambda: pg_pool.fetchrow(
                "SELECT state, worker_id FROM birddog.jobs WHERE job_id = 'for-bob'"
            ),
            "bob's task answered by the live worker",
            until=lambda found: found is not None and tuple(found) == ("settled", holder),
            within_s=30,
        )
    finally:
        code, log = live.terminate()
    assert code == 0, log
    assert await live_rows(pg_pool) == []
