"""The Sender on a real PostgreSQL behind a proxy the tests cut: spool, forward, order, refusals.

The pool reaches the test database through :class:`~tests.support.proxy.DatabaseProxy`;
``down()`` is the network (or the server) gone: a new connection is refused, an open one
reset. The spool is a real SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    AskTimedOut,
    Job,
    Mail,
    Outcome,
    Sender,
    StoreUnreachable,
    UnknownAgent,
    agent_job,
    open_sender,
)
from birddog.clock import SystemClock
from birddog.core.ask import ask_job_id
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool, acquire_within, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import answer_next_job, spool_file
from tests.support.proxy import DatabaseProxy, proxied

TARGET = "upper:s-upper"
ASKER = "asker:s-ask"


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[DatabaseProxy]:
    """The test database behind a proxy that is up."""
    async with proxied(database_url) as proxy:
        yield proxy


@pytest.fixture
async def sender(proxy: DatabaseProxy, pg_pool: Pool, tmp_path: Path) -> AsyncIterator[Sender]:
    """A sender whose pool goes through the proxy (made lazily), its spool in tmp_path."""
    await PostgresRoutes(pg_pool, cache_s=0, clock=SystemClock()).add("upper", kind="mailbox")
    pool = await create_pool(proxy.dsn, min_size=0, max_size=4)
    try:
        async with open_sender(
            pool, None, spool_path=tmp_path / "spool.db", forward_every_s=0, poll_s=0.2
        ) as sender:
            yield sender
    finally:
        await pool.close()


def cli_job(job_id: str, content: str, *, created_at: int) -> Job:
    """A job as ``birddog send --job-id`` makes it: alice to bob, replies to alice."""
    alice = AgentAddress(agent_id="alice", session_id="s-alice")
    mail = Mail(
        key=f"mail-{job_id}",
        to=AgentAddress(agent_id="bob", session_id="s-bob"),
        from_=alice,
        reply_to=[alice],
        content=content,
        created_at=created_at,
    )
    return agent_job(AgentWork(job_id=job_id, session_id="s-bob", command_fact_id="c"), mail)


async def stored(pool: Pool) -> list[dict[str, object]]:
    """Every job's mail, in claim order (created_at, then job id)."""
    rows = await pool.fetch(
        "SELECT payload::text AS payload FROM birddog.jobs ORDER BY created_at, job_id"
    )
    return [json.loads(row["payload"])["mail"] for row in rows]


async def test_the_pool_made_while_away_reports_unreachable_not_busy(proxy: DatabaseProxy) -> None:
    """With nothing listening, acquiring a lazily made pool's connection is StoreUnreachable."""
    await proxy.down()
    pool = await create_pool(proxy.dsn, min_size=0, max_size=2)
    try:
        with pytest.raises(StoreUnreachable, match="connection refused"):
            async with acquire_within(pool, 5.0, "send"):
                pass
    finally:
        await pool.close()


