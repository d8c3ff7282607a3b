"""The durable ask in the library: send, wait in the mailbox, answer or raise; refusals.

The worker is played by the test; the settlement itself delivers the reply into the
asker's mailbox (a mailbox route needs no drain). The acceptance tests run the real
worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from birddog import (
    AgentAddress,
    AskFailed,
    Asking,
    AskTimedOut,
    InvalidInput,
    JobConflict,
    Outcome,
    UnknownAgent,
    open_asking,
)
from birddog.clock import SystemClock
from birddog.core.ask import ask_job_id
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import answer_next_job, enqueue, make_job, until_listening

TARGET = "upper:s-upper"
ASKER = "asker:s-ask"


@pytest.fixture
async def asking(pg_pool: Pool, database_url: str) -> AsyncIterator[Asking]:
    async with open_asking(pg_pool, database_url) as asking:
        yield asking


@pytest.fixture
async def routes(pg_pool: Pool) -> PostgresRoutes:
    routes = PostgresRoutes(pg_pool, cache_s=0, clock=SystemClock())
    await routes.add("upper", kind="mailbox")
    return routes


async def counts(pool: Pool) -> tuple[int, int]:
    jobs = await pool.fetchval("SELECT count(*) FROM birddog.jobs")
    routes = await pool.fetchval("SELECT count(*) FROM birddog.routes")
    return jobs, routes


@pytest.mark.usefixtures("routes")
async def test_an_answered_ask_returns_the_content(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """The content of a completed reply is the answer; the asker got a mailbox; it is read."""
    asked = asyncio.create_task(asking.ask(to=TARGET, from_=ASKER, content="hello", key="k-1"))
    job_id = await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HELLO")
    assert await asyncio.wait_for(asked, 60) == "HELLO"
    assert job_id == ask_job_id("k-1")
    route = await PostgresRoutes(pg_pool, clock=SystemClock()).route("asker")
    assert route is not None
    assert route.kind == "mailbox"
    assert await PostgresMailbox(pg_pool, clock=SystemClock()).read("asker") == []


@pytest.mark.usefixtures("routes")
async def test_another_outcome_raises_with_the_diagnostic(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """A failed reply raises AskFailed carrying the outcome and diagnostic; never an answer."""
    asked = asyncio.create_task(asking.ask(to=TARGET, from_=ASKER, content="hello", key="k-2"))
    await answer_next_job(pg_pool, jobs, Outcome.FAILED, "", "exit status 3: no such file")
    with pytest.raises(AskFailed) as caught:
        await asyncio.wait_for(asked, 60)
    assert (caught.value.key, caught.value.outcome, caught.value.diagnostic) == (
        "k-2",
        "failed",
        "exit status 3: no such file",
    )
    assert "ended failed: exit status 3: no such file" in str(caught.value)


@pytest.mark.usefixtures("routes")
async def test_a_timeout_says_the_reply_is_owed_and_it_lands_later(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """No reply in time raises AskTimedOut naming the key; the late reply lands in the mailbox."""
    with pytest.raises(AskTimedOut) as caught:
        await asking.ask(to=TARGET, from_=ASKER, content="slow one", key="k-3", timeout_s=0.3)
    assert caught.value.key == "k-3"
    assert "k-3" in str(caught.value)
    assert "still owed" in str(caught.value)
    assert "birddog inbox asker:s-ask" in str(caught.value)
    await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "late but here")
    [late] = await PostgresMailbox(pg_pool, clock=SystemClock()).read("asker", "s-ask")
    assert (late.in_reply_to, late.content) == ("k-3", "late but here")


@pytest.mark.usefixtures("routes")
async def test_the_same_key_is_the_same_question(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """Asking twice with one key makes one job; the second waits for the same reply."""
    first = await asking.send_ask(to=TARGET, from_=ASKER, content="hello", key="k-4")
    again = await asking.send_ask(to=TARGET, from_=ASKER, content="hello", key="k-4")
    assert (first.replay, again.replay) == (False, True)
    assert (first.mailbox_added, again.mailbox_added) == (True, False)
    assert await counts(pg_pool) == (1, 2)
    await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HELLO")
    # A repeat after the answer was read still gets it: the reply to that key.
    assert await asking.ask(to=TARGET, from_=ASKER, content="hello", key="k-4") == "HELLO"
    assert await asking.ask(to=TARGET, from_=ASKER, content="hello", key="k-4") == "HELLO"
    assert await counts(pg_pool) == (1, 2)


@pytest.mark.usefixtures("routes")
async def test_the_same_key_with_another_question_is_refused(asking: Asking, pg_pool: Pool) -> None:
    """A key already used for another question, target or asker is a conflict naming it."""
    await asking.send_ask(to=TARGET, from_=ASKER, content="hello", key="k-5")
    with pytest.raises(JobConflict, match="different content"):
        await asking.send_ask(to=TARGET, from_=ASKER, content="other", key="k-5")
    with pytest.raises(JobConflict, match="different from, replyTo"):
        await asking.send_ask(to=TARGET, from_="asker:s-2", content="hello", key="k-5")
    assert await counts(pg_pool) == (1, 2)


@pytest.mark.usefixtures("routes")
async def test_concurrent_asks_with_one_key_make_one_job(asking: Asking, pg_pool: Pool) -> None:
    """Two asks racing with the same key: one sends, the other is its replay."""
    both = await asyncio.gather(
        *(asking.send_ask(to=TARGET, from_=ASKER, content="hello", key="k-6") for _ in range(2))
    )
    assert sorted(asked.replay for asked in both) == [False, True]
    assert await counts(pg_pool) == (1, 2)


async def test_without_a_key_a_fresh_one_is_made(
    asking: Asking, pg_pool: Pool, routes: PostgresRoutes
) -> None:
    """Each ask without a key is a new question with a new key."""
    one = await asking.send_ask(to=TARGET, from_=ASKER, content="hello")
    two = await asking.send_ask(to=TARGET, from_=ASKER, content="hello")
    assert one.key != two.key
    assert one.key.startswith("ask-")
    assert (one.replay, two.replay) == (False, False)


async def test_an_unknown_target_is_refused_before_anything_is_written(
    asking: Asking, pg_pool: Pool
) -> None:
    """An agent without a route whose session was never sent work cannot be asked."""
    with pytest.raises(UnknownAgent) as caught:
        await asking.ask(to="nobody:s-x", from_=ASKER, content="hello", timeout_s=1)
    assert caught.value.field == "to"
    assert "nobody:s-x" in str(caught.value)
    assert await counts(pg_pool) == (0, 0)


@pytest.mark.usefixtures("routes")
async def test_a_session_sent_work_before_can_be_asked(asking: Asking, pg_pool: Pool) -> None:
    """An agent without a route is known once its own session was sent work, not another's."""
    await enqueue(pg_pool, make_job("first", agent="unrouted", session="s-upper"))
    asked = await asking.send_ask(to="unrouted:s-upper", from_=ASKER, content="x", key="k-8")
    assert asked.to == AgentAddress(agent_id="unrouted", session_id="s-upper")
    # Session ids are the sender's to choose: another agent's s-upper says nothing of this one.
    with pytest.raises(UnknownAgent):
        await asking.send_ask(to="stranger:s-upper", from_=ASKER, content="x", key="k-9")


