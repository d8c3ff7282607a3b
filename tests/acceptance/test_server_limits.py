"""The write functions bound their callers by the server's limits, never the caller's own.

Tried by SQL from the least-privilege role logins (``birddog migrate --roles``), as an
attacker with a login would call the functions: a 20 MiB mail, a thousand reply
addresses, priority 32767 and a ``created_at`` 23 hours back, a lease to 9999-12-31 and a
30 MiB settlement with a content limit of its own choosing. Each is refused or clamped;
the same calls within the limits still work, and the owner changes the limits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from birddog import AgentAddress, Job
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.pool import Pool
from tests.support import make_job

MiB = 1024 * 1024
FOREVER = datetime(9999, 12, 31, tzinfo=UTC)
ENQUEUE = (
    "SELECT * FROM birddog.enqueue($1, $2, 'default', $3::smallint, $4, NULL, $5, NULL, false)"
)
CLAIM = (
    "SELECT job_id, claim_token, lease_expires_at "
    "FROM birddog.claim(ARRAY[$1::text], 1, $2, 'w-attacker', 1, now(), 'birddog:')"
)
SETTLE = (
    "SELECT decision, outcome, cause, diagnostic, keys FROM birddog.settle("
    "$1, $2, 'result', 'completed', $3, $4, $4, NULL, now(), $5, NULL, false)"
)


def with_mail(job: Job, **changes: object) -> Job:
    """``job`` with its mail's fields changed (by their JSON names)."""
    mail = job.payload["mail"]
    assert isinstance(mail, dict)
    return job.model_copy(update={"payload": {**job.payload, "mail": {**mail, **changes}}})


async def enqueue(
    conn: asyncpg.Connection, job: Job, *, priority: int = 0, created_at: datetime | None = None
) -> None:
    """Call ``birddog.enqueue`` as the login of ``conn`` does, by SQL."""
    await conn.fetch(ENQUEUE, job.job_id, job.queue, priority, json.dumps(job.payload), created_at)


@pytest.fixture
async def connect(logins: dict[str, str]) -> AsyncIterator[dict[str, asyncpg.Connection]]:
    """One connection per role login, by kind."""
    conns = {kind: await asyncpg.connect(url) for kind, url in logins.items()}
    try:
        yield conns
    finally:
        for conn in conns.values():
            await conn.close()


async def test_sizes_and_the_reply_count_are_the_servers(
    pg_pool: Pool, connect: dict[str, asyncpg.Connection]
) -> None:
    """A 20 MiB mail and 1000 replyTo are refused with a clear error; within them, accepted."""
    sender = connect["sender"]
    huge = with_mail(make_job("huge"), content="x" * (20 * MiB))
    with pytest.raises(
        asyncpg.ProgramLimitExceededError,
        match=r"the mail content is 20 MiB; the server's limit is 1 MiB",
    ):
        await enqueue(sender, huge)
    crowd = [{"agentId": f"a{n}", "sessionId": "s"} for n in range(1000)]
    with pytest.raises(
        asyncpg.ProgramLimitExceededError, match="1000 replyTo addresses; the server's limit is 100"
    ):
        await enqueue(sender, with_mail(make_job("crowd"), replyTo=crowd))
    await enqueue(sender, with_mail(make_job("fine"), content="y" * MiB, replyTo=crowd[:100]))
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 1
    # The owner sets the limits; the next call is bound by them.
    await pg_pool.execute("UPDATE birddog.limits SET max_content_bytes = 10, max_reply_to = 1")
    with pytest.raises(asyncpg.ProgramLimitExceededError, match="limit is 10 bytes"):
        await enqueue(sender, with_mail(make_job("eleven"), content="x" * 11))
    # Operators are not bound (they may write the rows directly anyway).
    async with pg_pool.acquire() as owner:
        await enqueue(owner, with_mail(make_job("owners"), content="x" * 11))  # type: ignore[arg-type]


async def test_priority_and_age_are_clamped(
    pg_pool: Pool, connect: dict[str, asyncpg.Connection]
) -> None:
    """Priority 32767 is stored as 100, a created_at 23 h back as at most five minutes back."""
    long_ago = datetime.now(UTC) - timedelta(hours=23)
    await enqueue(connect["sender"], make_job("squat"), priority=32767, created_at=long_ago)
    await enqueue(connect["sender"], make_job("later"), priority=-32768, created_at=FOREVER)
    rows = {
        r["job_id"]: r
        for r in await pg_pool.fetch(
            "SELECT job_id, priority, now() - created_at AS age FROM birddog.jobs"
        )
    }
    assert (rows["squat"]["priority"], rows["later"]["priority"]) == (100, -100)
    assert timedelta(0) <= rows["squat"]["age"] <= timedelta(minutes=6)
    assert rows["later"]["age"] >= timedelta(0)
    # A replay of the same call is still a replay: it compares the clamped priority.
    await enqueue(connect["sender"], make_job("squat"), priority=32767, created_at=long_ago)


