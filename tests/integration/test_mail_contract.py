"""The mail ports' contract: the ask store and the mailboxes, on the fakes and on PostgreSQL.

The mail service's unit tests run on InMemoryAsks and InMemoryMailbox; these tests hold
both to PostgresAsks and PostgresMailbox: the checks of a send (a known target, the
asker's mailbox, the key's replay rules), an unchecked write, where an ask stands, and a
reply in a mailbox waited for, listed, read and acknowledged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    JobConflict,
    Mail,
    Outcome,
    UnknownAgent,
    agent_job,
)
from birddog.core.ask import ask_job
from birddog.core.ask_facts import AskState
from birddog.core.jobs import Job
from birddog.core.spool import Outgoing
from birddog.ports import AskStore, Mailbox, RouteEdits
from birddog.postgres.asks import PostgresAsks
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import (
    FrozenClock,
    InMemoryAsks,
    InMemoryJobs,
    InMemoryMailbox,
    InMemoryOutbox,
    InMemoryRoutes,
)
from tests.support import T0, answer_next_job, mailbox_on

PORTS = ("AskStore", "Answers", "Mailbox")
"""The ports these tests hold their fakes and their Postgres adapters to."""

UPPER = AgentAddress(agent_id="upper", session_id="s-upper")
ASKER = AgentAddress(agent_id="asker", session_id="s-ask")
STEP_S = 10.0


@dataclass
class Backend:
    """The ask store and mailboxes under test, their routes, and the worker and drain."""

    name: str
    asks: AskStore
    mailbox: Mailbox
    routes: RouteEdits
    answer: Callable[[Outcome, str], Awaitable[None]]


@pytest.fixture
async def memory_backend() -> Backend:
    """The fakes, wired as the composition root wires the adapters."""
    clock = FrozenClock(T0)
    outbox = InMemoryOutbox(clock=clock)
    jobs = InMemoryJobs(clock=clock, outbox=outbox)
    routes = InMemoryRoutes(clock=clock, outbox=outbox)
    mailbox = InMemoryMailbox(clock=clock)
    asks = InMemoryAsks(jobs=jobs, routes=routes, mailbox=mailbox)

    async def answer(outcome: Outcome, content: str) -> None:
        claimed = await jobs.claim(lease_s=30)
        assert claimed is not None
        keys = await jobs.settle(
            job_id=claimed.job.job_id,
            claim_token=claimed.claim_token,
            outcome=outcome,
            content=content,
        )
        for key in keys:
            mailbox.deliver(outbox.rows[key].reply)

    await routes.add("upper", kind="mailbox")
    return Backend("memory", asks, mailbox, routes, answer)


@pytest.fixture
async def postgres_backend(pg_pool: Pool) -> AsyncIterator[Backend]:
    """PostgresAsks and PostgresMailbox on a fresh database (waits poll)."""
    clock = FrozenClock(T0)
    jobs = PostgresJobs(pg_pool, clock=clock)

    async def answer(outcome: Outcome, content: str) -> None:
        await answer_next_job(pg_pool, jobs, outcome, content)

    routes = PostgresRoutes(pg_pool, cache_s=0, clock=clock)
    await routes.add("upper", kind="mailbox")
    async with mailbox_on(pg_pool, None, poll_s=0.05) as mailbox:
        yield Backend("postgres", PostgresAsks(pg_pool), mailbox, routes, answer)


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn, the target ``upper`` a mailbox route."""
    result: Backend = request.getfixturevalue(request.param)
    return result


def question(content: str = "hi", *, key: str = "k-1", asker: AgentAddress = ASKER) -> Outgoing:
    """An ask's mail, checked, its asker given a mailbox route when it has none."""
    job = ask_job(
        to=UPPER,
        asker=asker,
        content=content,
        key=key,
        created_at_ms=1_767_225_600_000,
        max_content_bytes=1 << 20,
    )
    return Outgoing(job=job, checked=True, mailbox_for=asker, require_mailbox=True)


def plain_job(job_id: str, *, created_at: int) -> Job:
    """A job as ``birddog send --job-id`` makes it, to ``upper``."""
    mail = Mail(
        key=f"mail-{job_id}",
        to=UPPER,
        from_=ASKER,
        reply_to=[ASKER],
        content="as it is",
        created_at=created_at,
    )
    work = AgentWork(job_id=job_id, session_id=UPPER.session_id, command_fact_id="c")
    return agent_job(work, mail)


async def test_a_checked_send_writes_once_and_a_repeat_is_a_replay(backend: Backend) -> None:
    """The first write enqueues and gives the asker a mailbox; the same mail again is a replay."""
    first = await backend.asks.write(question(), timeout_s=STEP_S)
    again = await backend.asks.write(question(), timeout_s=STEP_S)
    assert (first.replay, first.mailbox_added) == (False, True)
    assert (again.replay, again.mailbox_added) == (True, False)
    route = await backend.routes.route("asker")
    assert route is not None
    assert route.kind == "mailbox"
    mail = await backend.asks.mail("k-1", timeout_s=STEP_S)
    assert mail is not None
    assert mail.content == "hi"


async def test_the_same_key_with_another_mail_is_a_conflict(backend: Backend) -> None:
    """Another content under a key sent before is refused, naming the field."""
    await backend.asks.write(question(), timeout_s=STEP_S)
    with pytest.raises(JobConflict, match="content"):
        await backend.asks.write(question("other"), timeout_s=STEP_S)


