"""The reading side of mailbox routes: read, ack, wait and follow on real PostgreSQL.

Rows are put into ``birddog.mailbox`` the way a mailbox delivery writes them (with its
NOTIFY), so these tests hold whatever writes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from birddog import AgentAddress, Outcome, Reply, ReplyFacts, reply_key
from birddog.postgres.mailbox import MailboxEntry, PostgresMailbox
from birddog.postgres.pool import Pool, create_pool
from birddog.testing import FrozenClock
from tests.support import SENDER, at, deliver_to_mailbox, eventually, mailbox_on, until_listening


def answer(
    mail_key: str,
    *,
    agent: str = "alice",
    session: str = "s-1",
    index: int = 0,
    outcome: Outcome = Outcome.COMPLETED,
    content: str = "done",
    diagnostic: str | None = None,
) -> Reply:
    return Reply(
        key=reply_key(mail_key, index),
        in_reply_to=mail_key,
        to=AgentAddress(agent_id=agent, session_id=session),
        from_=SENDER,
        content=content,
        created_at=1_767_225_600_000,
        reply=ReplyFacts(command_id=f"cmd-{mail_key}", outcome=outcome, diagnostic=diagnostic),
    )


@pytest.fixture
async def mailbox(pg_pool: Pool, database_url: str) -> AsyncIterator[PostgresMailbox]:
    async with mailbox_on(pg_pool, database_url, clock=FrozenClock(at(100))) as mailbox:
        yield mailbox


def keys(entries: list[MailboxEntry]) -> list[str]:
    return [entry.key for entry in entries]


async def test_read_lists_unread_replies_oldest_first(
    pg_pool: Pool, mailbox: PostgresMailbox
) -> None:
    """Reading returns an agent's unread replies in delivery order, with content and facts."""
    await deliver_to_mailbox(pg_pool, answer("m-2", content="second"), at=at(2))
    await deliver_to_mailbox(
        pg_pool,
        answer("m-1", outcome=Outcome.FAILED, content="", diagnostic="exit status 3: boom"),
        at=at(1),
    )
    await deliver_to_mailbox(pg_pool, answer("m-3", agent="bob"), at=at(0))
    entries = await mailbox.read("alice")
    assert keys(entries) == [reply_key("m-1", 0), reply_key("m-2", 0)]
    failed, done = entries
    assert (failed.outcome, failed.diagnostic, failed.in_reply_to) == (
        Outcome.FAILED,
        "exit status 3: boom",
        "m-1",
    )
    assert (done.outcome, done.content, done.diagnostic, done.sender) == (
        Outcome.COMPLETED,
        "second",
        None,
        SENDER,
    )


async def test_read_filters_by_session_and_limits(pg_pool: Pool, mailbox: PostgresMailbox) -> None:
    """A session narrows the listing to it; limit caps it."""
    for i, session in enumerate(["s-1", "s-2", "s-1"]):
        await deliver_to_mailbox(pg_pool, answer(f"m-{i}", session=session), at=at(i))
    assert keys(await mailbox.read("alice", "s-2")) == [reply_key("m-1", 0)]
    assert keys(await mailbox.read("alice", "s-1", limit=1)) == [reply_key("m-0", 0)]
    assert await mailbox.read("nobody") == []


async def test_ack_marks_read_once(pg_pool: Pool, mailbox: PostgresMailbox) -> None:
    """Acknowledging hides replies from read, stamps read_at, and reports only what was unread."""
    for i in range(3):
        await deliver_to_mailbox(pg_pool, answer(f"m-{i}"), at=at(i))
    first = reply_key("m-0", 0)
    assert await mailbox.ack([first, "no-such-key"]) == [first]
    assert await mailbox.ack([first]) == []
    assert keys(await mailbox.read("alice")) == [reply_key("m-1", 0), reply_key("m-2", 0)]
    read_at = await pg_pool.fetchval("SELECT read_at FROM birddog.mailbox WHERE key = $1", first)
    assert read_at == at(100)
    assert await mailbox.ack([]) == []


