"""The outbox port's contract, run against InMemoryOutbox and PostgresOutbox alike.

The in-memory outbox is the reference; if the two ever disagree, one of these fails.
Each backend is wrapped in a small adapter that can also hold and release a recipient
(``InMemoryOutbox.hold`` for the fake, a disabled route for Postgres). The ports around
the outbox run here too: dead-letter replay, and rows written in a caller's transaction
(``CallerOutbox`` on a connection in a transaction for Postgres).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import pytest

from birddog import (
    DeadReason,
    MailRoom,
    Outbox,
    OutboxRow,
    Receipt,
    RetrySchedule,
    RowState,
)
from birddog.core.errors import InvalidInput, RouteNotFound
from birddog.ports import DeadLetters
from birddog.postgres.caller_outbox import CallerOutbox
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import FrozenClock, InMemoryOutbox, ManualWake, RecordingTransport
from tests.support import T0, at, make_row, receipt_for, release_claim, store_claim

LEASE_S = 30.0

PORTS = ("Outbox", "DeadLetterReplay", "DeadLetters", "OutboxRows")
"""The ports these tests hold their fake and their Postgres adapter to."""

AddRows = Callable[[Sequence[OutboxRow], datetime | None], Awaitable[list[str]]]


@dataclass
class Backend:
    """An outbox under test, with a way to hold and release a recipient."""

    name: str
    outbox: Outbox
    hold: Callable[[str], Awaitable[None]]
    release: Callable[[str], Awaitable[None]]
    dead: DeadLetters
    add_rows: AddRows


@pytest.fixture
async def memory_backend() -> Backend:
    """The in-memory reference outbox."""
    outbox = InMemoryOutbox()

    async def hold(agent_id: str) -> None:
        outbox.hold(agent_id)

    async def release(agent_id: str) -> None:
        outbox.release(agent_id)

    async def add_rows(rows: Sequence[OutboxRow], wake_at: datetime | None) -> list[str]:
        return await outbox.add_rows(rows, wake_at=wake_at)

    return Backend("memory", outbox, hold, release, outbox, add_rows)


@pytest.fixture
async def postgres_backend(pg_pool: Pool) -> Backend:
    """The Postgres outbox on a fresh database; holds are disabled routes."""
    routes = PostgresRoutes(pg_pool, clock=FrozenClock(T0))

    async def hold(agent_id: str) -> None:
        try:
            await routes.hold(agent_id)
        except RouteNotFound:
            await routes.add(agent_id, "http://127.0.0.1:9/inbox", enabled=False)

    async def release(agent_id: str) -> None:
        await routes.release(agent_id)

    async def add_rows(rows: Sequence[OutboxRow], wake_at: datetime | None) -> list[str]:
        async with pg_pool.acquire() as conn, conn.transaction():
            return await CallerOutbox(lambda: conn).add_rows(rows, wake_at=wake_at)

    outbox = PostgresOutbox(pg_pool)
    return Backend("postgres", outbox, hold, release, outbox, add_rows)


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    result: Backend = request.getfixturevalue(request.param)
    return result


async def test_add_returns_new_keys_and_skips_existing_rows(backend: Backend) -> None:
    """Adding stores new keys only and returns them in the order given."""
    outbox = backend.outbox
    assert await outbox.add([make_row("k2"), make_row("k1")]) == ["k2", "k1"]
    assert await outbox.add([make_row("k1"), make_row("k3")]) == ["k3"]
    assert await outbox.add([]) == []


async def test_add_skips_keys_with_a_receipt(backend: Backend) -> None:
    """A key that was delivered (has a receipt) is never owed again."""
    outbox = backend.outbox
    row = make_row("k1")
    await outbox.add([row])
    page = await outbox.claim_page(after_key=None, limit=10, now=at(0), lease_s=LEASE_S)
    assert await store_claim(outbox, page=page, outcomes=[receipt_for(row, when=at(1))]) == ["k1"]

    assert await outbox.add([make_row("k1")]) == []
    assert isinstance(await outbox.get("k1"), Receipt)


async def test_rows_round_trip_unchanged(backend: Backend) -> None:
    """``get`` returns exactly the row that was added; a missing key is None."""
    outbox = backend.outbox
    row = replace(make_row("k1", due=5), last_error="earlier failure", attempts=2, deferrals=1)
    await outbox.add([row])
    assert await outbox.get("k1") == row
    assert await outbox.get("missing") is None


async def test_claim_returns_only_due_rows(backend: Backend) -> None:
    """Rows due later than ``now`` are not claimed."""
    outbox = backend.outbox
    await outbox.add([make_row("a", due=0), make_row("b", due=10), make_row("c", due=5)])
    page = await outbox.claim_page(after_key=None, limit=10, now=at(5), lease_s=LEASE_S)
    assert [row.key for row in page.rows] == ["a", "c"]
    assert page.more is False


async def test_claim_due_takes_the_earliest_due_first(backend: Backend) -> None:
    """claim_due takes due rows by due time (then key), returns them in key order."""
    outbox = backend.outbox
    await outbox.add(
        [make_row("a", due=4), make_row("b", due=1), make_row("c", due=9), make_row("d", due=2)]
    )
    first = await outbox.claim_due(limit=2, now=at(5), lease_s=LEASE_S)
    assert [row.key for row in first.rows] == ["b", "d"]
    assert first.more is True
    second = await outbox.claim_due(limit=2, now=at(5), lease_s=LEASE_S)
    assert [row.key for row in second.rows] == ["a"]
    assert second.more is False


async def test_claim_due_skips_busy_and_held_recipients(backend: Backend) -> None:
    """Rows of skipped or held recipients stay where they are, unleased."""
    outbox = backend.outbox
    await outbox.add(
        [make_row("a", agent="alice"), make_row("b", agent="bob"), make_row("c", agent="carol")]
    )
    await backend.hold("carol")
    page = await outbox.claim_due(limit=10, now=at(1), lease_s=LEASE_S, skip_agents=["alice"])
    assert [row.key for row in page.rows] == ["b"]
    again = await outbox.claim_due(limit=10, now=at(1), lease_s=LEASE_S)
    assert [row.key for row in again.rows] == ["a"]


async def test_claim_skips_busy_recipients(backend: Backend) -> None:
    """claim_page leaves the rows of skipped recipients alone too."""
    outbox = backend.outbox
    await outbox.add([make_row("a", agent="alice"), make_row("b", agent="bob")])
    page = await outbox.claim_page(
        after_key=None, limit=10, now=at(1), lease_s=LEASE_S, skip_agents=["bob"]
    )
    assert [row.key for row in page.rows] == ["a"]


async def test_claim_pages_in_key_order_after_the_cursor(backend: Backend) -> None:
    """Pages come in key order, after the cursor, at most ``limit`` rows, ``more`` when full."""
    outbox = backend.outbox
    keys = [f"k{i:02d}" for i in range(7)]
    await outbox.add([make_row(key) for key in reversed(keys)])

    first = await outbox.claim_page(after_key=None, limit=3, now=at(0), lease_s=LEASE_S)
    assert [row.key for row in first.rows] == keys[:3]
    assert first.more is True
    assert first.last_key == "k02"

    second = await outbox.claim_page(after_key=first.last_key, limit=3, now=at(0), lease_s=LEASE_S)
    assert [row.key for row in second.rows] == keys[3:6]
    third = await outbox.claim_page(after_key=second.last_key, limit=3, now=at(0), lease_s=LEASE_S)
    assert [row.key for row in third.rows] == keys[6:]
    assert third.more is False
    assert first.claim != second.claim


async def test_empty_claim(backend: Backend) -> None:
    """Nothing due gives an empty page with no cursor and no more."""
    page = await backend.outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    assert list(page.rows) == []
    assert page.more is False
    assert page.last_key is None


async def test_leased_rows_are_not_claimed_until_the_lease_expires(backend: Backend) -> None:
    """A claimed row is invisible to other claims until its lease runs out."""
    outbox = backend.outbox
    await outbox.add([make_row("a"), make_row("b")])
    first = await outbox.claim_page(after_key=None, limit=1, now=at(0), lease_s=LEASE_S)
    assert [row.key for row in first.rows] == ["a"]

    during = await outbox.claim_page(after_key=None, limit=10, now=at(LEASE_S - 1), lease_s=LEASE_S)
    assert [row.key for row in during.rows] == ["b"]

    after = await outbox.claim_page(after_key=None, limit=10, now=at(LEASE_S), lease_s=LEASE_S)
    assert [row.key for row in after.rows] == ["a"]


async def test_release_claim_makes_rows_claimable_at_once(backend: Backend) -> None:
    """A released page's rows are claimable again before their lease would expire."""
    outbox = backend.outbox
    await outbox.add([make_row("k1"), make_row("k2")])
    page = await outbox.claim_page(after_key=None, limit=10, now=at(0), lease_s=LEASE_S)
    await release_claim(outbox, page=page)
    again = await outbox.claim_page(after_key=None, limit=10, now=at(1), lease_s=LEASE_S)
    assert [row.key for row in again.rows] == ["k1", "k2"]
    assert await store_claim(outbox, page=page, outcomes=[make_row("k1")]) == []