async def test_a_send_while_unreachable_is_spooled_and_forwarded_once(
    sender: Sender, proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Spooled only when unreachable; forwarded once when the database is back; then nothing."""
    await proxy.down()
    sent = await sender.send(to=TARGET, from_=ASKER, content="while away", key="k-away")
    assert sent.spooled == "database unreachable"
    assert (await spool_file(sender).status()).mails == 1
    assert await stored(pg_pool) == []
    await proxy.up()
    report = await sender.forward()
    assert report.forwarded == ["k-away"]
    assert [mail["content"] for mail in await stored(pg_pool)] == ["while away"]
    assert (await sender.forward()).forwarded == []
    assert (await spool_file(sender).status()).mails == 0


async def test_a_connection_reset_under_a_pooled_connection_is_written_once(
    sender: Sender, proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """A send over a pooled connection the network reset goes through once, unspooled."""
    assert not (await sender.send(to=TARGET, from_=ASKER, content="one", key="k-1")).spooled
    await proxy.down()
    await proxy.up()
    sent = await sender.send(to=TARGET, from_=ASKER, content="two", key="k-2")
    assert not sent.spooled
    assert [mail["key"] for mail in await stored(pg_pool)] == ["k-1", "k-2"]


async def test_mail_of_one_lane_keeps_its_order_across_the_spool(
    sender: Sender, proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Mail spooled while away, then a send once back: the spooled go first, in order."""
    await proxy.down()
    for index in range(3):
        sent = await sender.send(to=TARGET, from_=ASKER, content=f"{index}", key=f"k-{index}")
        assert sent.spooled
    await proxy.up()
    last = await sender.send(to=TARGET, from_=ASKER, content="3", key="k-3")
    assert not last.spooled
    assert [mail["key"] for mail in await stored(pg_pool)] == ["k-0", "k-1", "k-2", "k-3"]
    assert (await spool_file(sender).status()).mails == 0


async def test_a_job_id_replayed_with_other_fields_is_quarantined_with_the_reason(
    sender: Sender, proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Spooled while away, refused once forwarded: quarantined with the reason, never retried."""
    first = await sender.enqueue(cli_job("job-x", "one", created_at=1), keep_stored_time=True)
    assert not first.spooled
    await proxy.down()
    again = await sender.enqueue(cli_job("job-x", "two", created_at=2), keep_stored_time=True)
    assert again.spooled
    await proxy.up()
    report = await sender.forward()
    assert "already exists with a different payload" in report.quarantined["mail-job-x"]
    assert [mail["content"] for mail in await stored(pg_pool)] == ["one"]
    status = await spool_file(sender).status()
    assert (status.mails, status.quarantined) == (0, 1)


async def test_a_retried_send_spooled_while_away_is_a_replay_when_forwarded(
    sender: Sender, proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """An unpinned send retried while away takes the stored createdAt when forwarded: a replay."""
    assert not (
        await sender.enqueue(cli_job("job-r", "same", created_at=10), keep_stored_time=True)
    ).spooled
    await proxy.down()
    retried = await sender.enqueue(cli_job("job-r", "same", created_at=99), keep_stored_time=True)
    assert retried.spooled
    await proxy.up()
    report = await sender.forward()
    assert report.forwarded == ["mail-job-r"]
    assert report.quarantined == {}
    assert [mail["createdAt"] for mail in await stored(pg_pool)] == [10]


async def test_a_spooled_ask_is_forwarded_by_its_wait_and_answered(
    sender: Sender, proxy: DatabaseProxy, pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """An ask spooled while away waits on; once back, the wait forwards it and gets the answer."""
    await proxy.down()
    asked = await sender.send_ask(to=TARGET, from_=ASKER, content="hello", key="k-ask")
    assert asked.spooled
    waiting = asyncio.create_task(sender.wait_for_answer(asked, timeout_s=60))
    await asyncio.sleep(0)  # the wait begins while the database is away
    await proxy.up()
    job_id = await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HELLO")
    assert job_id == ask_job_id("k-ask")
    assert await asyncio.wait_for(waiting, 60) == "HELLO"
    assert (await spool_file(sender).status()).mails == 0


async def test_a_spooled_ask_whose_database_stays_away_times_out_naming_the_key(
    sender: Sender, proxy: DatabaseProxy
) -> None:
    """Away for the whole wait: AskTimedOut naming the key, saying the mail is still spooled."""
    await proxy.down()
    with pytest.raises(AskTimedOut) as timed_out:
        await sender.ask(to=TARGET, from_=ASKER, content="anyone?", key="k-late", timeout_s=1.0)
    assert timed_out.value.key == "k-late"
    assert "still in the local spool" in str(timed_out.value)
    assert "within 1 s" in str(timed_out.value)


async def test_a_spooled_ask_to_an_unknown_agent_fails_its_wait_with_the_refusal(
    sender: Sender, proxy: DatabaseProxy
) -> None:
    """The refusal the send would have raised comes from the wait that forwards it."""
    await proxy.down()
    asked = await sender.send_ask(to="nobody:s-none", from_=ASKER, content="hi?", key="k-nobody")
    assert asked.spooled
    await proxy.up()
    with pytest.raises(UnknownAgent):
        await sender.wait_for_answer(asked, timeout_s=30)
    assert (await spool_file(sender).status()).quarantined == 1


async def test_a_send_with_no_time_to_wait_is_never_spooled_while_the_database_is_up(
    proxy: DatabaseProxy, pg_pool: Pool, tmp_path: Path
) -> None:
    """`ask --timeout 0` on a fresh pool: the connection still opening is not "unreachable"."""
    await PostgresRoutes(pg_pool, cache_s=0, clock=SystemClock()).add("upper", kind="mailbox")
    for attempt in range(20):
        pool = await create_pool(proxy.dsn, min_size=0, max_size=2)
        try:
            async with open_sender(
                pool, None, spool_path=tmp_path / "spool.db", forward_every_s=0
            ) as sender:
                asked = await sender.send_ask(
                    to=TARGET, from_=ASKER, content=f"q{attempt}", timeout_s=0
                )
                assert asked.spooled is None, f"attempt {attempt}: spooled ({asked.spooled})"
        finally:
            await pool.close()
    assert len(await stored(pg_pool)) == 20
    assert not (tmp_path / "spool.db").exists()