async def test_an_unknown_target_is_refused_and_nothing_written(backend: Backend) -> None:
    """A target without a route, never sent work, is UnknownAgent; no mail under the key."""
    job = ask_job(
        to=AgentAddress(agent_id="nobody", session_id="s-x"),
        asker=ASKER,
        content="hi",
        key="k-x",
        created_at_ms=1,
        max_content_bytes=1 << 20,
    )
    with pytest.raises(UnknownAgent):
        await backend.asks.send(job, mailbox_for=ASKER, require_mailbox=True, timeout_s=STEP_S)
    assert await backend.asks.mail("k-x", timeout_s=STEP_S) is None
    assert await backend.routes.route("asker") is None


async def test_an_asker_posting_to_a_url_gets_its_answer_in_its_mailbox(
    backend: Backend,
) -> None:
    """An asker whose route posts to an inbox URL may ask: the reply lands in its mailbox."""
    poster = AgentAddress(agent_id="poster", session_id="s-p")
    await backend.routes.add("poster", "https://poster.example/inbox")
    posted = await backend.asks.write(question(asker=poster), timeout_s=STEP_S)
    assert (posted.replay, posted.mailbox_added) == (False, False)
    await backend.answer(Outcome.COMPLETED, "HI")
    entry = await backend.mailbox.wait("k-1", STEP_S, owner=poster)
    assert entry is not None
    assert entry.content == "HI"
    route = await backend.routes.route("poster")
    assert route is not None
    assert route.kind == "http"


async def test_a_mailbox_is_given_once(backend: Backend) -> None:
    """ensure_mailbox adds a route to an agent without one, then finds it there."""
    assert await backend.asks.ensure_mailbox("fresh", timeout_s=STEP_S) is True
    assert await backend.asks.ensure_mailbox("fresh", timeout_s=STEP_S) is False
    assert await backend.asks.ensure_mailbox("upper", timeout_s=STEP_S) is False


async def test_an_unchecked_write_keeps_the_stored_time_as_a_replay(backend: Backend) -> None:
    """A job enqueued as it is: a retry stamped later is a replay when it keeps the stored time."""
    first = Outgoing(job=plain_job("job-1", created_at=1), checked=False, keep_stored_time=True)
    retry = Outgoing(job=plain_job("job-1", created_at=99), checked=False, keep_stored_time=True)
    assert (await backend.asks.write(first, timeout_s=STEP_S)).replay is False
    assert (await backend.asks.write(retry, timeout_s=STEP_S)).replay is True
    pinned = Outgoing(job=plain_job("job-1", created_at=99), checked=False)
    with pytest.raises(JobConflict):
        await backend.asks.write(pinned, timeout_s=STEP_S)


async def test_the_facts_say_where_an_ask_stands(backend: Backend) -> None:
    """Queued once sent (its session named), delivered once the reply is in the mailbox."""
    assert (await backend.asks.facts("k-1", ASKER, timeout_s=STEP_S)).state is AskState.UNKNOWN
    await backend.asks.write(question(), timeout_s=STEP_S)
    facts = await backend.asks.facts("k-1", ASKER, timeout_s=STEP_S)
    assert (facts.state, facts.queue) == (AskState.QUEUED, "s-upper")
    await backend.answer(Outcome.COMPLETED, "HI")
    assert (await backend.asks.facts("k-1", ASKER, timeout_s=STEP_S)).state is AskState.DELIVERED


async def test_a_reply_in_the_mailbox_is_waited_for_listed_and_acked(backend: Backend) -> None:
    """The reply is the asker's: waited for, counted, listed, read by key, then acked once."""
    await backend.asks.write(question(), timeout_s=STEP_S)
    mailbox = backend.mailbox
    assert await mailbox.wait("k-1", 0, owner=ASKER) is None
    await backend.answer(Outcome.COMPLETED, "HI")
    entry = await mailbox.wait("k-1", STEP_S, owner=ASKER)
    assert entry is not None
    assert (entry.content, entry.in_reply_to, entry.read_at) == ("HI", "k-1", None)
    assert await mailbox.wait("k-1", 0, owner=UPPER) is None
    assert await mailbox.unread_count(ASKER) == 1
    assert [e.key for e in await mailbox.read("asker", "s-ask")] == [entry.key]
    assert list(await mailbox.owned([entry.key, "nope"], ASKER)) == [entry.key]
    assert await mailbox.owned([entry.key], UPPER) == {}
    assert [e.key for e in await mailbox.replies(["k-1"])] == [entry.key]
    assert await mailbox.ack([entry.key]) == [entry.key]
    assert await mailbox.ack([entry.key]) == []
    assert await mailbox.read("asker") == []
    assert await mailbox.unread_count(ASKER) == 0
    [latest] = await mailbox.latest(ASKER)
    assert latest.read_at is not None


async def test_an_unchecked_write_that_requires_a_known_target_refuses_an_unknown_one(
    backend: Backend,
) -> None:
    """require_known: an unknown target is UnknownAgent, nothing written; a known one goes."""
    nobody = AgentAddress(agent_id="nobody", session_id="s-x")
    mail = Mail(key="mail-x", to=nobody, from_=ASKER, reply_to=[], content="x", created_at=1)
    work = AgentWork(job_id="job-x", session_id="s-x", command_fact_id="c")
    unknown = Outgoing(job=agent_job(work, mail), checked=False, require_known=True)
    with pytest.raises(UnknownAgent, match="unknown agent session nobody:s-x"):
        await backend.asks.write(unknown, timeout_s=STEP_S)
    assert await backend.asks.mail("mail-x", timeout_s=STEP_S) is None
    known = Outgoing(job=plain_job("job-k", created_at=1), checked=False, require_known=True)
    assert (await backend.asks.write(known, timeout_s=STEP_S)).replay is False
    allowed = unknown.model_copy(update={"require_known": False})
    assert (await backend.asks.write(allowed, timeout_s=STEP_S)).replay is False