async def test_apply_with_a_stale_claim_stores_nothing(backend: Backend) -> None:
    """A claimer whose lease was taken over by another claim changes nothing."""
    outbox = backend.outbox
    row = make_row("a")
    await outbox.add([row])
    stale = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    fresh = await outbox.claim_page(after_key=None, limit=5, now=at(LEASE_S + 1), lease_s=LEASE_S)
    assert [r.key for r in fresh.rows] == ["a"]

    retried = replace(row, attempts=1, due_at=at(100), last_error="boom")
    assert await store_claim(outbox, page=stale, outcomes=[receipt_for(row, when=at(40))]) == []
    assert await store_claim(outbox, page=stale, outcomes=[retried]) == []
    assert await outbox.get("a") == row

    assert await store_claim(outbox, page=fresh, outcomes=[retried]) == ["a"]
    assert await outbox.get("a") == retried


async def test_receipts_replace_rows(backend: Backend) -> None:
    """An accepted row becomes a receipt under the same key, and is not claimed again."""
    outbox = backend.outbox
    rows = [make_row("a"), make_row("b")]
    await outbox.add(rows)
    page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    receipt = receipt_for(rows[0], when=at(2))
    retried = replace(rows[1], attempts=1, due_at=at(3), last_error="HTTP 500")

    assert await store_claim(outbox, page=page, outcomes=[receipt, retried]) == ["a", "b"]
    assert await outbox.get("a") == receipt
    assert await outbox.get("b") == retried
    later = await outbox.claim_page(after_key=None, limit=5, now=at(3), lease_s=LEASE_S)
    assert [row.key for row in later.rows] == ["b"]


