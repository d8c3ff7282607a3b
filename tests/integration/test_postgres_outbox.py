"""PostgresOutbox beyond the shared contract: concurrency, byte order, notifications, atomicity."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    ContentTooLarge,
    DeadReason,
    InvalidInput,
    Job,
    JobState,
    Mail,
    MailRoom,
    OutboxRow,
    Outcome,
    Receipt,
    RowState,
    StoreUnavailable,
    agent_job,
)
from birddog.postgres.outbox import PostgresOutbox, insert_rows
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.sql import queries
from birddog.postgres.wake import PostgresWake
from birddog.testing import FrozenClock, RecordingTransport
from tests.support import T0, at, eventually, make_reply, make_row, receipt_for, store_claim

LEASE_S = 30.0


async def test_two_concurrent_claimers_never_hold_the_same_row(database_url: str) -> None:
    """Two drainers on their own connections claim disjoint rows and together claim all."""
    pools = [await create_pool(database_url, min_size=1, max_size=1) for _ in range(2)]
    try:
        outboxes = [PostgresOutbox(pool) for pool in pools]
        keys = [f"k{i:04d}" for i in range(300)]
        await outboxes[0].add([make_row(key) for key in keys])

        async def drain(outbox: PostgresOutbox) -> list[str]:
            claimed: list[str] = []
            after: str | None = None
            while True:
                page = await outbox.claim_page(after_key=after, limit=7, now=at(0), lease_s=LEASE_S)
                if not page.rows:
                    return claimed
                claimed.extend(row.key for row in page.rows)
                after = page.last_key

        first, second = await asyncio.gather(drain(outboxes[0]), drain(outboxes[1]))
    finally:
        for pool in pools:
            await pool.close()
    assert not set(first) & set(second)
    assert sorted(first + second) == keys


async def test_claim_skips_rows_locked_by_an_open_claim(pg_pool: Pool, database_url: str) -> None:
    """While one claim's transaction holds rows, another claim takes the next rows at once."""
    outbox = PostgresOutbox(pg_pool)
    await outbox.add([make_row(f"k{i}") for i in range(4)])
    other = await asyncpg.connect(database_url)
    try:
        tx = other.transaction()
        await tx.start()
        held = await other.fetch(
            queries["outbox_claim_page"], "", T0, 2, uuid.uuid4(), T0 + timedelta(seconds=30), []
        )
        assert sorted(r["key"] for r in held) == ["k0", "k1"]
        page = await asyncio.wait_for(
            outbox.claim_page(after_key=None, limit=10, now=at(0), lease_s=LEASE_S), timeout=5
        )
        assert [row.key for row in page.rows] == ["k2", "k3"]
        await tx.rollback()
    finally:
        await other.close()
    again = await outbox.claim_page(after_key=None, limit=10, now=at(0), lease_s=LEASE_S)
    assert [row.key for row in again.rows] == ["k0", "k1"]


async def test_non_ascii_and_long_keys_page_in_byte_order(pg_pool: Pool) -> None:
    """Keys page in UTF-8 byte order, which is Python's str order, whatever their script."""
    outbox = PostgresOutbox(pg_pool)
    keys = [
        "Zebra",
        "apple",
        "Äpfel",
        "äpfel",
        "épée",
        "eel",
        "日本",
        "🐦 bird",
        "\uff46\uff55\uff4c\uff4c",  # fullwidth "full"
        "a" * 512,
        "a" * 511 + "b",
        "ä" * 512,
        "🐦" * 512,
        "z",
        "~tilde",
        "Ω",
    ]
    await outbox.add([make_row(key) for key in keys])
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await outbox.claim_page(after_key=after, limit=3, now=at(0), lease_s=LEASE_S)
        if not page.rows:
            break
        seen.extend(row.key for row in page.rows)
        after = page.last_key
    assert seen == sorted(keys, key=lambda k: k.encode())
    assert seen == sorted(keys)