async def test_an_ack_commits_without_waiting_for_the_wal_flush(
    pg_pool: Pool, database_url: str
) -> None:
    """birddog.ack turns synchronous_commit off for its own transaction only."""
    await deliver_to_mailbox(pg_pool, answer("m-1"), at=at(1))
    key = reply_key("m-1", 0)
    # The tests' server runs without flushes: this connection asks for them.
    conn = await asyncpg.connect(database_url, server_settings={"synchronous_commit": "on"})
    try:
        async with conn.transaction():
            assert await conn.fetchval("SELECT current_setting('synchronous_commit')") == "on"
            acked = await conn.fetchval("SELECT count(*) FROM birddog.ack($1, now())", [key])
            assert acked == 1
            # Past the function's own SET clause (search_path): it lasts until the commit.
            assert await conn.fetchval("SELECT current_setting('synchronous_commit')") == "off"
        assert await conn.fetchval("SELECT current_setting('synchronous_commit')") == "on"
    finally:
        await conn.close()


async def test_wait_returns_a_reply_already_there_even_when_read(
    pg_pool: Pool, mailbox: PostgresMailbox
) -> None:
    """A reply delivered (and even read) before the wait is returned at once."""
    await deliver_to_mailbox(pg_pool, answer("m-1", content="early"), at=at(1))
    await mailbox.ack([reply_key("m-1", 0)])
    found = await mailbox.wait("m-1", timeout_s=0)
    assert found is not None
    assert (found.content, found.read_at) == ("early", at(100))


async def test_wait_wakes_on_the_notification(pg_pool: Pool, database_url: str) -> None:
    """With a poll far beyond the timeout, only the NOTIFY can end the wait with the reply."""
    async with mailbox_on(pg_pool, database_url, poll_s=600) as mailbox:
        waiting = asyncio.create_task(mailbox.wait("m-1", timeout_s=30))
        await until_listening(pg_pool)
        await deliver_to_mailbox(pg_pool, answer("m-1", content="pushed"), at=at(1))
        found = await asyncio.wait_for(waiting, 60)
    assert found is not None
    assert found.content == "pushed"


async def test_wait_polls_when_no_notification_comes(pg_pool: Pool, database_url: str) -> None:
    """A delivery whose notification never arrives is still found by the poll backstop."""
    async with mailbox_on(pg_pool, database_url, poll_s=0.05) as mailbox:
        waiting = asyncio.create_task(mailbox.wait("m-1", timeout_s=30))
        await until_listening(pg_pool)
        await deliver_to_mailbox(pg_pool, answer("m-1"), at=at(1), notify=False)
        found = await asyncio.wait_for(waiting, 60)
    assert found is not None
    assert found.key == reply_key("m-1", 0)


async def test_wait_times_out_with_none(pg_pool: Pool, database_url: str) -> None:
    """No reply within the timeout is None; the listening connection is not a pooled one."""
    async with mailbox_on(pg_pool, database_url, poll_s=0.05) as mailbox:
        await deliver_to_mailbox(pg_pool, answer("other"), at=at(1))
        assert await mailbox.wait("m-1", timeout_s=0.2) is None
        await until_listening(pg_pool)
        assert mailbox.notices.connected
    assert pg_pool.get_size() - pg_pool.get_idle_size() == 0


async def test_a_wait_only_answers_its_owner(pg_pool: Pool, database_url: str) -> None:
    """With an owner, a reply to the same mail key in another session's mailbox does not count."""
    owner = AgentAddress(agent_id="alice", session_id="s-2")
    async with mailbox_on(pg_pool, database_url, poll_s=0.05) as mailbox:
        await deliver_to_mailbox(pg_pool, answer("m-1", session="s-1"), at=at(1))
        assert await mailbox.wait("m-1", timeout_s=0.2, owner=owner) is None
        await deliver_to_mailbox(pg_pool, answer("m-1", session="s-2", index=1), at=at(2))
        found = await mailbox.wait("m-1", timeout_s=5, owner=owner)
    assert found is not None
    assert (found.key, found.session_id) == (reply_key("m-1", 1), "s-2")


