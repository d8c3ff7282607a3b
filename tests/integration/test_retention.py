"""Retention, opt-in: prune deletes in batches what is older than asked, and nothing else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from birddog.core.retention import RetentionPolicy
from birddog.postgres.daemons import EXPIRE_S, PostgresDaemons
from birddog.postgres.pool import Pool
from birddog.postgres.retention import PostgresRetention
from birddog.settings import Settings
from birddog.testing import FrozenClock

DAY_S = 86400.0


async def _seed(pool: Pool, clock: FrozenClock) -> None:
    """Old and young rows of every kind: 10 old receipts, 2 young, and so on."""
    now = clock.now()
    old = now - timedelta(days=40)
    young = now - timedelta(days=1)
    for index in range(12):
        delivered = old if index < 10 else young
        await pool.execute(
            "INSERT INTO birddog.receipts (key, delivered_at, attempts, recipient_agent_id,"
            " recipient_session_id, command_id, outcome) VALUES ($1, $2, 1, 'a', 's', 'c',"
            " 'completed')",
            f"outbox:m{index}:reply:0",
            delivered,
        )
    for index, (state, settled) in enumerate(
        [("settled", old), ("settled", old), ("settled", young), ("queued", None)]
    ):
        await pool.execute(
            "INSERT INTO birddog.jobs (job_id, queue, lane, state, payload, outcome,"
            " settled_at, created_at) VALUES ($1, 'q', 'default', $2, '{}'::jsonb,"
            " CASE WHEN $2 = 'settled' THEN 'completed' END, $3, $4)",
            f"job-{index}",
            state,
            settled,
            old,
        )
    for index, (state, dead_at) in enumerate([("dead", old), ("dead", young), ("pending", None)]):
        await pool.execute(
            "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id,"
            " in_reply_to, command_id, outcome, reply, state, due_at, created_at, dead_at,"
            " dead_reason) VALUES ($1, 'a', 's', 'm', 'c', 'completed', '{}'::jsonb, $2, $3,"
            " $3, $4, CASE WHEN $2 = 'dead' THEN 'gone' END)",
            f"outbox:d{index}:reply:0",
            state,
            old,
            dead_at,
        )
    for index, read_at in enumerate([old, young, None]):
        await pool.execute(
            "INSERT INTO birddog.mailbox (key, agent_id, session_id, in_reply_to, command_id,"
            " outcome, reply, delivered_at, read_at) VALUES ($1, 'a', 's', 'm', 'c',"
            " 'completed', '{}'::jsonb, $2, $3)",
            f"outbox:b{index}:reply:0",
            old,
            read_at,
        )


async def _keys(pool: Pool, sql: str) -> list[Any]:
    return sorted(row[0] for row in await pool.fetch(sql))


async def test_prune_deletes_in_batches_only_what_is_past_the_cut_off(pg_pool: Pool) -> None:
    """Old receipts, settled jobs, dead letters and read mailbox rows go; nothing else does."""
    clock = FrozenClock()
    await _seed(pg_pool, clock)
    retention = PostgresRetention(pg_pool, clock=clock, batch=3)
    report = await retention.prune(
        RetentionPolicy(
            receipts_s=30 * DAY_S,
            jobs_settled_s=7 * DAY_S,
            dead_s=30 * DAY_S,
            mailbox_read_s=DAY_S * 7,
        )
    )
    assert (report.receipts, report.jobs, report.dead_letters, report.mailbox) == (10, 2, 1, 1)
    assert report.total == 14
    assert await _keys(pg_pool, "SELECT key FROM birddog.receipts") == [
        "outbox:m10:reply:0",
        "outbox:m11:reply:0",
    ]
    # A young settled job and a queued job, however old, stay.
    assert await _keys(pg_pool, "SELECT job_id FROM birddog.jobs") == ["job-2", "job-3"]
    # The young dead letter and the old pending row (owed mail is never pruned) stay.
    assert await _keys(pg_pool, "SELECT key FROM birddog.outbox") == [
        "outbox:d1:reply:0",
        "outbox:d2:reply:0",
    ]
    # Unread mailbox rows are never pruned, however old.
    assert await _keys(pg_pool, "SELECT key FROM birddog.mailbox") == [
        "outbox:b1:reply:0",
        "outbox:b2:reply:0",
    ]
    again = await retention.prune(RetentionPolicy(receipts_s=30 * DAY_S))
    assert again.total == 0


async def test_receipts_are_kept_when_no_retention_is_set(pg_pool: Pool) -> None:
    """With only a job retention, every receipt stays, however old."""
    clock = FrozenClock()
    await _seed(pg_pool, clock)
    report = await PostgresRetention(pg_pool, clock=clock).prune(
        RetentionPolicy(jobs_settled_s=DAY_S)
    )
    assert report.receipts == 0
    assert len(await _keys(pg_pool, "SELECT key FROM birddog.receipts")) == 12
    assert RetentionPolicy().empty
    assert Settings().retention().empty


def test_retention_settings_read_durations(monkeypatch: Any) -> None:
    """BIRDDOG_RETAIN_* take durations such as 30d and 7d; unset keeps everything."""
    monkeypatch.setenv("BIRDDOG_RETAIN_RECEIPTS_S", "30d")
    monkeypatch.setenv("BIRDDOG_RETAIN_JOBS_S", "7d")
    monkeypatch.setenv("BIRDDOG_RETAIN_DEAD_S", "")
    policy = Settings().retention()
    assert policy.receipts_s == 30 * DAY_S
    assert policy.jobs_settled_s == 7 * DAY_S
    assert policy.dead_s is None


async def test_stale_daemon_rows_expire_on_their_own(pg_pool: Pool) -> None:
    """Daemons killed without a clean stop leave rows a live one deletes later, but the last.

    The last drain daemon's row stays, so `birddog check` can say when it beat and that it
    vanished.
    """
    await pg_pool.execute(
        "INSERT INTO birddog.daemons (daemon_id, kind, host, pid, started_at, seen_at) VALUES"
        " ('drain:gone:1', 'drain', 'gone', 1, now(), now() - make_interval(secs => $1 + 60)),"
        " ('drain:gone:2', 'drain', 'gone', 2, now(), now() - make_interval(secs => $1))",
        EXPIRE_S + 60,
    )
    live = PostgresDaemons(pg_pool, kind="worker")
    await live.seen()
    rows = await pg_pool.fetch("SELECT daemon_id FROM birddog.daemons ORDER BY daemon_id")
    assert [row["daemon_id"] for row in rows] == ["drain:gone:2", live.daemon_id]