async def test_dead_rows_stay_visible_and_are_not_claimed(backend: Backend) -> None:
    """A dead letter keeps its key, reason and error, and is never claimed."""
    outbox = backend.outbox
    row = make_row("a")
    await outbox.add([row])
    page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    dead = replace(
        row,
        state=RowState.DEAD,
        attempts=1,
        last_error="HTTP 410",
        dead_reason=DeadReason.GONE,
    )
    assert await store_claim(outbox, page=page, outcomes=[dead]) == ["a"]
    assert await outbox.get("a") == dead
    later = await outbox.claim_page(after_key=None, limit=5, now=at(1000), lease_s=LEASE_S)
    assert list(later.rows) == []


async def test_has_pending_ignores_receipts_and_dead_letters(backend: Backend) -> None:
    """Only a reply still awaiting an attempt counts as pending."""
    outbox = backend.outbox
    assert await outbox.has_pending() is False
    rows = [make_row("a"), make_row("b")]
    await outbox.add(rows)
    assert await outbox.has_pending() is True

    page = await outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=LEASE_S)
    dead = replace(rows[1], state=RowState.DEAD, dead_reason=DeadReason.REJECTED, attempts=1)
    await store_claim(outbox, page=page, outcomes=[receipt_for(rows[0], when=at(1)), dead])
    assert await outbox.has_pending() is False