async def test_a_lease_is_at_most_the_servers_and_a_huge_result_settles_failed(
    pg_pool: Pool, connect: dict[str, asyncpg.Connection]
) -> None:
    """A 9999-12-31 lease is an hour from now, claim and heartbeat; 30 MiB settles failed."""
    await enqueue(connect["sender"], make_job("long"))
    worker = connect["worker"]
    [claimed] = await worker.fetch(CLAIM, "s-bob", FOREVER)
    assert claimed["lease_expires_at"] <= datetime.now(UTC) + timedelta(hours=1, seconds=5)
    assert (
        await worker.fetchval(
            "SELECT birddog.heartbeat($1, $2, $3)", "long", claimed["claim_token"], FOREVER
        )
        is False
    )
    lease = await pg_pool.fetchval("SELECT lease_expires_at FROM birddog.jobs")
    assert lease <= datetime.now(UTC) + timedelta(hours=1, seconds=5)
    [settled] = await worker.fetch(
        SETTLE, "long", claimed["claim_token"], "x" * (30 * MiB), "d" * 5000, 2**31 - 1
    )
    assert (settled["decision"], settled["outcome"], settled["cause"]) == (
        "settle",
        "failed",
        "unstorable_result",
    )
    assert settled["diagnostic"] == "handler returned 30 MiB; the limit is 1 MiB"
    sizes = await pg_pool.fetchrow(
        "SELECT octet_length(result_content) AS content, "
        "(SELECT max(octet_length(reply::text)) FROM birddog.outbox) AS reply FROM birddog.jobs"
    )
    assert sizes is not None
    assert (sizes["content"], sizes["reply"] < 4096) == (0, True)


async def test_within_the_limits_an_agents_login_works_as_before(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """Bob's own login claims its job for a minute and settles it with its answer."""
    bob = AgentAddress(agent_id="bob", session_id="s-bob")
    made = await PostgresAgents(pg_pool).add(bob, login=True)
    assert made.login is not None
    async with pg_pool.acquire() as owner:
        await enqueue(owner, make_job("ask-bob"))  # type: ignore[arg-type]
    conn = await asyncpg.connect(made.login.dsn(database_url))
    try:
        minute = datetime.now(UTC) + timedelta(minutes=1)
        [claimed] = await conn.fetch(CLAIM, "s-bob", minute)
        assert claimed["lease_expires_at"] == minute
        [settled] = await conn.fetch(SETTLE, "ask-bob", claimed["claim_token"], "HELLO", None, MiB)
        assert (settled["decision"], settled["outcome"]) == ("settle", "completed")
        assert len(settled["keys"]) == 2
    finally:
        await conn.close()
        await conn_drop_logins(pg_pool)


async def conn_drop_logins(pg_pool: Pool) -> None:
    """Drop the agent logins this test made (roles outlive the test's database)."""
    for row in await pg_pool.fetch("SELECT login FROM birddog.agent_logins"):
        await pg_pool.execute(f'DROP ROLE IF EXISTS "{row["login"]}"')


async def test_an_a2a_cancel_is_bound_by_the_servers_content_limit(
    pg_pool: Pool, connect: dict[str, asyncpg.Connection]
) -> None:
    """The A2A login's cancel with 3 MiB of content and its own huge limit: replies of 1 MiB."""
    a2a = connect["a2a"]
    await enqueue(a2a, make_job("cancel-me"))
    [cancelled] = await a2a.fetch(
        "SELECT decision, outcome FROM birddog.a2a_cancel($1, 'alice', $2, $3, false)",
        "cancel-me",
        "x" * (3 * MiB),
        2**31 - 1,
    )
    assert (cancelled["decision"], cancelled["outcome"]) == ("settle", "cancelled")
    largest = await pg_pool.fetchval("SELECT max(octet_length(reply::text)) FROM birddog.outbox")
    # The cancel's content is cut to the server's limit (a reply's envelope beside it).
    assert largest is not None
    assert MiB < largest < MiB + 4096, largest