async def test_claim_uses_the_due_index_with_a_future_backlog(pg_pool: Pool) -> None:
    """With a large backlog due later (and sorting first), the claim reads the due-time index."""
    await pg_pool.execute(
        "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id, in_reply_to,"
        " command_id, outcome, reply, state, due_at, created_at)"
        " SELECT 'a' || lpad(g::text, 7, '0'), 'alice', 's', 'm', 'c', 'completed', '{}'::jsonb,"
        " 'pending', $1::timestamptz + interval '1 hour', $1::timestamptz"
        " FROM generate_series(1, 100000) AS g",
        T0,
    )
    outbox = PostgresOutbox(pg_pool)
    await outbox.add([make_row(f"z{i}") for i in range(5)])
    await pg_pool.execute("ANALYZE birddog.outbox")

    plan = await pg_pool.fetchval(
        "EXPLAIN (FORMAT JSON) " + queries["outbox_claim_page"],
        "",
        T0,
        64,
        uuid.uuid4(),
        T0 + timedelta(seconds=30),
        [],
    )
    assert "outbox_pending_due_at_idx" in json.dumps(plan)
    page = await outbox.claim_page(after_key=None, limit=64, now=at(0), lease_s=LEASE_S)
    assert [row.key for row in page.rows] == [f"z{i}" for i in range(5)]


async def test_claim_due_reads_only_the_page_whatever_the_backlog(pg_pool: Pool) -> None:
    """claim_due walks the due-time index and touches a few buffers, not the backlog."""
    await pg_pool.execute(
        "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id, in_reply_to,"
        " command_id, outcome, reply, state, due_at, created_at)"
        " SELECT 'm' || lpad(g::text, 7, '0'), 'alice', 's', 'm', 'c', 'completed', '{}'::jsonb,"
        " 'pending', $1::timestamptz + interval '1 hour', $1::timestamptz"
        " FROM generate_series(1, 100000) AS g",
        T0,
    )
    outbox = PostgresOutbox(pg_pool)
    await outbox.add([make_row(f"{prefix}{i}") for prefix in "az" for i in range(40)])
    await pg_pool.execute("ANALYZE birddog.outbox")
    async with pg_pool.acquire() as conn:
        explain = conn.transaction()
        await explain.start()
        plan = await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries["outbox_claim_due"],
            T0,
            64,
            uuid.uuid4(),
            T0 + timedelta(seconds=30),
            [],
            8,  # the latest-due few, read backwards from now, cost a page too
        )
        await explain.rollback()  # EXPLAIN ANALYZE ran the claim; take it back
    text = json.dumps(plan)
    assert "outbox_pending_due_at_idx" in text
    assert (
        plan[0]["Plan"]["Shared Hit Blocks"] + plan[0]["Plan"].get("Shared Read Blocks", 0) < 2000
    )
    page = await outbox.claim_due(limit=64, now=at(0), lease_s=LEASE_S)
    assert len(page.rows) == 64
    assert all(not row.key.startswith("m") for row in page.rows)


def rows_filtered_out(node: dict[str, Any]) -> int:
    """Rows a plan read and threw away (its nodes' filters, every loop), summed over the tree."""
    own = int(node.get("Rows Removed by Filter", 0) * node.get("Actual Loops", 1))
    return own + sum(rows_filtered_out(child) for child in node.get("Plans", []))


