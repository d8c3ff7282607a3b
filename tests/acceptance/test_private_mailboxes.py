"""Mailboxes and jobs are private per agent: an agent's login sees its own, nothing else.

The deployment guide's two agents run exactly as written there (the shell block after
its marker); then each rule is tried from the agents' own logins, from a shared sender's
login (the issue's ``DATABASE_URL=<sender> birddog inbox alice --ack``) and from the
operators', which still see everything.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from birddog import AgentAddress, AgentWork, Job, Mail, Outcome, Reply, ReplyFacts, agent_job
from birddog.clock import SystemClock
from birddog.core.errors import StaleClaim, StoreUnavailable
from birddog.postgres.agents import AgentLogin, PostgresAgents
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.pool import Pool, create_pool
from tests.support import deliver_to_mailbox
from tests.support.cli import BIRDDOG, ROOT, cli, cli_env, drop_agent_logins

GUIDE = ROOT / "docs" / "deployment.md"
MARKER = "<!-- run by tests/acceptance/test_private_mailboxes.py -->"
DENIED = "42501"
CLOCK = SystemClock()

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
CAROL = AgentAddress(agent_id="carol", session_id="s-carol")


def guide_commands() -> list[str]:
    """The commands of the guide's two-agent block, continuation lines joined."""
    text = GUIDE.read_text(encoding="utf-8")
    block = text.split(MARKER, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture
async def roles(database_url: str) -> AsyncIterator[None]:
    """The least-privilege roles installed; every agent login made is dropped at the end."""
    done = await cli(database_url, "migrate", "--roles")
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        await drop_agent_logins(database_url)


def run_guide(database_url: str, tmp_path: Path) -> list[tuple[str, int, str, str]]:
    """Run the guide's block in one bash: each command's line, exit code, stdout and stderr."""
    commands = guide_commands()
    lines = []
    for number, command in enumerate(commands):
        out, err = tmp_path / f"{number}.out", tmp_path / f"{number}.err"
        code = re.sub(r"\s+#\s.*$", "", command)
        lines.append(f"{code} > {out} 2> {err}; echo $? > {tmp_path}/{number}.code")
    env = cli_env(database_url)
    env["PATH"] = f"{Path(BIRDDOG).parent}:{env.get('PATH', '')}"
    subprocess.run(  # noqa: S603 - bash running the guide's own commands
        ["bash", "-c", "\n".join(lines)],  # noqa: S607 - bash from PATH, as a reader runs it
        env=env,
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    return [
        (
            command,
            int((tmp_path / f"{n}.code").read_text()),
            (tmp_path / f"{n}.out").read_text(),
            (tmp_path / f"{n}.err").read_text(),
        )
        for n, command in enumerate(commands)
    ]


@pytest.mark.usefixtures("roles")
async def test_the_guides_two_agents_cannot_read_each_other(
    database_url: str, tmp_path: Path, pg_pool: Pool
) -> None:
    """As docs/deployment.md shows: alice reads her answer, bob neither reads nor acks it, nor sends as alice."""
    results = await asyncio.to_thread(run_guide, database_url, tmp_path)
    by_line: dict[str, list[tuple[int, str, str]]] = {}
    for line, code, out, err in results:
        by_line.setdefault(re.sub(r"\s+#\s.*$", "", line), []).append((code, out, err))
    failed = [(line, err) for line, code, _, err in results if code != 0]
    assert [line for line, _ in failed] == [
        line for line, _, _, _ in results if "'as alice'" in line
    ], failed
    assert "enqueues mail from itself only" in failed[0][1]
    alice_inbox = by_line["DATABASE_URL=$ALICE_URL birddog inbox alice"]
    assert [("HELLO BOB" in out) for _, out, _ in alice_inbox] == [True, True]
    [(_, bob_out, bob_err)] = by_line["DATABASE_URL=$BOB_URL birddog inbox alice --ack"]
    assert (bob_out, "no unread replies" in bob_err) == ("", True)
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.mailbox WHERE read_at IS NULL") == 1
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.agent_logins") == 1


@pytest.fixture
async def agent_pools(
    database_url: str, pg_pool: Pool, roles: None
) -> Callable[[AgentAddress], AgentLogin]:
    """Alice, bob and carol added with logins; ``login(address)`` is each one's login."""
    agents = PostgresAgents(pg_pool)
    made = {a.agent_id: await agents.add(a, login=True) for a in (ALICE, BOB, CAROL)}

    def login(address: AgentAddress) -> AgentLogin:
        found = made[address.agent_id].login
        assert found is not None
        return found

    return login


def question(job_id: str, *, sender: AgentAddress, to: AgentAddress) -> Job:
    """A mail from ``sender`` to ``to`` whose reply goes back to ``sender``."""
    mail = Mail(
        key=f"m-{job_id}", to=to, from_=sender, reply_to=[sender], content="hi", created_at=1
    )
    return agent_job(AgentWork(job_id=job_id, session_id=to.session_id, command_fact_id="c"), mail)


def reply_to_alice(key: str) -> Reply:
    """Bob's answer to alice's mail ``key``, as its mailbox delivery stores it."""
    return Reply(
        key=f"outbox:{key}:reply:0",
        in_reply_to=key,
        to=ALICE,
        from_=BOB,
        content="HELLO",
        created_at=1,
        reply=ReplyFacts(command_id="c", outcome=Outcome.COMPLETED),
    )


async def test_an_agents_login_reads_and_writes_only_its_own(
    database_url: str, pg_pool: Pool, agent_pools: Callable[[AgentAddress], AgentLogin]
) -> None:
    """Own mailbox and own jobs only; mail from itself only; claims and settles its own jobs; no claim tokens."""
    dsn = {a.agent_id: agent_pools(a).dsn(database_url) for a in (ALICE, BOB, CAROL)}
    pools = {agent: await create_pool(url, min_size=1, max_size=2) for agent, url in dsn.items()}
    try:
        async with pools["alice"].acquire() as conn:
            assert await enqueue_accepted_job(conn, question("q1", sender=ALICE, to=BOB))
            with pytest.raises(StoreUnavailable, match="InsufficientPrivilege"):
                await enqueue_accepted_job(conn, question("q2", sender=BOB, to=ALICE))
        seen = {
            agent: [r["job_id"] for r in await pool.fetch("SELECT job_id FROM birddog.jobs")]
            for agent, pool in pools.items()
        }
        assert seen == {"alice": ["q1"], "bob": ["q1"], "carol": []}
        # Only bob's login takes bob's job, and only bob's claim settles it.
        assert await PostgresJobs(pools["alice"], clock=CLOCK).claim(queues=["s-bob"]) is None
        with pytest.raises(StoreUnavailable, match="InsufficientPrivilege"):
            await PostgresJobs(pools["bob"], clock=CLOCK).claim()
        claimed = await PostgresJobs(pools["bob"], clock=CLOCK).claim(queues=["s-bob"])
        assert claimed is not None
        with pytest.raises(StaleClaim, match="not addressed to this agent"):
            await PostgresJobs(pools["alice"], clock=CLOCK).settle(
                job_id="q1", claim_token=claimed.claim_token, outcome="completed", content="x"
            )
        with pytest.raises(StaleClaim):
            await PostgresJobs(pools["alice"], clock=CLOCK).heartbeat(
                job_id="q1", claim_token=claimed.claim_token, lease_s=60
            )
        keys = await PostgresJobs(pools["bob"], clock=CLOCK).settle(
            job_id="q1", claim_token=claimed.claim_token, outcome="completed", content="HELLO"
        )
        assert keys == ["outbox:m-q1:reply:0"]
        mailboxes = {agent: PostgresMailbox(pool, clock=CLOCK) for agent, pool in pools.items()}
        assert [e.content for e in await mailboxes["alice"].read("alice")] == ["HELLO"]
        assert await mailboxes["bob"].read("alice") == []
        assert await mailboxes["bob"].answer("m-q1") is None
        assert await mailboxes["bob"].ack(["outbox:m-q1:reply:0"]) == []
        assert await mailboxes["alice"].ack(["outbox:m-q1:reply:0"]) == ["outbox:m-q1:reply:0"]
        for statement in (
            "SELECT claim_token FROM birddog.jobs",
            "SELECT secret FROM birddog.routes",
            "SELECT key FROM birddog.outbox",
            "UPDATE birddog.mailbox SET read_at = NULL",
            "INSERT INTO birddog.jobs (job_id, queue, lane, state, payload) "
            "VALUES ('x', 's-bob', 'default', 'running', '{}')",
            "SELECT * FROM birddog.agent_logins",
            "SELECT * FROM birddog.reap('lease_expired', '{}', '{}', '{}', '{}', now(), now(), "
            "'', '', 1, true)",
        ):
            async with pools["carol"].acquire() as conn:
                with pytest.raises(asyncpg.PostgresError) as refused:
                    await conn.execute(statement)
                assert refused.value.sqlstate == DENIED, statement
    finally:
        for pool in pools.values():
            await pool.close()


async def test_a_shared_senders_login_reads_only_what_it_sent(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """DATABASE_URL=<sender> birddog inbox alice --ack shows and acks none of alice's own mail; its own ask's reply it reads."""
    conn = await asyncpg.connect(logins["sender"])
    try:
        await enqueue_accepted_job(conn, question("by-sender", sender=CAROL, to=BOB))
    finally:
        await conn.close()
    async with pg_pool.acquire() as pooled:
        await enqueue_accepted_job(pooled, question("by-alice", sender=ALICE, to=BOB))
    await deliver_to_mailbox(pg_pool, reply_to_alice("m-by-alice"), at=datetime.now(UTC))
    carols = reply_to_alice("m-by-sender").model_copy(
        update={"key": "outbox:m-by-sender:reply:0", "to": CAROL}
    )
    await deliver_to_mailbox(pg_pool, carols, at=datetime.now(UTC))
    inbox = await cli(logins["sender"], "inbox", "alice", "--ack")
    assert (inbox.returncode, inbox.stdout) == (0, "")
    assert "no unread replies" in inbox.stderr
    unread = "SELECT count(*) FROM birddog.mailbox WHERE agent_id = 'alice' AND read_at IS NULL"
    assert await pg_pool.fetchval(unread) == 1
    sender = await create_pool(logins["sender"], min_size=1, max_size=1)
    try:
        jobs = [r["job_id"] for r in await sender.fetch("SELECT job_id FROM birddog.jobs")]
        assert jobs == ["by-sender"]
        own = await PostgresMailbox(sender, clock=CLOCK).answer("m-by-sender")
        assert own is not None
        assert own.content == "HELLO"
        assert await PostgresMailbox(sender, clock=CLOCK).answer("m-by-alice") is None
    finally:
        await sender.close()


async def test_operators_still_see_every_row(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """The daemon sees every mailbox row and job, the worker and the reader every job."""
    async with pg_pool.acquire() as pooled:
        await enqueue_accepted_job(pooled, question("j1", sender=ALICE, to=BOB))
    await deliver_to_mailbox(pg_pool, reply_to_alice("m-j1"), at=datetime.now(UTC))
    for kind, statement, rows in (
        ("daemon", "SELECT count(*) FROM birddog.mailbox", 1),
        ("daemon", "SELECT count(*) FROM birddog.jobs", 1),
        ("worker", "SELECT count(*) FROM birddog.jobs", 1),
        ("reader", "SELECT count(job_id) FROM birddog.jobs", 1),
    ):
        conn = await asyncpg.connect(logins[kind])
        try:
            assert await conn.fetchval(statement) == rows, (kind, statement)
        finally:
            await conn.close()
    status = await cli(logins["reader"], "status", "--json")
    assert status.returncode == 0, status.stderr
    listed = await cli(logins["daemon"], "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "j1" in listed.stdout


@pytest.mark.usefixtures("roles")
async def test_a_revoked_agent_can_no_longer_log_in(database_url: str, pg_pool: Pool) -> None:
    """Revoking an agent drops its database login; the printed DATABASE_URL connects no more."""
    added = await cli(database_url, "agent", "add", "dora", "--login")
    assert added.returncode == 0, added.stderr
    [url] = re.findall(r"^DATABASE_URL=(\S+)$", added.stdout, re.M)
    assert "passfile" not in url
    conn = await asyncpg.connect(url)
    await conn.close()
    revoked = await cli(database_url, "agent", "revoke", "dora")
    assert revoked.returncode == 0, revoked.stderr
    assert "dropped the database login bd_agent_dora_" in revoked.stdout
    with pytest.raises(
        (asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidPasswordError)
    ):
        await asyncpg.connect(url)
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.agent_logins") == 0
