"""The operator's reads on real PostgreSQL: pages, filters, cursors, redaction, one mail's story."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from birddog import InvalidInput, JobNotFound
from birddog.ports import Listing
from birddog.postgres.admin import PostgresAdmin, decode_cursor, encode_cursor, story_mail_keys
from birddog.postgres.pool import Pool
from tests.support import enqueue, make_job
from tests.support.console import ATTEMPTS, HISTORY, HOSTILE_AGENT, HOSTILE_ERROR, HOSTILE_JOB, seed


async def walk(fetch: Callable[[str | None], Awaitable[Listing]], column: str) -> list[str]:
    """Every page from the first to the last, following cursors; ``column`` of each row."""
    values: list[str] = []
    after = None
    while True:
        page = await fetch(after)
        values += [row[column] for row in page.rows]
        if page.next_cursor is None:
            return values
        after = page.next_cursor


@pytest.fixture
def now() -> datetime:
    """The wall clock time, so the seed agrees with the database clock."""
    return datetime.now(UTC)


async def test_overview_counts_states_activity_and_live_processes(
    pg_pool: Pool, now: datetime
) -> None:
    """The overview counts rows and jobs by state and buckets the last hour's deliveries."""
    await seed(pg_pool, now=now)
    await pg_pool.execute(
        "UPDATE birddog.daemons SET seen_at = now() - interval '1 hour' WHERE kind = 'worker'"
    )
    overview = await PostgresAdmin(pg_pool).overview(now=now)
    assert (overview.outbox["pending"], overview.outbox["dead"], overview.outbox["held"]) == (
        1,
        1,
        1,
    )
    assert overview.jobs == {"queued": 1, "running": 1, "settled": 2}
    assert len(overview.activity) == 60
    minutes = [minute for minute, _, _ in overview.activity]
    assert minutes == sorted(minutes)
    assert minutes[-1] == now.replace(second=0, microsecond=0)
    # The history reaches back 58 minutes; the seed's own delivery is now.
    assert sum(delivered for _, delivered, _ in overview.activity) == HISTORY + 1
    assert sum(dead for _, _, dead in overview.activity) == 1
    assert [d["daemon_id"] for d in overview.daemons] == ["drain:host-a:4242"]


async def test_pending_filters_by_recipient_and_status_and_pages(
    pg_pool: Pool, now: datetime
) -> None:
    """Pending rows filter by recipient and status, and a cursor walks every row once."""
    await seed(pg_pool, now=now)
    admin = PostgresAdmin(pg_pool)
    held = await admin.pending(status="held")
    assert [(r["key"], r["status"], r["held"]) for r in held.rows] == [
        ("outbox:mail-job-1:reply:1", "held", True)
    ]
    assert (await admin.pending(status="due")).rows == []
    assert (await admin.pending(recipient="alice")).rows == []
    assert len((await admin.pending(recipient="carol")).rows) == 1

    await pg_pool.execute(
        "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id, in_reply_to, "
        "command_id, outcome, reply, state, due_at, created_at) "
        "SELECT 'outbox:bulk-' || lpad(i::text, 3, '0') || ':reply:0', 'bob', 's-bob', "
        "'bulk-' || i, 'cmd', 'completed', '{}'::jsonb, 'pending', "
        "now() + (i % 7) * interval '1 s', now() FROM generate_series(1, 25) AS i"
    )
    seen = await walk(lambda after: admin.pending(recipient="bob", after=after, limit=10), "key")
    assert len(seen) == 25 == len(set(seen))
    everything = await admin.pending(recipient="bob", limit=100)
    assert [row["key"] for row in everything.rows] == seen
    assert everything.next_cursor is None


async def test_dead_letters_show_reason_error_and_attempt_log(pg_pool: Pool, now: datetime) -> None:
    """A dead letter comes with its reason, its last error as stored, and its attempt log."""
    seeded = await seed(pg_pool, now=now)
    page = await PostgresAdmin(pg_pool).dead()
    assert [row["key"] for row in page.rows] == [seeded.dead_key]
    row = page.rows[0]
    assert (row["recipient_agent_id"], row["dead_reason"]) == (HOSTILE_AGENT, "unknown_recipient")
    assert row["last_error"] == HOSTILE_ERROR
    assert row["attempt_log"] == ATTEMPTS
    assert (await PostgresAdmin(pg_pool).dead(recipient="alice")).rows == []


