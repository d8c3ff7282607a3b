"""The drain engine on PostgreSQL: the wake table drives it, no data stops it, every path."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg

from birddog import Accepted, Failed, Outcome, Reply, RetrySchedule
from birddog.clock import SystemClock
from birddog.engine import DeliveryEngine, DrainReport
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.wake import WakeListener
from birddog.testing import FrozenClock, ManualWake, RecordingTransport
from tests.support import ALICE, T0, claim, enqueue, eventually, make_job, make_row, wake_at
from tests.support.stacks import QUICK, pg_room

DEADLINE_S = 10.0
BACKSTOP_S = 600.0
"""Far beyond any deadline here: only a wake or a due row can make the engine look."""


@dataclass
class Serving:
    """An engine serving continuously, as ``birddog run`` does, and what it stored."""

    engine: DeliveryEngine
    transport: RecordingTransport
    reports: list[DrainReport] = field(default_factory=list)

    @property
    def delivered(self) -> set[str]:
        """Every key stored as a receipt so far."""
        return {key for report in self.reports for key in report.delivered}


@contextlib.asynccontextmanager
async def serving(pool: Pool, dsn: str) -> AsyncIterator[Serving]:
    """An engine serving with a LISTENing connection until the block ends."""
    transport = RecordingTransport(True)
    running = Serving(engine=pg_room(pool, transport, config=QUICK).engine(), transport=transport)
    stop = asyncio.Event()
    async with WakeListener(dsn) as listener:
        task = asyncio.create_task(
            running.engine.serve(
                stop=stop,
                listener=listener,
                backstop_s=BACKSTOP_S,
                on_report=running.reports.append,
            )
        )
        try:
            yield running
            assert not task.done(), "the engine stopped on its own"
        finally:
            stop.set()
            await asyncio.wait_for(task, DEADLINE_S)
            await running.engine.close(grace_s=1)


@contextlib.asynccontextmanager
async def announcements(dsn: str, channel: str) -> AsyncIterator[list[str]]:
    """The payloads of every NOTIFY on ``channel`` while the block runs."""
    heard: list[str] = []
    conn = await asyncpg.connect(dsn)

    def on_notify(_conn: Any, _pid: int, _channel: str, payload: object) -> None:
        heard.append(str(payload))

    try:
        await conn.add_listener(channel, on_notify)
        yield heard
    finally:
        await conn.close()


async def asleep_until_backstop(pool: Pool) -> None:
    """Wait until the wake table says the daemon looks again only at its backstop."""
    clock = SystemClock()
    await eventually(
        lambda: wake_at(pool),
        "the daemon asleep until its backstop (the wake time)",
        until=lambda armed: (
            armed is not None and armed > clock.now() + timedelta(seconds=BACKSTOP_S / 2)
        ),
        within_s=DEADLINE_S,
    )


async def test_the_wake_table_drives_the_daemon(pg_pool: Pool, database_url: str) -> None:
    """An idle daemon records its next look; a settlement before it wakes it, and it sleeps."""
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    async with serving(pg_pool, database_url) as daemon:
        await asleep_until_backstop(pg_pool)
        await enqueue(pg_pool, make_job("w1", reply_to=[ALICE]))
        claimed = await claim(jobs, lease_s=60)
        [key] = await jobs.settle(
            job_id="w1", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED, content="hi"
        )
        await eventually(lambda: key in daemon.delivered, "the settled reply's receipt")
        await asleep_until_backstop(pg_pool)
    assert [reply.key for reply in daemon.transport.sent] == [key]


async def test_a_poison_row_is_buried_and_the_rest_of_its_claim_delivered(
    pg_pool: Pool, database_url: str
) -> None:
    """An unreadable reply dies undecodable at once; its claim's valid rows are delivered."""
    rows = [make_row(f"outbox:{name}:reply:0") for name in "abc"]
    await PostgresOutbox(pg_pool).add(rows)
    # Another BirdDog version added a field (tolerated, dropped); a hand edit broke a row.
    await pg_pool.execute(
        "UPDATE birddog.outbox SET reply = reply || '{\"priority\": 3}' WHERE key = $1",
        rows[1].key,
    )
    await pg_pool.execute(
        "UPDATE birddog.outbox SET reply = '{\"content\": 42}' WHERE key = $1", rows[2].key
    )
    async with (
        announcements(database_url, "birddog_dead") as dead,
        serving(pg_pool, database_url) as daemon,
    ):
        await eventually(lambda: len(daemon.delivered) == 2, "the valid rows' receipts")
        await eventually(lambda: dead == [rows[2].key], "the dead letter's NOTIFY")
    assert daemon.delivered == {rows[0].key, rows[1].key}
    record = await pg_pool.fetchrow(
        "SELECT state, dead_reason, last_error, attempt_log FROM birddog.outbox WHERE key = $1",
        rows[2].key,
    )
    assert record is not None
    assert (record["state"], record["dead_reason"]) == ("dead", "undecodable")
    assert "stored reply cannot be read" in record["last_error"]
    assert [entry["result"] for entry in record["attempt_log"]] == ["rejected"]
    [buried] = [row for report in daemon.reports for row in report.dead_rows]
    assert (buried.key, buried.agent_id) == (rows[2].key, "alice")