async def test_next_due_at_is_the_earliest_pending(backend: Backend) -> None:
    """The next due time is the earliest pending row's, future retries included."""
    outbox = backend.outbox
    assert await outbox.next_due_at() is None
    await outbox.add([make_row("a", due=30), make_row("b", due=10), make_row("c", due=20)])
    assert await outbox.next_due_at() == at(10)

    page = await outbox.claim_page(after_key=None, limit=5, now=at(10), lease_s=LEASE_S)
    row_b = page.rows[0]
    dead = replace(row_b, state=RowState.DEAD, dead_reason=DeadReason.REJECTED, attempts=1)
    await store_claim(outbox, page=page, outcomes=[dead])
    assert await outbox.next_due_at() == at(20)


async def test_held_recipients_are_not_claimed(backend: Backend) -> None:
    """A held recipient's rows stay pending, unclaimed, until it is released."""
    outbox = backend.outbox
    await outbox.add([make_row("a", agent="held-one", due=1), make_row("b", agent="alice", due=2)])
    await backend.hold("held-one")

    page = await outbox.claim_page(after_key=None, limit=5, now=at(5), lease_s=LEASE_S)
    assert [row.key for row in page.rows] == ["b"]
    assert await outbox.has_pending() is True
    assert await outbox.next_due_at() == at(2)

    await backend.release("held-one")
    page = await outbox.claim_page(after_key=None, limit=5, now=at(5), lease_s=LEASE_S)
    assert [row.key for row in page.rows] == ["a"]
    assert (await outbox.get("a")) == make_row("a", agent="held-one", due=1)


async def test_mailroom_drains_and_swaps_receipts(backend: Backend) -> None:
    """A MailRoom over the backend posts due rows and turns accepted ones into receipts."""
    clock = FrozenClock(T0)
    transport = RecordingTransport(lambda reply: reply.to.agent_id != "flaky")
    wake = ManualWake()
    room = MailRoom(
        outbox=backend.outbox,
        transport=transport,
        wake=wake,
        clock=clock,
        schedule=RetrySchedule(jitter=0.0),
        page_size=2,
    )
    await backend.outbox.add(
        [make_row("k1"), make_row("k2", agent="flaky"), make_row("k3"), make_row("k4", due=60)]
    )

    first = await room.drain_outbox()
    assert first.delivered == ["k1"]
    assert first.retried == ["k2"]
    assert first.more is True
    second = await room.drain_outbox()
    assert second.delivered == ["k3"]
    assert second.more is False

    assert [reply.key for reply in transport.sent] == ["k1", "k2", "k3"]
    assert isinstance(await backend.outbox.get("k1"), Receipt)
    assert isinstance(await backend.outbox.get("k3"), Receipt)
    retried = await backend.outbox.get("k2")
    assert isinstance(retried, OutboxRow)
    assert retried.attempts == 1
    assert retried.due_at == at(1)
    assert await room.next_wake_at() == at(1)
    assert wake.scheduled[-1] == at(1)