async def test_claim_due_leaving_recipients_out_does_not_read_their_rows(pg_pool: Pool) -> None:
    """With 20,000 due rows of left-out recipients, the claim reads their index once each."""
    await pg_pool.execute(
        "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id, in_reply_to,"
        " command_id, outcome, reply, state, due_at, created_at)"
        " SELECT 'h' || lpad(g::text, 7, '0'), 'hang-' || (g % 40), 's', 'm', 'c', 'completed',"
        " '{}'::jsonb, 'pending', $1::timestamptz - interval '1 hour', $1::timestamptz"
        " FROM generate_series(1, 20000) AS g",
        T0,
    )
    outbox = PostgresOutbox(pg_pool)
    await outbox.add([make_row(f"z{i}", agent=f"ok-{i % 5}") for i in range(100)])
    await pg_pool.execute("ANALYZE birddog.outbox")
    hanging = [f"hang-{i}" for i in range(40)]
    filtered: dict[str, int] = {}
    for name, extra in (("outbox_claim_heads", (64,)), ("outbox_claim_due", ())):
        async with pg_pool.acquire() as conn:
            explain = conn.transaction()
            await explain.start()
            plan = await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries[name],
                T0,
                48,
                uuid.uuid4(),
                T0 + timedelta(seconds=30),
                hanging,
                16,
                *extra,
            )
            await explain.rollback()  # EXPLAIN ANALYZE ran the claim; take it back
        filtered[name] = rows_filtered_out(plan[0]["Plan"])
        if name == "outbox_claim_heads":
            assert "outbox_pending_recipient_due_at_idx" in json.dumps(plan)
    # In due order the claim reads past the 20,000 left-out rows; by heads it does not.
    assert filtered["outbox_claim_due"] >= 20_000, filtered
    assert filtered["outbox_claim_heads"] < 100, filtered
    page = await outbox.claim_due(
        limit=64, now=at(0), lease_s=LEASE_S, skip_agents=hanging, newest=16
    )
    assert len(page.rows) == 64
    assert all(row.key.startswith("z") for row in page.rows)


async def test_dead_letter_notifies_only_on_commit(pg_pool: Pool, database_url: str) -> None:
    """Each new dead letter is announced on birddog_dead with its key, once applied."""
    outbox = PostgresOutbox(pg_pool)
    rows = [make_row("k-dead"), make_row("k-retry")]
    await outbox.add(rows)
    got: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("birddog_dead", lambda *args: got.put_nowait(args[3]))
        page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
        dead = replace(rows[0], state=RowState.DEAD, attempts=1, dead_reason=DeadReason.GONE)
        retried = replace(rows[1], attempts=1, due_at=at(5))
        await store_claim(outbox, page=page, outcomes=[dead, retried])
        assert await asyncio.wait_for(got.get(), timeout=5) == "k-dead"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(got.get(), timeout=0.2)
    finally:
        await listener.close()


async def test_apply_of_a_page_is_one_transaction(pg_pool: Pool) -> None:
    """If any outcome of a page cannot be stored, none is: receipts and rows roll back together."""
    outbox = PostgresOutbox(pg_pool)
    rows = [make_row("a"), make_row("b")]
    await outbox.add(rows)
    page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    impossible = replace(rows[1], attempts=-1)  # violates the attempts >= 0 check
    with pytest.raises(StoreUnavailable) as refused:
        await store_claim(
            outbox, page=page, outcomes=[receipt_for(rows[0], when=at(1)), impossible]
        )
    assert isinstance(refused.value.__cause__, asyncpg.CheckViolationError)

    assert await outbox.get("a") == rows[0]
    assert await outbox.get("b") == rows[1]
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 0
    applied = await store_claim(outbox, page=page, outcomes=[receipt_for(rows[0], when=at(1))])
    assert applied == ["a"]


async def test_insert_waiting_on_a_receipt_swap_does_not_resurrect_the_row(
    pg_pool: Pool, database_url: str
) -> None:
    """A replayed fan-out racing the delivery of the same key leaves only the receipt."""
    outbox = PostgresOutbox(pg_pool)
    row = make_row("k1")
    await outbox.add([row])
    page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    receipt = receipt_for(row, when=at(1))
    swapper = await asyncpg.connect(database_url)
    try:
        tx = swapper.transaction()
        await tx.start()
        swapped = await swapper.fetch(
            queries["outbox_swap_receipts"],
            [uuid.UUID(page.claim)],
            [receipt.key],
            [receipt.delivered_at],
            [receipt.attempts],
            [receipt.recipient.agent_id],
            [receipt.recipient.session_id],
            [receipt.command_id],
            [receipt.outcome.value],
            "[null]",  # no attempt to log
            [False],  # not a mailbox delivery
        )
        assert [r["key"] for r in swapped] == ["k1"]
        replay = asyncio.create_task(outbox.add([make_row("k1")]))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(replay), timeout=0.3)  # blocked on the key
        await tx.commit()
        assert await asyncio.wait_for(replay, timeout=5) == []
    finally:
        await swapper.close()
    assert await outbox.get("k1") == receipt
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0