async def test_routes_redact_urls_and_never_carry_a_secret(pg_pool: Pool, now: datetime) -> None:
    """Routes show URL without credentials or query, hold state and counts, and no secret."""
    await seed(pg_pool, now=now)
    page = await PostgresAdmin(pg_pool).routes()
    by_agent = {row["agent_id"]: row for row in page.rows}
    assert list(by_agent) == ["alice", "carol", "dave", HOSTILE_AGENT]  # mallory: since death
    assert (
        by_agent["alice"]["url"] == "https://[redacted]@alice.example/inbox?[redacted]#[redacted]"
    )
    assert (by_agent["carol"]["enabled"], by_agent["carol"]["pending"]) == (False, 1)
    assert by_agent["carol"]["held_at"] is not None
    assert (by_agent["dave"]["kind"], by_agent["dave"]["url"]) == ("mailbox", None)
    flat = repr(page.rows)
    assert "whsec_" not in flat
    assert "hunter2" not in flat
    assert "sekrit" not in flat
    assert not any("secret" in column for column in page.rows[0])

    first = await PostgresAdmin(pg_pool).routes(limit=2)
    assert [row["agent_id"] for row in first.rows] == ["alice", "carol"]
    rest = await PostgresAdmin(pg_pool).routes(after=first.next_cursor, limit=3)
    assert [row["agent_id"] for row in rest.rows] == ["dave", HOSTILE_AGENT]
    assert rest.next_cursor is None


async def test_jobs_order_by_state_filter_and_page(pg_pool: Pool, now: datetime) -> None:
    """Jobs list running, then queued (oldest first), then settled (newest first), by cursor."""
    seeded = await seed(pg_pool, now=now)
    admin = PostgresAdmin(pg_pool)
    every = await admin.jobs()
    assert [(r["job_id"], r["state"]) for r in every.rows] == [
        (seeded.running_job, "running"),
        (seeded.queued_job, "queued"),
        (HOSTILE_JOB, "settled"),
        ("job-1", "settled"),
    ]
    assert every.rows[0]["mail_key"] == f"mail-{seeded.running_job}"
    assert every.rows[0]["sender_agent_id"] == "alice"
    assert [r["job_id"] for r in (await admin.jobs(state="queued")).rows] == [seeded.queued_job]
    assert [r["job_id"] for r in (await admin.jobs(queue="s-run")).rows] == [seeded.running_job]

    walked = await walk(lambda after: admin.jobs(after=after, limit=1), "job_id")
    assert walked == [row["job_id"] for row in every.rows]