async def test_follow_yields_each_new_reply_once(pg_pool: Pool, mailbox: PostgresMailbox) -> None:
    """Following streams what is unread, then each later delivery once, until stopped."""
    await deliver_to_mailbox(pg_pool, answer("m-0"), at=at(0))
    stop = asyncio.Event()
    batches: asyncio.Queue[list[MailboxEntry]] = asyncio.Queue()

    async def collect() -> None:
        async for batch in mailbox.follow("alice", stop=stop):
            await batches.put(batch)

    following = asyncio.create_task(collect())
    assert keys(await asyncio.wait_for(batches.get(), 30)) == [reply_key("m-0", 0)]
    await deliver_to_mailbox(pg_pool, answer("m-1"), at=at(1))
    await deliver_to_mailbox(pg_pool, answer("m-2", agent="bob"), at=at(2))
    assert keys(await asyncio.wait_for(batches.get(), 30)) == [reply_key("m-1", 0)]
    # A delivery stamped earlier than one already seen (a slower parallel commit) still shows.
    await deliver_to_mailbox(pg_pool, answer("m-late"), at=at(0.5))
    assert keys(await asyncio.wait_for(batches.get(), 30)) == [reply_key("m-late", 0)]
    stop.set()
    await asyncio.wait_for(following, 30)
    assert batches.empty()


async def test_an_unreadable_row_is_listed_with_its_problem(
    pg_pool: Pool, mailbox: PostgresMailbox
) -> None:
    """A stored reply this version cannot read is listed with why, and hides nothing else."""
    await deliver_to_mailbox(pg_pool, answer("m-bad"), at=at(0), raw='{"key": 7}')
    await deliver_to_mailbox(pg_pool, answer("m-good"), at=at(1))
    bad, good = await mailbox.read("alice")
    assert bad.reply is None
    assert bad.content == ""
    assert bad.diagnostic is not None
    assert "cannot be read" in bad.diagnostic
    assert good.content == "done"


@pytest.fixture
async def tiny_pool(database_url: str) -> AsyncIterator[Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    yield pool
    await pool.close()


async def test_waits_hold_no_pool_connection(tiny_pool: Pool, database_url: str) -> None:
    """Many waits on a pool of one leave its connection free, and one look answers them all."""
    async with mailbox_on(tiny_pool, database_url, poll_s=600) as mailbox:
        waits = [asyncio.create_task(mailbox.wait(f"m-{i}", timeout_s=30)) for i in range(50)]
        await until_listening(tiny_pool)
        async with tiny_pool.acquire(timeout=5):  # the only connection: no waiter holds it
            pass
        for i in range(50):
            await deliver_to_mailbox(tiny_pool, answer(f"m-{i}"), at=at(i), notify=i == 49)
        found = await asyncio.wait_for(asyncio.gather(*waits), 60)
    assert [entry.in_reply_to if entry else None for entry in found] == [
        f"m-{i}" for i in range(50)
    ]


async def test_waits_survive_losing_the_listening_connection(
    pg_pool: Pool, database_url: str
) -> None:
    """Killing the one listening connection loses no reply: it reconnects and looks again."""
    async with mailbox_on(pg_pool, database_url, poll_s=600) as mailbox:
        waiting = asyncio.create_task(mailbox.wait("m-1", timeout_s=60))
        await until_listening(pg_pool)
        # Listening, and done with what the connection's coming asked for (a look at every
        # waiter): from here only a notification, the poll or a reconnect wakes the watch.
        await eventually(
            lambda: mailbox.notices.connected and mailbox.looks and mailbox.watch_idle,
            "the watch connected, looked and idle",
        )
        # Delivered with no notification: nothing tells the waiter, so it keeps waiting...
        await deliver_to_mailbox(pg_pool, answer("m-1", content="after"), at=at(1), notify=False)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.5)
        killed = await pg_pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE query LIKE 'LISTEN%' AND datname = current_database()"
        )
        assert killed == 1
        # ...until the listener comes back: a notification may have been missed, so the
        # watch looks again for every waiter.
        found = await asyncio.wait_for(waiting, 30)
    assert found is not None
    assert found.content == "after"