async def test_insert_rows_joins_the_callers_transaction(pg_pool: Pool) -> None:
    """Rows written with insert_rows vanish when the caller's transaction rolls back."""
    async with pg_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert await insert_rows(conn, [make_row("k1"), make_row("k1")]) == ["k1"]
        await tx.rollback()
    assert await PostgresOutbox(pg_pool).get("k1") is None


def _settled_job(*, content_to: str = "alice") -> Job:
    mail = Mail(
        key="mail-1",
        to=AgentAddress(agent_id="worker", session_id="worker-session"),
        from_=AgentAddress(agent_id="boss", session_id="boss-session"),
        reply_to=[
            AgentAddress(agent_id=content_to, session_id="s1"),
            AgentAddress(agent_id="bob", session_id="s2"),
        ],
        content="please do it",
        created_at=0,
    )
    job = agent_job(
        AgentWork(job_id="job-1", session_id="worker-session", command_fact_id="command-1"), mail
    )
    return job.model_copy(update={"state": JobState.SETTLED, "outcome": Outcome.COMPLETED})


async def test_bad_content_is_refused_before_anything_is_written(pg_pool: Pool) -> None:
    """NUL characters and oversized content fail fan-out with a clear error; no row is written."""
    outbox = PostgresOutbox(pg_pool)
    room = MailRoom(
        outbox=outbox,
        transport=RecordingTransport(),
        wake=PostgresWake(pg_pool),
        clock=FrozenClock(T0),
        max_content_bytes=64,
    )
    with pytest.raises(InvalidInput) as nul:
        await room.fan_out(job=_settled_job(), content="bad\x00text")
    assert "NUL" in str(nul.value)
    with pytest.raises(ContentTooLarge) as big:
        await room.fan_out(job=_settled_job(), content="x" * 65)
    assert big.value.field == "content"
    with pytest.raises(InvalidInput):
        make_reply("k1", content="nul\x00")
    with pytest.raises(InvalidInput) as address:
        AgentAddress(agent_id="", session_id="s")
    assert address.value.field == "agentId"

    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.wake") == 0


async def test_mailroom_fan_out_and_drain_over_postgres(pg_pool: Pool) -> None:
    """Fan-out writes one row per replyTo and a wake; a drain delivers both as receipts."""
    outbox = PostgresOutbox(pg_pool)
    wake = PostgresWake(pg_pool)
    clock = FrozenClock(T0)
    transport = RecordingTransport(True)
    room = MailRoom(outbox=outbox, transport=transport, wake=wake, clock=clock)

    keys = await room.fan_out(job=_settled_job(), content="all done")
    assert keys == ["outbox:mail-1:reply:0", "outbox:mail-1:reply:1"]
    assert await wake.wake_at() == T0
    assert await room.fan_out(job=_settled_job(), content="all done") == []

    clock.advance(1)
    report = await room.drain_outbox()
    assert report.delivered == keys
    assert [reply.to.agent_id for reply in transport.sent] == ["alice", "bob"]
    assert [reply.content for reply in transport.sent] == ["all done", "all done"]
    for key in keys:
        receipt = await outbox.get(key)
        assert isinstance(receipt, Receipt)
        assert receipt.delivered_at == at(1)
        assert receipt.outcome is Outcome.COMPLETED
    assert await outbox.has_pending() is False
    assert await room.fan_out(job=_settled_job(), content="all done") == []
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 2