@pytest.mark.usefixtures("routes")
async def test_an_asker_with_an_inbox_url_gets_its_answer_in_the_mailbox(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs, routes: PostgresRoutes
) -> None:
    """An asker whose route posts to a URL asks anyway: the reply to it lands in its mailbox.

    Its ask's job is marked ``askerMailbox``; the settlement delivers that reply with its
    receipt, and no outbox row is left for the URL. The route stays what it was.
    """
    await routes.add("poster", "http://127.0.0.1:9/inbox")
    asked = asyncio.create_task(
        asking.ask(to=TARGET, from_="poster:s-p", content="hello", key="k-url", timeout_s=60)
    )
    job_id = await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HELLO")
    assert await asyncio.wait_for(asked, 60) == "HELLO"
    payload = await pg_pool.fetchval(
        "SELECT payload ->> 'askerMailbox' FROM birddog.jobs WHERE job_id = $1", job_id
    )
    assert payload == "true"
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0
    route = await routes.route("poster")
    assert route is not None
    assert route.kind == "http"


@pytest.mark.usefixtures("routes")
@pytest.mark.parametrize("held", [False, True], ids=["url", "held-mailbox"])
async def test_other_replies_to_an_asker_with_an_inbox_url_still_go_to_its_url(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs, routes: PostgresRoutes, *, held: bool
) -> None:
    """A plain send is not marked: its reply waits in the outbox for the URL (or a release).

    Unchanged by every ask being marked: a send from an agent whose route posts to a URL,
    or whose mailbox route is held, has its reply follow that route.
    """
    if held:
        await routes.add("poster", kind="mailbox", enabled=False)
    else:
        await routes.add("poster", "http://127.0.0.1:9/inbox")
    await asking.send(to=TARGET, from_="poster:s-p", content="fyi", key="k-send")
    claimed = await jobs.claim(lease_s=30)
    assert claimed is not None
    assert "askerMailbox" not in claimed.job.payload
    [key] = await jobs.settle(
        job_id=claimed.job.job_id,
        claim_token=claimed.claim_token,
        outcome=Outcome.COMPLETED,
        content="noted",
    )
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox WHERE key = $1", key) == 1
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.mailbox") == 0


