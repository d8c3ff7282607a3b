"""Holds pause the age clock: a held recipient's rows neither age nor spend strikes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from birddog import (
    AgentAddress,
    MailRoom,
    OutboxRow,
    Outcome,
    Reply,
    ReplyFacts,
    RetrySchedule,
    RowState,
)
from birddog.clock import SystemClock
from birddog.core.delivery import Failed, new_row
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, ManualWake, RecordingTransport

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY_S = 86400.0


def _row(key: str, *, at: datetime) -> OutboxRow:
    reply = Reply(
        key=key,
        in_reply_to="mail-1",
        to=AgentAddress(agent_id="alice", session_id="alice-session"),
        from_=AgentAddress(agent_id="boss", session_id="boss-session"),
        content="done",
        created_at=int(at.timestamp() * 1000),
        reply=ReplyFacts(command_id="command-1", outcome=Outcome.COMPLETED),
    )
    return new_row(reply, now=at)


async def test_two_day_hold_then_release_gets_the_full_schedule(pg_pool: Pool) -> None:
    """A row held for two days is, once released, as young as when the hold began.

    Its first failure after the release is a retry, not ``max_age_exceeded``, and it keeps
    the attempts it had.
    """
    clock = FrozenClock(T0)
    routes = PostgresRoutes(pg_pool, clock=clock, cache_s=0)
    outbox = PostgresOutbox(pg_pool)
    await routes.add("alice", "http://127.0.0.1:9/inbox")
    await outbox.add([_row("outbox:mail-1:reply:0", at=T0)])

    clock.advance(3600)  # one hour old when the hold begins
    held = await routes.hold("alice")
    assert held.held_at == clock.now()
    clock.advance(2 * DAY_S)
    released = await routes.release("alice")
    assert released.enabled is True
    assert released.held_at is None

    row = await outbox.get("outbox:mail-1:reply:0")
    assert isinstance(row, OutboxRow)
    assert clock.now() - row.created_at == timedelta(hours=1)
    assert row.attempts == 0

    transport = RecordingTransport(Failed("HTTP 500 Internal Server Error"))
    room = MailRoom(
        outbox=outbox,
        transport=transport,
        wake=ManualWake(),
        clock=clock,
        schedule=RetrySchedule(max_age_s=DAY_S),
    )
    report = await room.drain_outbox()
    assert report.retried == ["outbox:mail-1:reply:0"]
    assert report.dead == []
    after = await outbox.get("outbox:mail-1:reply:0")
    assert isinstance(after, OutboxRow)
    assert after.state is RowState.PENDING
    assert after.attempts == 1


async def test_a_row_written_during_a_hold_ages_from_the_release(pg_pool: Pool) -> None:
    """A reply owed while its recipient was held starts aging when the hold ends."""
    clock = FrozenClock(T0)
    routes = PostgresRoutes(pg_pool, clock=clock, cache_s=0)
    outbox = PostgresOutbox(pg_pool)
    await routes.add("alice", "http://127.0.0.1:9/inbox", enabled=False)
    clock.advance(DAY_S)
    await outbox.add([_row("outbox:mail-2:reply:0", at=clock.now())])
    clock.advance(DAY_S)
    await routes.release("alice")
    row = await outbox.get("outbox:mail-2:reply:0")
    assert isinstance(row, OutboxRow)
    assert row.created_at == clock.now()


async def test_holding_twice_keeps_when_the_hold_began(pg_pool: Pool) -> None:
    """A second hold of a held recipient does not move the start of its hold."""
    clock = FrozenClock(T0)
    routes = PostgresRoutes(pg_pool, clock=clock, cache_s=0)
    await routes.add("alice", "http://127.0.0.1:9/inbox")
    first = await routes.hold("alice")
    clock.advance(60)
    second = await routes.hold("alice")
    assert second.held_at == first.held_at == T0


async def test_pending_view_shows_held_rows_as_held_with_a_frozen_age(pg_pool: Pool) -> None:
    """``birddog.pending`` marks a held row ``held`` and stops its age at the hold."""
    routes = PostgresRoutes(pg_pool, cache_s=0, clock=SystemClock())
    outbox = PostgresOutbox(pg_pool)
    await routes.add("alice", "http://127.0.0.1:9/inbox")
    started = datetime.now(UTC) - timedelta(hours=5)
    await outbox.add([_row("outbox:mail-3:reply:0", at=started)])
    await pg_pool.execute(
        "UPDATE birddog.routes SET enabled = false, held_at = $1 WHERE agent_id = 'alice'",
        started + timedelta(hours=1),
    )
    view = await pg_pool.fetchrow(
        "SELECT status, held, held_since, age FROM birddog.pending WHERE key = $1",
        "outbox:mail-3:reply:0",
    )
    assert view is not None
    assert view["status"] == "held"
    assert view["held"] is True
    assert view["age"] == timedelta(hours=1)
    listed = await outbox.list_pending(limit=10)
    assert listed[0]["status"] == "held"