async def test_claim_due_can_take_the_latest_due_first(backend: Backend) -> None:
    """With newest, the latest-due rows come first, then the earliest-due, none twice."""
    outbox = backend.outbox
    await outbox.add([make_row(key, due=index + 1) for index, key in enumerate("abcde")])
    page = await outbox.claim_due(limit=3, now=at(9), lease_s=LEASE_S, newest=1)
    assert [row.key for row in page.rows] == ["a", "b", "e"]
    assert page.more is True
    rest = await outbox.claim_due(limit=3, now=at(9), lease_s=LEASE_S, newest=2)
    assert [row.key for row in rest.rows] == ["c", "d"]
    assert rest.more is False


async def test_claim_due_with_recipients_left_out_keeps_due_order(backend: Backend) -> None:
    """Leaving recipients out, the claim still takes the others' earliest-due rows first."""
    outbox = backend.outbox
    rows = [
        make_row(f"{agent}{index}", agent=agent, due=index * 3 + offset)
        for offset, agent in enumerate(["alice", "bob", "carol", "dave"])
        for index in range(4)
    ]
    await outbox.add(rows)
    await backend.hold("dave")
    leased = await outbox.claim_due(limit=1, now=at(30), lease_s=LEASE_S)
    assert [row.key for row in leased.rows] == ["alice0"]
    page = await outbox.claim_due(limit=4, now=at(30), lease_s=LEASE_S, skip_agents=["bob"])
    # Due order over alice and carol (not alice0: leased; not bob: left out; not dave: held).
    assert [row.key for row in page.rows] == ["alice1", "alice2", "carol0", "carol1"]
    assert page.more is True
    fresh = await outbox.claim_due(
        limit=2, now=at(30), lease_s=LEASE_S, skip_agents=["bob"], newest=1
    )
    assert [row.key for row in fresh.rows] == ["carol2", "carol3"]


async def dead_letters(backend: Backend, *keys_and_agents: tuple[str, str]) -> None:
    """Store one dead letter per ``(key, agent)`` through a claim, as a drain would."""
    rows = [make_row(key, agent=agent) for key, agent in keys_and_agents]
    await backend.outbox.add(rows)
    page = await backend.outbox.claim_page(after_key=None, limit=50, now=at(0), lease_s=LEASE_S)
    dead = [
        replace(row, state=RowState.DEAD, attempts=1, dead_reason=DeadReason.GONE)
        for row in page.rows
    ]
    assert len(await store_claim(backend.outbox, page=page, outcomes=dead)) == len(rows)


async def test_replay_puts_named_dead_letters_back_with_fresh_attempts(backend: Backend) -> None:
    """A replayed dead letter is pending again, attempts 0, no reason; replaying again finds none."""
    await dead_letters(backend, ("a", "alice"), ("b", "bob"))
    assert await backend.dead.dead_recipients(agent_id="alice") == ["alice"]
    assert await backend.dead.dead_recipients() == ["alice", "bob"]
    assert await backend.dead.replay(key="a") == ["a"]
    replayed = await backend.outbox.get("a")
    assert isinstance(replayed, OutboxRow)
    assert (replayed.state, replayed.attempts, replayed.dead_reason) == (RowState.PENDING, 0, None)
    assert await backend.dead.replay(key="a") == []
    assert await backend.dead.replay(agent_id="bob") == ["b"]
    assert await backend.dead.dead_recipients() == []


async def test_replay_without_a_key_or_agent_is_refused(backend: Backend) -> None:
    """Naming neither a dead letter nor a recipient is bad input, not a replay of everything."""
    await dead_letters(backend, ("a", "alice"))
    with pytest.raises(InvalidInput):
        await backend.dead.replay()
    row = await backend.outbox.get("a")
    assert isinstance(row, OutboxRow), row
    assert row.state is RowState.DEAD


async def test_rows_in_a_callers_transaction_are_added_once(backend: Backend) -> None:
    """Rows written in the caller's transaction: new keys only, as add does."""
    assert await backend.add_rows([make_row("a"), make_row("b")], at(0)) == ["a", "b"]
    assert await backend.add_rows([make_row("a"), make_row("c")], None) == ["c"]
    assert await backend.outbox.has_pending()
