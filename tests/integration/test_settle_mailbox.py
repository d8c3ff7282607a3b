"""A settlement delivers replies to mailbox recipients itself, in its own transaction."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from birddog import Outcome, has_pending_delivery
from birddog.clock import SystemClock
from birddog.core.ask import with_asker_mailbox
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, ManualWake, RecordingTransport
from tests.support import ALICE, CAROL, T0, claim, enqueue, make_job, outbox_rows, wake_at
from tests.support.stacks import pg_room


@pytest.fixture
def routes(pg_pool: Pool) -> PostgresRoutes:
    return PostgresRoutes(pg_pool, cache_s=0, clock=SystemClock())


async def settle_one(jobs: PostgresJobs, pg_pool: Pool, content: str = "done") -> list[str]:
    """Enqueue, claim and settle job-1 (replies to Alice, then Carol); the keys written."""
    await enqueue(pg_pool, make_job(reply_to=(ALICE, CAROL)))
    token = (await claim(jobs)).claim_token
    return await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content=content
    )


async def test_a_mailbox_reply_is_delivered_with_its_receipt_and_no_outbox_row(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes
) -> None:
    """Alice's mailbox gets her reply and a receipt at settle; Carol's HTTP reply is owed."""
    await routes.add("alice", kind="mailbox")
    await routes.add("carol", "http://127.0.0.1:9/inbox")
    keys = await settle_one(jobs, pg_pool)
    assert keys == ["outbox:mail-job-1:reply:0", "outbox:mail-job-1:reply:1"]
    assert [row["key"] for row in await outbox_rows(pg_pool)] == ["outbox:mail-job-1:reply:1"]
    receipt = await pg_pool.fetchrow(
        "SELECT * FROM birddog.receipts WHERE key = 'outbox:mail-job-1:reply:0'"
    )
    assert receipt is not None
    assert (receipt["delivered_at"], receipt["attempts"]) == (T0, 1)
    assert (receipt["recipient_agent_id"], receipt["recipient_session_id"]) == (
        "alice",
        "s-alice",
    )
    assert (receipt["command_id"], receipt["outcome"]) == ("cmd-job-1", "completed")
    assert receipt["attempt_log"] == [
        {"at": "2026-01-01T00:00:00.000Z", "result": "accepted", "status": None, "ms": 0,
         "error": None}
    ]  # fmt: skip
    [entry] = await PostgresMailbox(pg_pool, clock=SystemClock()).read("alice")
    assert (entry.key, entry.session_id, entry.in_reply_to) == (
        "outbox:mail-job-1:reply:0",
        "s-alice",
        "mail-job-1",
    )
    assert (entry.outcome, entry.delivered_at, entry.problem) == (Outcome.COMPLETED, T0, None)
    assert entry.reply is not None
    assert (entry.reply.content, entry.reply.to) == ("done", ALICE)
    assert await wake_at(pg_pool) == T0


async def test_a_marked_ask_puts_only_the_askers_reply_in_its_mailbox(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes
) -> None:
    """askerMailbox: Alice's reply (she sent the mail) skips her URL; Carol's is still owed."""
    await routes.add("alice", "http://127.0.0.1:9/alice")
    await routes.add("carol", "http://127.0.0.1:9/carol")
    await enqueue(pg_pool, with_asker_mailbox(make_job(reply_to=(ALICE, CAROL))))
    token = (await claim(jobs)).claim_token
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="done"
    )
    assert keys == ["outbox:mail-job-1:reply:0", "outbox:mail-job-1:reply:1"]
    assert [row["key"] for row in await outbox_rows(pg_pool)] == ["outbox:mail-job-1:reply:1"]
    [entry] = await PostgresMailbox(pg_pool, clock=SystemClock()).read("alice")
    assert (entry.key, entry.content) == ("outbox:mail-job-1:reply:0", "done")
    assert await PostgresMailbox(pg_pool, clock=SystemClock()).read("carol") == []


async def test_only_mailbox_replies_leave_nothing_owed_and_no_wake(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes, clock: FrozenClock
) -> None:
    """With every recipient a mailbox, nothing is owed, no wake is armed, no drain posts."""
    await routes.add("alice", kind="mailbox")
    await routes.add("carol", kind="mailbox")
    assert len(await settle_one(jobs, pg_pool)) == 2
    assert await outbox_rows(pg_pool) == []
    assert await wake_at(pg_pool) is None
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 2
    transport = RecordingTransport(True)
    room = pg_room(pg_pool, transport, wake=ManualWake(), clock=clock)
    assert not await has_pending_delivery(room.outbox)
    assert (await room.drain_outbox()).claimed == 0
    assert transport.sent == []


async def test_a_held_mailbox_keeps_its_reply_in_the_outbox(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes
) -> None:
    """A held mailbox is not delivered at settle: its reply waits in the outbox, held."""
    await routes.add("alice", kind="mailbox", enabled=False)
    await settle_one(jobs, pg_pool)
    assert [row["key"] for row in await outbox_rows(pg_pool)] == [
        "outbox:mail-job-1:reply:0",
        "outbox:mail-job-1:reply:1",
    ]
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.mailbox") == 0


async def test_a_key_already_owed_is_not_delivered_twice(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes
) -> None:
    """A reply key with a pending row stays with the drain; the settlement writes no receipt."""
    await enqueue(pg_pool, make_job(reply_to=(ALICE,)))
    await pg_pool.execute(
        "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id,"
        " in_reply_to, command_id, outcome, reply, state, due_at, created_at)"
        " VALUES ('outbox:mail-job-1:reply:0', 'alice', 's-alice', 'mail-job-1', 'cmd-job-1',"
        " 'completed', '{}', 'pending', $1, $1)",
        T0,
    )
    await routes.add("alice", kind="mailbox")
    token = (await claim(jobs)).claim_token
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="again"
    )
    assert keys == []
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.mailbox") == 0


async def test_the_mailbox_is_notified_at_the_settlements_commit(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes, database_url: str
) -> None:
    """A listener on birddog_mailbox hears the agent's id once the settlement commits."""
    await routes.add("alice", kind="mailbox")
    await routes.add("carol", kind="mailbox")
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("birddog_mailbox", lambda *args: heard.put_nowait(args[3]))
        await settle_one(jobs, pg_pool)
        first = await asyncio.wait_for(heard.get(), 10)
        second = await asyncio.wait_for(heard.get(), 10)
        assert sorted([first, second]) == ["alice", "carol"]
    finally:
        await listener.close()


