"""Each role sees only its own secrets: claim tokens, process rows, the A2A server's writes.

Logged in as each role (``birddog migrate --roles``, a login per role, and agents' own
logins), the tests try what a hostile process with that login would: read another
claim's token and settle that job with an answer of its own, forge a drain daemon's row
or age, stop and take over another process's row so ``birddog status`` lies. Then the
legitimate paths run under the same logins.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator

import asyncpg
import pytest

from birddog import AgentAddress
from birddog.clock import SystemClock
from birddog.core.errors import StaleClaim
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool, create_pool
from tests.support import enqueue, job_row, make_job, outbox_rows
from tests.support.cli import as_login, cli, drop_agent_logins
from tests.support.logins import DENIED, refusal, value_as

CLOCK = SystemClock()
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
CAROL = AgentAddress(agent_id="carol", session_id="s-carol")

TOKEN_READS = (
    "SELECT claim_token FROM birddog.jobs",
    "SELECT * FROM birddog.jobs",
    "SELECT j FROM birddog.jobs j",
    "SELECT to_jsonb(j) FROM birddog.jobs j",
    "SELECT count(*) FROM birddog.jobs WHERE claim_token IS NOT NULL",
)
"""Every way a login might read (or test) a claim token through the table."""


@pytest.fixture
async def agents(
    database_url: str, logins: dict[str, str], pg_pool: Pool
) -> AsyncIterator[dict[str, str]]:
    """Bob and carol added with logins of their own (DSNs by agent), dropped at the end."""
    book = PostgresAgents(pg_pool)
    made: dict[str, str] = {}
    try:
        for address in (BOB, CAROL):
            login = (await book.add(address, login=True)).login
            assert login is not None
            made[address.agent_id] = login.dsn(database_url)
        yield made
    finally:
        await drop_agent_logins(database_url)


@pytest.fixture
async def second_worker(database_url: str, logins: dict[str, str]) -> AsyncIterator[str]:
    """Another worker's login (a member of birddog_worker), dropped at the end."""
    name, password = f"bdt_{secrets.token_hex(4)}_worker2", secrets.token_urlsafe(16)
    conn = await asyncpg.connect(database_url)
    try:
        # Test-made names and passwords: letters, digits, '_' and '-' only.
        await conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE birddog_worker")
        yield as_login(database_url, name, password)
    finally:
        await conn.execute(f"DROP ROLE IF EXISTS {name}")
        await conn.close()


@pytest.fixture
async def pools(
    logins: dict[str, str], agents: dict[str, str], second_worker: str
) -> AsyncIterator[dict[str, Pool]]:
    """A pool per login: the roles', the agents' (``bob``, ``carol``) and ``worker2``."""
    dsns = {**logins, **agents, "worker2": second_worker}
    made = {name: await create_pool(dsn, min_size=1, max_size=2) for name, dsn in dsns.items()}
    try:
        yield made
    finally:
        for pool in made.values():
            await pool.close()


# ---- claim tokens: only from claim, only to the claimer --------------------------------


async def test_no_login_reads_a_claim_token_from_the_table(
    logins: dict[str, str], agents: dict[str, str], pg_pool: Pool
) -> None:
    """Worker, sender, reader and agents' logins are refused the column in every spelling."""
    await enqueue(pg_pool, make_job("job-1"))
    claimed = await PostgresJobs(pg_pool, clock=CLOCK).claim(queues=["s-bob"])
    assert claimed is not None
    for who, dsn in {**logins, **agents}.items():
        if who in {"owner", "daemon"}:
            continue
        for statement in TOKEN_READS:
            assert await refusal(dsn, statement) == DENIED, (who, statement)
    # What the roles read of a job otherwise still reads (the sender sees no row it did
    # not send: row-level security).
    assert await value_as(logins["worker"], "SELECT state FROM birddog.jobs") == "running"
    assert await value_as(agents["bob"], "SELECT state FROM birddog.jobs") == "running"
    assert (
        await refusal(logins["sender"], "SELECT job_id, state, payload FROM birddog.jobs") is None
    )
    # The operators keep every column (the daemon role writes every row anyway).
    assert await refusal(logins["daemon"], TOKEN_READS[0]) is None