async def test_a_row_whose_outcome_cannot_be_stored_is_buried_alone(
    pg_pool: Pool, database_url: str
) -> None:
    """One row's unstorable outcome holds back no other row of its store.

    A count at the integer's limit (written by SQL) makes its outcome unstorable: that row
    dies undecodable with the reason, and the rows stored with it get their receipts.
    """
    rows = [make_row(f"outbox:{name}:reply:0") for name in "abc"]
    await PostgresOutbox(pg_pool).add(rows)
    await pg_pool.execute(
        "UPDATE birddog.outbox SET attempts = 2147483647 WHERE key = $1", rows[1].key
    )
    async with (
        announcements(database_url, "birddog_dead") as dead,
        serving(pg_pool, database_url) as daemon,
    ):
        await eventually(lambda: len(daemon.delivered) == 2, "the other rows' receipts")
        await eventually(lambda: dead == [rows[1].key], "the dead letter's NOTIFY")
    assert daemon.delivered == {rows[0].key, rows[2].key}
    record = await pg_pool.fetchrow(
        "SELECT state, dead_reason, last_error FROM birddog.outbox WHERE key = $1", rows[1].key
    )
    assert record is not None
    assert (record["state"], record["dead_reason"]) == ("dead", "undecodable")
    assert "could not be stored" in record["last_error"]


async def test_a_mailbox_route_gets_its_replies_in_the_mailbox_table(
    pg_pool: Pool, database_url: str
) -> None:
    """A mailbox recipient's reply is written, receipted and announced in one transaction."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("mbox", kind="mailbox")
    row = make_row("outbox:m:reply:0", agent="mbox")
    await PostgresOutbox(pg_pool).add([row])
    async with (
        announcements(database_url, "birddog_mailbox") as heard,
        serving(pg_pool, database_url) as daemon,
    ):
        await eventually(lambda: row.key in daemon.delivered, "the mailbox receipt")
        await eventually(lambda: heard == ["mbox"], "the mailbox NOTIFY")
    assert daemon.transport.sent == []
    stored = await pg_pool.fetchrow("SELECT * FROM birddog.mailbox WHERE key = $1", row.key)
    assert stored is not None
    assert (stored["agent_id"], stored["session_id"], stored["in_reply_to"]) == (
        "mbox",
        "mbox-session",
        "mail-1",
    )
    assert (stored["command_id"], stored["outcome"], stored["read_at"]) == (
        "command-1",
        "completed",
        None,
    )
    assert Reply.model_validate(stored["reply"]) == row.reply
    receipt = await pg_pool.fetchrow(
        "SELECT attempts, attempt_log FROM birddog.receipts WHERE key = $1", row.key
    )
    assert receipt is not None
    assert receipt["attempts"] == 1
    assert [(e["result"], e["status"]) for e in receipt["attempt_log"]] == [("accepted", None)]


async def test_attempts_are_logged_on_the_row_and_copied_into_the_receipt(
    pg_pool: Pool,
) -> None:
    """Every stored outcome appends to the row's attempt log (last 20); the receipt keeps it."""
    clock = FrozenClock(T0)
    answers: list[Failed | Accepted] = [
        *(Failed(f"HTTP 503 try {n}", status=503) for n in range(24)),
        Accepted(status=200),
    ]
    room = pg_room(
        pg_pool,
        RecordingTransport(lambda reply: answers.pop(0)),
        wake=ManualWake(),
        clock=clock,
        schedule=RetrySchedule(max_attempts=30, base_delay_s=0, jitter=0),
    )
    row = make_row("outbox:logged:reply:0")
    await room.outbox.add([row])
    await room.drain_outbox()
    first = await pg_pool.fetchval("SELECT attempt_log FROM birddog.outbox WHERE key = $1", row.key)
    assert first == [
        {
            "at": "2026-01-01T00:00:00.000Z",
            "result": "failed",
            "status": 503,
            "ms": first[0]["ms"],
            "error": "HTTP 503 try 0",
        }
    ]
    for _ in range(24):
        clock.advance(1)
        await room.drain_outbox()
    log = await pg_pool.fetchval("SELECT attempt_log FROM birddog.receipts WHERE key = $1", row.key)
    assert len(log) == 20
    assert [entry["error"] for entry in log[:-1]] == [f"HTTP 503 try {n}" for n in range(5, 24)]
    assert (log[-1]["result"], log[-1]["status"], log[-1]["error"]) == ("accepted", 200, None)