OWED_TO_ALICE = (
    "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id,"
    " in_reply_to, command_id, outcome, reply, state, due_at, created_at, lease_expires_at)"
    " VALUES ('outbox:mail-job-1:reply:0', 'alice', 's-alice', 'mail-job-1', 'cmd-job-1',"
    " 'completed', '{}', $1, $2, $2, $3)"
)
"""A row owed to Alice under job-1's reply key before it settles: state, due, lease."""


@pytest.mark.parametrize("state", ["pending", "dead"])
async def test_a_marked_asks_reply_already_owed_to_the_asker_goes_to_its_mailbox_once(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes, state: str
) -> None:
    """The asker's key has a row (an earlier job's, pruned): it gives way to the mailbox.

    Alice's route posts to a URL; the row is pending or dead (a replay would send it
    there). The settlement of the marked ask removes it and delivers the reply into her
    mailbox with its receipt: one delivery, none to the URL.
    """
    await routes.add("alice", "http://127.0.0.1:9/alice")
    await enqueue(pg_pool, with_asker_mailbox(make_job(reply_to=(ALICE,))))
    await pg_pool.execute(OWED_TO_ALICE, state, T0, None)
    token = (await claim(jobs)).claim_token
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="again"
    )
    assert keys == ["outbox:mail-job-1:reply:0"]
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 1
    [entry] = await PostgresMailbox(pg_pool, clock=SystemClock()).read("alice")
    assert (entry.key, entry.content) == ("outbox:mail-job-1:reply:0", "again")


async def test_a_marked_asks_reply_a_drain_holds_is_left_to_the_drain(
    jobs: PostgresJobs, pg_pool: Pool, routes: PostgresRoutes
) -> None:
    """Under a live lease (a drain may be posting it now) the row stays; nothing is doubled."""
    await routes.add("alice", "http://127.0.0.1:9/alice")
    await enqueue(pg_pool, with_asker_mailbox(make_job(reply_to=(ALICE,))))
    await pg_pool.execute(OWED_TO_ALICE, "pending", T0, T0 + timedelta(hours=1))
    token = (await claim(jobs)).claim_token
    keys = await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="again"
    )
    assert keys == []
    left = await pg_pool.fetch("SELECT key, lease_expires_at FROM birddog.outbox")
    assert [tuple(row) for row in left] == [("outbox:mail-job-1:reply:0", T0 + timedelta(hours=1))]
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.mailbox") == 0