async def test_replay_puts_a_dead_letter_back_and_wakes(pg_pool: Pool) -> None:
    """Replay makes a dead letter pending again, same key, fresh attempts, due now, with a wake."""
    outbox = PostgresOutbox(pg_pool)
    wake = PostgresWake(pg_pool)
    rows = [make_row("k1"), make_row("k2", agent="bob"), make_row("k3", agent="bob")]
    await outbox.add(rows)
    page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    dead = [
        replace(
            row,
            state=RowState.DEAD,
            attempts=3,
            deferrals=2,
            last_error="HTTP 500",
            dead_reason=DeadReason.ATTEMPTS_EXHAUSTED,
        )
        for row in rows
    ]
    await store_claim(outbox, page=page, outcomes=dead)
    counts = await outbox.counts()
    assert (counts["pending"], counts["dead"]) == (0, 3)
    listed = await outbox.list_dead()
    assert {row["key"] for row in listed} == {"k1", "k2", "k3"}
    assert listed[0]["dead_reason"] == "attempts_exhausted"
    assert listed[0]["dead_at"] is not None

    with pytest.raises(InvalidInput):
        await outbox.replay()
    assert await outbox.replay(key="missing") == []
    assert await outbox.replay(agent_id="bob") == ["k2", "k3"]
    assert await outbox.replay(key="k1") == ["k1"]
    assert await outbox.replay(key="k1") == []  # no longer dead

    replayed = await outbox.get("k2")
    assert isinstance(replayed, OutboxRow)
    assert (replayed.state, replayed.attempts, replayed.deferrals) == (RowState.PENDING, 0, 0)
    assert replayed.dead_reason is None
    assert replayed.last_error == "HTTP 500"
    assert await wake.wake_at() is not None
    pending = await outbox.list_pending()
    assert sorted(row["key"] for row in pending) == ["k1", "k2", "k3"]
    assert {row["held"] for row in pending} == {False}
    counts = await outbox.counts()
    assert (counts["pending"], counts["dead"], counts["held"]) == (3, 0, 0)
    assert counts["oldest_pending_at"] is not None


async def test_operator_views_show_holds_and_leases(pg_pool: Pool) -> None:
    """birddog.pending shows held and in-flight rows; counts() agrees."""
    outbox = PostgresOutbox(pg_pool)
    await pg_pool.execute(
        "INSERT INTO birddog.routes (agent_id, url, secret, enabled)"
        " VALUES ('held-one', 'http://127.0.0.1:9/', 'whsec_AAAA', false)"
    )
    await outbox.add([make_row("k1", agent="held-one"), make_row("k2")])
    # A lease far in the future, so the row is in flight by the database's clock too.
    await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=10 * 365 * 86400)
    rows = {row["key"]: row for row in await outbox.list_pending()}
    assert rows["k1"]["held"] is True
    assert rows["k1"]["in_flight"] is False
    assert rows["k2"]["held"] is False
    assert rows["k2"]["in_flight"] is True
    assert rows["k2"]["next_try_at"] == T0
    counts = await outbox.counts()
    assert (counts["pending"], counts["held"], counts["in_flight"]) == (2, 1, 1)
    assert counts["next_due_at"] == T0


async def test_a_lost_database_raises_store_unavailable(database_url: str) -> None:
    """A connection killed mid-statement, or a closed pool, surfaces as StoreUnavailable."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    outbox = PostgresOutbox(pool)
    blocker = await asyncpg.connect(database_url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id,"
            " in_reply_to, command_id, outcome, reply, state, due_at, created_at)"
            " VALUES ('k1', 'a', 's', 'm', 'c', 'completed', '{}', 'pending', now(), now())"
        )
        adding = asyncio.create_task(outbox.add([make_row("k1")]))  # waits on the key
        waiting = await eventually(
            lambda: blocker.fetchval(
                "SELECT pid FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ),
            "the add to wait on the key's lock",
            until=lambda pid: pid is not None,
            within_s=5,
        )
        await blocker.fetchval("SELECT pg_terminate_backend($1)", waiting)
        with pytest.raises(StoreUnavailable) as killed:
            await asyncio.wait_for(adding, timeout=5)
        assert isinstance(killed.value.__cause__, asyncpg.PostgresError | asyncpg.InterfaceError)
        await tx.rollback()
    finally:
        await blocker.close()
    assert await outbox.has_pending() is False  # the pool replaced the connection

    await pool.close()
    with pytest.raises(StoreUnavailable):
        await outbox.add([make_row("k1")])


async def test_unreachable_database_raises_store_unavailable() -> None:
    """Opening a pool on a server that is not there raises StoreUnavailable."""
    with pytest.raises(StoreUnavailable):
        await create_pool("postgresql://postgres@/postgres?host=/nonexistent-birddog", timeout=2)