async def test_a_worker_settles_only_the_job_its_own_claim_holds(
    pools: dict[str, Pool], pg_pool: Pool
) -> None:
    """Another worker login's claim token, or a guessed one, settles nothing; the claimer's does."""
    await enqueue(pg_pool, make_job("job-1", session="s-1"), make_job("job-2", session="s-2"))
    mine = PostgresJobs(pools["worker"], clock=CLOCK)
    theirs = PostgresJobs(pools["worker2"], clock=CLOCK)
    held = await mine.claim(queues=["s-1"])
    other = await theirs.claim(queues=["s-2"])
    assert held is not None
    assert other is not None
    for token in (other.claim_token, "00000000-0000-4000-8000-000000000000"):
        with pytest.raises(StaleClaim):
            await theirs.settle(
                job_id="job-1", claim_token=token, outcome="completed", content="FORGED"
            )
        with pytest.raises(StaleClaim):
            await theirs.heartbeat(job_id="job-1", claim_token=token, lease_s=60)
    assert (await job_row(pg_pool, "job-1"))["state"] == "running"
    assert await outbox_rows(pg_pool) == []
    keys = await mine.settle(
        job_id="job-1", claim_token=held.claim_token, outcome="completed", content="the answer"
    )
    assert keys == ["outbox:mail-job-1:reply:0", "outbox:mail-job-1:reply:1"]
    contents = {row["reply"]["content"] for row in await outbox_rows(pg_pool)}
    assert contents == {"the answer"}


async def test_an_agents_job_is_settled_only_with_the_agents_own_claim(
    pools: dict[str, Pool], pg_pool: Pool
) -> None:
    """Bob's login claims bob's job; the worker's and carol's logins cannot settle it; bob's claim does."""
    await enqueue(pg_pool, make_job("job-1"))
    bob = PostgresJobs(pools["bob"], clock=CLOCK)
    held = await bob.claim(queues=["s-bob"])
    assert held is not None
    guessed = "00000000-0000-4000-8000-000000000000"
    for who in ("worker", "carol"):
        with pytest.raises(StaleClaim):
            await PostgresJobs(pools[who], clock=CLOCK).settle(
                job_id="job-1", claim_token=guessed, outcome="completed", content="FORGED"
            )
    assert (await job_row(pg_pool, "job-1"))["state"] == "running"
    assert await bob.settle(
        job_id="job-1", claim_token=held.claim_token, outcome="completed", content="bob's"
    )
    assert {row["reply"]["content"] for row in await outbox_rows(pg_pool)} == {"bob's"}


# ---- process rows: through the functions, each login its own ----------------------------

FORGED_ROWS = (
    "INSERT INTO birddog.daemons (daemon_id, kind, host, pid, started_at, seen_at) "
    "VALUES ('drain:fake:1', 'drain', 'fake', 1, now(), now())",
    "UPDATE birddog.daemons SET seen_at = now() - interval '1 hour'",
    "UPDATE birddog.daemons SET stopped_at = now()",
    "DELETE FROM birddog.daemons",
    "SELECT birddog.daemons_beat('drain:fake:1', 'drain', 'fake', 1)",
)
"""A fake drain, the real one aged, stopped or deleted: what the attack did, and more."""


async def test_no_worker_or_agent_login_forges_or_ages_a_process_row(
    pools: dict[str, Pool], logins: dict[str, str], agents: dict[str, str]
) -> None:
    """Direct writes and a drain row are refused; another login's row is neither beaten nor stopped."""
    drain = PostgresDaemons(pools["daemon"], kind="drain")
    await drain.seen()
    theirs = PostgresDaemons(pools["worker2"], kind="worker")
    await theirs.seen()
    before = await pools["daemon"].fetch("SELECT * FROM birddog.daemons ORDER BY daemon_id")
    for who, dsn in (("worker", logins["worker"]), ("bob", agents["bob"])):
        for statement in FORGED_ROWS:
            assert await refusal(dsn, statement) == DENIED, (who, statement)
        # Another login's rows: its id given, nothing changes.
        for row in (drain, theirs):
            beat = "SELECT birddog.daemons_beat($1, 'worker', 'fake', 1)"
            assert await value_as(dsn, beat, row.daemon_id) is False, who
            assert await value_as(dsn, "SELECT birddog.daemons_stop($1)", row.daemon_id) is False
    after = await pools["daemon"].fetch("SELECT * FROM birddog.daemons ORDER BY daemon_id")
    assert after == before