async def test_more_queued_jobs_than_a_page_walk_in_enqueue_order(pg_pool: Pool) -> None:
    """Queued jobs page oldest first, each exactly once, however the page size cuts them."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(7):
        await enqueue(pg_pool, make_job(f"q-{i}"), created_at=base + timedelta(seconds=i // 2))
    admin = PostgresAdmin(pg_pool)
    walked = await walk(lambda after: admin.jobs(state="queued", after=after, limit=3), "job_id")
    assert walked == [f"q-{i}" for i in range(7)]


async def test_bad_filters_and_cursors_are_refused_by_name(pg_pool: Pool) -> None:
    """A bad status, state, limit or cursor is an InvalidInput naming the field."""
    admin = PostgresAdmin(pg_pool)
    with pytest.raises(InvalidInput) as status:
        await admin.pending(status="lost")
    assert status.value.field == "status"
    with pytest.raises(InvalidInput) as state:
        await admin.jobs(state="done")
    assert state.value.field == "state"
    with pytest.raises(InvalidInput) as limit:
        await admin.dead(limit=0)
    assert limit.value.field == "limit"
    for bad in ("not base64!", encode_cursor("x"), encode_cursor(1, "not a time", "j"), "e30"):
        with pytest.raises(InvalidInput) as cursor:
            await admin.jobs(after=bad)
        assert cursor.value.field == "after"


def test_cursor_round_trips_times_and_keys() -> None:
    """A cursor gives back the exact time and key it was made from."""
    when = datetime(2026, 1, 1, 12, 30, 15, 123456, tzinfo=UTC)
    assert decode_cursor(encode_cursor(2, when, "k:ü"), (int, datetime, str)) == [2, when, "k:ü"]


def test_story_tries_the_key_and_the_mail_of_a_reply_key() -> None:
    """A reply key also names its mail; any other key is tried as it is."""
    assert story_mail_keys("outbox:m:reply:3") == ["outbox:m:reply:3", "m"]
    assert story_mail_keys("job-1") == ["job-1"]


@pytest.mark.parametrize("how", ["mail key", "reply key", "job id", "other reply key"])
async def test_story_of_one_mail_by_any_of_its_names(
    pg_pool: Pool, now: datetime, how: str
) -> None:
    """Mail key, either reply key or job id tell the same story: job, replies, receipt, attempts."""
    seeded = await seed(pg_pool, now=now)
    key = {
        "mail key": seeded.mail_key,
        "reply key": seeded.delivered_key,
        "job id": "job-1",
        "other reply key": seeded.held_key,
    }[how]
    story = await PostgresAdmin(pg_pool).story(key)
    assert story.found
    assert story.mail_keys == [seeded.mail_key]
    assert [job["job_id"] for job in story.jobs] == ["job-1"]
    job = story.jobs[0]
    assert (job["state"], job["outcome"], job["content_preview"]) == (
        "settled",
        "completed",
        "please",
    )
    assert job["mail"]["replyTo"][1]["agentId"] == "carol"
    assert "content" not in job["mail"]
    assert [(r["key"], r["state"]) for r in story.replies] == [(seeded.held_key, "pending")]
    assert [r["key"] for r in story.receipts] == [seeded.delivered_key]
    assert story.receipts[0]["attempt_log"] == ATTEMPTS
    assert story.mailbox == []


async def test_story_keeps_other_mails_that_merely_share_a_prefix_out(pg_pool: Pool) -> None:
    """Replies of mail 'm:reply:0' never show in the story of mail 'm'."""
    await pg_pool.execute(
        "INSERT INTO birddog.receipts (key, delivered_at, attempts, recipient_agent_id, "
        "recipient_session_id, command_id, outcome) VALUES "
        "('outbox:m:reply:0', now(), 1, 'a', 's', 'c', 'completed'), "
        "('outbox:m:reply:0:reply:0', now(), 1, 'a', 's', 'c', 'completed')"
    )
    story = await PostgresAdmin(pg_pool).story("m")
    assert [r["key"] for r in story.receipts] == ["outbox:m:reply:0"]


async def test_story_of_nothing_is_empty_and_job_lookup_names_the_id(pg_pool: Pool) -> None:
    """An unknown key tells an empty story; an unknown job id is JobNotFound."""
    story = await PostgresAdmin(pg_pool).story("no-such-thing")
    assert not story.found
    assert story.mail_keys == []
    with pytest.raises(JobNotFound):
        await PostgresAdmin(pg_pool).job("no-such-job")


async def test_story_shows_a_mailbox_delivery(pg_pool: Pool) -> None:
    """A reply delivered into the mailbox table shows as the mail's mailbox row."""
    await pg_pool.execute(
        "INSERT INTO birddog.mailbox (key, agent_id, session_id, in_reply_to, command_id, "
        "outcome, reply, delivered_at) VALUES ('outbox:mb-1:reply:0', 'dave', 's-dave', "
        "'mb-1', 'cmd', 'completed', '{}'::jsonb, now())"
    )
    story = await PostgresAdmin(pg_pool).story("outbox:mb-1:reply:0")
    assert [row["agent_id"] for row in story.mailbox] == ["dave"]
    assert story.mail_keys == ["mb-1"]


async def test_the_mail_key_lookup_uses_its_index(pg_pool: Pool) -> None:
    """Finding a job by its mail key reads jobs_mail_key_idx, not every job."""
    async with pg_pool.acquire() as conn:
        await conn.execute("SET enable_seqscan = off")
        plan = await conn.fetchval(
            "EXPLAIN SELECT job_id FROM birddog.jobs "
            "WHERE (payload #>> '{mail,key}') = ANY($1::text[])",
            ["m"],
        )
    assert "jobs_mail_key_idx" in plan