TO_A_URL = (
    "UPDATE birddog.routes SET kind = 'http', url = 'http://127.0.0.1:9/inbox', "
    "secret = 'whsec_c2VjcmV0' WHERE agent_id = $1"
)
"""The asker's mailbox route becomes an inbox URL (as an operator's edit would)."""

HELD = "UPDATE birddog.routes SET enabled = false, held_at = now() WHERE agent_id = $1"
"""The asker's route is held (as ``birddog route hold`` holds it)."""


@pytest.mark.usefixtures("routes")
@pytest.mark.parametrize("change", [TO_A_URL, HELD], ids=["to-a-url", "held"])
async def test_an_ask_is_answered_in_the_mailbox_whatever_its_route_became(
    asking: Asking, pg_pool: Pool, jobs: PostgresJobs, change: str
) -> None:
    """The asker's route changes between the ask and the answer: the answer still comes.

    The ask is marked when it is sent (every ask is), so the settlement puts the reply
    to the asker in its mailbox, with its receipt, whatever the route has become; nothing
    is owed to the URL, nothing waits for a release.
    """
    asked = await asking.send_ask(to=TARGET, from_=ASKER, content="hello", key="k-moved")
    assert asked.mailbox_added
    await pg_pool.execute(change, "asker")
    await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HELLO")
    assert await asking.wait("k-moved", asked.asker, timeout_s=30) == "HELLO"
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts") == 1


@pytest.mark.usefixtures("routes")
@pytest.mark.parametrize(
    ("to", "from_", "key", "field"),
    [
        ("no-colon", ASKER, "k", "to"),
        (TARGET, ":s", "k", "from.agentId"),
        (TARGET, ASKER, "bad\x1bkey", "key"),
        (TARGET, ASKER, "", "key"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    asking: Asking, pg_pool: Pool, to: str, from_: str, *, key: str, field: str
) -> None:
    """Bad addresses and keys are refused, naming the field, with nothing written."""
    with pytest.raises(InvalidInput) as caught:
        await asking.send_ask(to=to, from_=from_, content="hello", key=key)
    assert caught.value.field == field
    assert await counts(pg_pool) == (0, 1)


@pytest.mark.usefixtures("routes")
async def test_the_wait_wakes_on_the_mailbox_notification(
    pg_pool: Pool, database_url: str, jobs: PostgresJobs
) -> None:
    """With a poll far beyond the timeout, only the NOTIFY can deliver the answer in time."""
    async with open_asking(pg_pool, database_url, poll_s=600) as slow:
        asking = asyncio.create_task(
            slow.ask(to=TARGET, from_=ASKER, content="hi", key="k-9", timeout_s=30)
        )
        await until_listening(pg_pool)
        await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HI")
        assert await asyncio.wait_for(asking, 60) == "HI"


@pytest.mark.usefixtures("routes")
async def test_a_reply_that_lands_unnoticed_by_the_deadline_is_an_answer(
    pg_pool: Pool, jobs: PostgresJobs
) -> None:
    """No listener and no poll before the deadline: the last look finds the reply and answers."""
    async with open_asking(pg_pool, None, poll_s=600) as slow:
        asked = asyncio.create_task(
            slow.ask(to=TARGET, from_=ASKER, content="hello", key="k-seen", timeout_s=8)
        )
        await answer_next_job(pg_pool, jobs, Outcome.COMPLETED, "HELLO")
        assert not asked.done()  # delivered, but this wait neither heard nor looked again
        assert await asyncio.wait_for(asked, 60) == "HELLO"


@pytest.mark.usefixtures("routes")
async def test_a_timeout_carries_where_the_ask_stands(asking: Asking) -> None:
    """AskTimedOut.facts says queued, in the target's session, with no worker beating."""
    with pytest.raises(AskTimedOut) as caught:
        await asking.ask(to=TARGET, from_=ASKER, content="anyone?", key="k-q", timeout_s=0.3)
    facts = caught.value.facts
    assert facts is not None
    assert (facts.state, facts.queue, facts.workers_recent) == ("queued", "s-upper", 0)
    assert "nobody has taken it" in str(caught.value)