async def test_each_login_keeps_its_own_row_and_status_tells_the_truth(
    pools: dict[str, Pool], logins: dict[str, str]
) -> None:
    """The drain under the daemon login, workers under theirs: status shows them, a stop marks one."""
    drain = PostgresDaemons(pools["daemon"], kind="drain")
    worker = PostgresDaemons(pools["worker"], kind="worker")
    agents_worker = PostgresDaemons(pools["bob"], kind="worker")
    for row in (drain, worker, agents_worker):
        await row.seen()
    await worker.seen()  # a second beat refreshes the same row
    status = await cli(logins["reader"], "status", "--json")
    assert status.returncode == 0, status.stderr
    kinds = sorted(daemon["kind"] for daemon in json.loads(status.stdout)["daemons"])
    assert kinds == ["drain", "worker", "worker"]
    await worker.gone()
    logins_of = await pools["daemon"].fetch(
        "SELECT kind, login, stopped_at IS NOT NULL AS stopped FROM birddog.daemons "
        "ORDER BY kind, stopped"
    )
    assert [(r["kind"], r["stopped"]) for r in logins_of] == [
        ("drain", False),
        ("worker", False),
        ("worker", True),
    ]
    assert len({r["login"] for r in logins_of}) == 3
    status = await cli(logins["reader"], "status", "--json")
    kinds = sorted(daemon["kind"] for daemon in json.loads(status.stdout)["daemons"])
    assert kinds == ["drain", "worker"]


async def test_a_live_session_is_renewed_and_ended_only_by_the_login_that_announced_it(
    pools: dict[str, Pool], logins: dict[str, str], agents: dict[str, str]
) -> None:
    """Another worker's or agent's login cannot end or take over a live session; its own does both."""
    beat = "SELECT birddog.live_heartbeat('bob', 's-bob', 'mcp:h2', 5)"
    leave = "SELECT birddog.live_leave('bob', 's-bob', 'mcp:h2')"
    rows = "SELECT count(*) FROM birddog.live_sessions WHERE holder = 'mcp:h2'"
    assert await pools["worker2"].fetchval(beat) is not None
    for who, dsn in (("worker", logins["worker"]), ("bob", agents["bob"])):
        assert await value_as(dsn, leave) is False, who
        assert await refusal(dsn, beat) == DENIED, who
        assert await refusal(dsn, "DELETE FROM birddog.live_sessions") == DENIED, who
    assert await pools["daemon"].fetchval(rows) == 1
    assert await pools["worker2"].fetchval(beat) is not None
    assert await pools["worker2"].fetchval(leave) is True
    assert await pools["daemon"].fetchval(rows) == 0


# ---- birddog a2a: a role of its own ------------------------------------------------------

A2A_REFUSED = (
    "INSERT INTO birddog.routes (agent_id, url, secret, kind) "
    "VALUES ('a2a-push:x', 'http://10.0.0.1/', 's', 'a2a')",
    "UPDATE birddog.routes SET url = 'http://evil.example/'",
    "DELETE FROM birddog.routes",
    "SELECT url FROM birddog.routes",
    "SELECT secret FROM birddog.routes",
    "UPDATE birddog.jobs SET state = 'queued'",
    "INSERT INTO birddog.outbox (key) VALUES ('x')",
    "SELECT key FROM birddog.outbox",
    "SELECT key FROM birddog.mailbox",
    "UPDATE birddog.mailbox SET read_at = now()",
    "SELECT * FROM birddog.daemons",
    "SELECT * FROM birddog.agent_tokens",
    "SELECT * FROM birddog.cancel('job-1', '', now(), 10, true)",
    "SELECT * FROM birddog.claim(NULL, 1, now(), NULL, 1, now(), '', NULL, 1)",
)
"""What the A2A server's login is refused: direct writes, secrets, other processes' functions."""


async def test_the_a2a_login_writes_no_row_and_reads_no_secret(
    logins: dict[str, str], pg_pool: Pool
) -> None:
    """Direct writes, URLs and secrets, mailboxes and the operator's cancel are refused to birddog_a2a."""
    await pg_pool.execute(
        "INSERT INTO birddog.routes (agent_id, url, secret) "
        "VALUES ('bank', 'https://bank.example/inbox', 'whsec_c2VjcmV0')"
    )
    await enqueue(pg_pool, make_job("job-1"))
    a2a = logins["a2a"]
    for statement in (*A2A_REFUSED, *TOKEN_READS):
        assert await refusal(a2a, statement) == DENIED, statement
    # Its functions answer for push configs' routes and its callers' own mail only.
    push_route = "SELECT count(*) FROM birddog.a2a_push_route($1)"
    assert await value_as(a2a, push_route, "bank") == 0
    added = "SELECT count(*) FROM birddog.a2a_push_route_add($1, 'https://x.example/', 's')"
    assert await refusal(a2a, added, "bank") == "22023"  # invalid_parameter_value
    cancel = "SELECT decision FROM birddog.a2a_cancel('job-1', $1, 'x', 100, true)"
    # alice's mail, but not sent by this login: not there for it.
    assert await value_as(a2a, cancel, "alice") == "missing"
    assert (await job_row(pg_pool, "job-1"))["state"] == "queued"
    assert await value_as(a2a, "SELECT agent_id FROM birddog.routes") == "bank"
