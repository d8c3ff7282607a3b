"""The operator's ports' contract: pages and stories, sent jobs, a process's row, tokens.

InMemoryAdmin, InMemorySentJobs, InMemoryDaemonRow and InMemoryTokenBook against
PostgresAdmin, PostgresSentJobs, PostgresDaemons and PostgresAgents: the same filters,
orders and paging; the same answers when a reply address is added to a task's mail;
a row alive, then stopped; a token that names its agent session until it is revoked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    DeadReason,
    InvalidInput,
    Job,
    Mail,
    RowState,
    agent_job,
)
from birddog.core.errors import JobNotFound
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import Outcome
from birddog.ports import Admin, DaemonRow, JobStore, Outbox, RouteEdits, SentJobs, TokenBook
from birddog.postgres.admin import PostgresAdmin
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.tasks import PostgresSentJobs
from birddog.testing import (
    FrozenClock,
    InMemoryAdmin,
    InMemoryDaemonRow,
    InMemoryJobs,
    InMemoryOutbox,
    InMemoryRoutes,
    InMemorySentJobs,
    InMemoryTokenBook,
)
from tests.support import T0, at, make_row, store_claim

PORTS = ("Admin", "SentJobs", "DaemonRow", "TokenBook")
"""The ports these tests hold their fakes and their Postgres adapters to."""

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
PUSH = AgentAddress(agent_id="a2a-push:cfg", session_id="s-bob")
STEP_S = 10.0


@dataclass
class Backend:
    """The operator's reads under test and the stores they read."""

    name: str
    admin: Admin
    sent: SentJobs
    outbox: Outbox
    jobs: JobStore
    routes: RouteEdits
    enqueue: Callable[[Job], Awaitable[object]]
    row: DaemonRow
    alive: Callable[[], Awaitable[bool | None]]
    tokens: TokenBook
    issue: Callable[[AgentAddress], Awaitable[str]]
    revoke: Callable[[str], Awaitable[None]]


@pytest.fixture
async def memory_backend() -> Backend:
    """The fakes over one outbox, job store and route book."""
    clock = FrozenClock(T0)
    outbox = InMemoryOutbox(clock=clock)
    jobs = InMemoryJobs(clock=clock, outbox=outbox)
    routes = InMemoryRoutes(clock=clock, outbox=outbox)
    row = InMemoryDaemonRow()
    tokens = InMemoryTokenBook()
    issued: dict[str, str] = {}

    async def alive() -> bool | None:
        return None if row.beats == 0 else not row.stopped

    async def issue(address: AgentAddress) -> str:
        token = tokens.issue(address)
        issued[address.agent_id] = token
        return token

    async def revoke(agent_id: str) -> None:
        tokens.revoke(issued[agent_id])

    return Backend(
        "memory",
        InMemoryAdmin(outbox=outbox, jobs=jobs, routes=routes),
        InMemorySentJobs(jobs),
        outbox,
        jobs,
        routes,
        jobs.enqueue,
        row,
        alive,
        tokens,
        issue,
        revoke,
    )


@pytest.fixture
async def postgres_backend(pg_pool: Pool) -> Backend:
    """The Postgres adapters on a fresh database."""
    clock = FrozenClock(T0)
    row = PostgresDaemons(pg_pool, kind="drain")
    agents = PostgresAgents(pg_pool)

    async def enqueue(job: Job) -> bool:
        async with pg_pool.acquire() as conn, conn.transaction():
            return await enqueue_accepted_job(conn, job)

    async def alive() -> bool | None:
        stopped = await pg_pool.fetchrow(
            "SELECT stopped_at FROM birddog.daemons WHERE daemon_id = $1", row.daemon_id
        )
        return None if stopped is None else stopped["stopped_at"] is None

    async def issue(address: AgentAddress) -> str:
        return (await agents.add(address)).issued.token

    async def revoke(agent_id: str) -> None:
        await agents.revoke(agent_id)

    return Backend(
        "postgres",
        PostgresAdmin(pg_pool),
        PostgresSentJobs(pg_pool),
        PostgresOutbox(pg_pool),
        PostgresJobs(pg_pool, clock=clock),
        PostgresRoutes(pg_pool, cache_s=0, clock=clock),
        enqueue,
        row,
        alive,
        agents,
        issue,
        revoke,
    )


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    result: Backend = request.getfixturevalue(request.param)
    return result


def mail_job(job_id: str, *, to: AgentAddress = BOB, sender: AgentAddress = ALICE) -> Job:
    """A job carrying mail ``mail-<job_id>`` from ``sender`` to ``to``, replies to the sender."""
    mail = Mail(
        key=f"mail-{job_id}",
        to=to,
        from_=sender,
        reply_to=[sender],
        content=f"content of {job_id}",
        created_at=1_767_225_600_000,
    )
    work = AgentWork(job_id=job_id, session_id=to.session_id, command_fact_id=f"c-{job_id}")
    return agent_job(work, mail)


async def test_pending_pages_cover_every_row_once_in_due_order(backend: Backend) -> None:
    """Pages of two: every pending row once, next due first, the last page with no cursor."""
    rows = [make_row(f"k-{i}", agent="alice" if i % 2 else "bob", due=10 - i) for i in range(5)]
    await backend.outbox.add(rows)
    seen: list[str] = []
    after = None
    while True:
        page = await backend.admin.pending(after=after, limit=2)
        seen += [row["key"] for row in page.rows]
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert seen == ["k-4", "k-3", "k-2", "k-1", "k-0"]
    alice = await backend.admin.pending(recipient="alice")
    assert [row["key"] for row in alice.rows] == ["k-3", "k-1"]
    assert all(row["recipient_agent_id"] == "alice" for row in alice.rows)


@pytest.mark.parametrize(
    "bad", [{"limit": 0}, {"limit": 501}, {"status": "lost"}, {"after": "not-a-cursor"}]
)
async def test_a_bad_page_request_is_refused(backend: Backend, bad: dict[str, object]) -> None:
    """A limit out of range, an unknown status or a cursor not made here is InvalidInput."""
    with pytest.raises(InvalidInput):
        await backend.admin.pending(**bad)  # type: ignore[arg-type]


async def test_dead_letters_are_listed_by_recipient(backend: Backend) -> None:
    """Dead letters are on the dead page, not the pending one, with their reason."""
    await backend.outbox.add([make_row("d-1", agent="alice"), make_row("d-2", agent="bob")])
    page = await backend.outbox.claim_page(after_key=None, limit=5, now=at(0), lease_s=30)
    dead = [
        replace(row, state=RowState.DEAD, attempts=1, dead_reason=DeadReason.GONE)
        for row in page.rows
    ]
    await store_claim(backend.outbox, page=page, outcomes=dead)
    assert sorted(row["key"] for row in (await backend.admin.dead()).rows) == ["d-1", "d-2"]
    [bobs] = (await backend.admin.dead(recipient="bob")).rows
    assert (bobs["key"], bobs["dead_reason"]) == ("d-2", "gone")
    assert (await backend.admin.pending()).rows == []


async def test_routes_are_listed_by_agent_without_secrets(backend: Backend) -> None:
    """The routes page: by agent id, the URL shown, no secret anywhere in a row."""
    await backend.routes.add("carol", "https://carol.example/inbox")
    await backend.routes.add("alice", kind="mailbox")
    rows = (await backend.admin.routes()).rows
    assert [(row["agent_id"], row["kind"]) for row in rows] == [
        ("alice", "mailbox"),
        ("carol", "http"),
    ]
    assert rows[1]["url"] == "https://carol.example/inbox"
    assert all("secret" not in row for row in rows)


async def test_jobs_list_running_first_then_queued_and_filter(backend: Backend) -> None:
    """A running job comes before the queued ones; state and queue filter the page."""
    await backend.enqueue(mail_job("j-1"))
    await backend.enqueue(mail_job("j-2", to=AgentAddress(agent_id="bob", session_id="s-2")))
    await backend.enqueue(mail_job("j-3"))
    claimed = await backend.jobs.claim(queues=["s-2"], lease_s=30)
    assert claimed is not None
    rows = (await backend.admin.jobs()).rows
    assert [row["job_id"] for row in rows] == ["j-2", "j-1", "j-3"]
    assert rows[0]["state"] == "running"
    queued = await backend.admin.jobs(state="queued", queue="s-bob")
    assert [row["job_id"] for row in queued.rows] == ["j-1", "j-3"]
    assert rows[1]["mail_key"] == "mail-j-1"


async def test_a_story_finds_a_mail_by_its_key_a_reply_key_or_its_job(backend: Backend) -> None:
    """The mail's job and, once settled, its reply; an unknown key finds nothing."""
    await backend.enqueue(mail_job("j-1"))
    story = await backend.admin.story("mail-j-1")
    assert story.found
    assert [job["job_id"] for job in story.jobs] == ["j-1"]
    assert story.jobs[0]["mail_key"] == "mail-j-1"
    claimed = await backend.jobs.claim(lease_s=30)
    assert claimed is not None
    await backend.jobs.finish(
        job_id="j-1",
        claim_token=claimed.claim_token,
        event=SettleRequested(Outcome.COMPLETED, "done", None),
    )
    by_reply = await backend.admin.story("outbox:mail-j-1:reply:0")
    assert [reply["key"] for reply in by_reply.replies] == ["outbox:mail-j-1:reply:0"]
    assert by_reply.replies[0]["in_reply_to"] == "mail-j-1"
    assert (await backend.admin.story("j-1")).found
    assert not (await backend.admin.story("nothing-here")).found


async def test_the_overview_counts_by_state(backend: Backend) -> None:
    """Jobs by state, every state present; the outbox's pending count."""
    await backend.enqueue(mail_job("j-1"))
    await backend.outbox.add([make_row("k-1")])
    overview = await backend.admin.overview(now=T0)
    assert overview.jobs == {"queued": 1, "running": 0, "settled": 0}
    assert overview.outbox["pending"] == 1


async def test_sent_jobs_read_back_for_their_sender(backend: Backend) -> None:
    """A sent job by id and by context, queued, with its mail; nothing for another sender."""
    await backend.enqueue(mail_job("j-1"))
    await backend.enqueue(mail_job("j-2"))
    sent = await backend.sent.get("j-1", timeout_s=STEP_S)
    assert sent is not None
    assert (sent.state.value, sent.queue, sent.outcome) == ("queued", "s-bob", None)
    assert sent.mail is not None
    assert sent.mail.key == "mail-j-1"
    assert await backend.sent.get("j-9", timeout_s=STEP_S) is None
    listed = await backend.sent.of_context(
        queue="s-bob",
        agent_id="bob",
        from_agent_id="alice",
        after_job_id="j-1",
        limit=5,
        timeout_s=STEP_S,
    )
    assert [job.job_id for job in listed] == ["j-2"]
    others = await backend.sent.of_context(
        queue="s-bob",
        agent_id="bob",
        from_agent_id="carol",
        after_job_id=None,
        limit=5,
        timeout_s=STEP_S,
    )
    assert others == []


async def test_a_reply_address_joins_an_unsettled_mail_of_its_sender_only(backend: Backend) -> None:
    """Added once, present after; another caller's is missing; removed; settled is too late."""
    await backend.enqueue(mail_job("j-1"))
    add = backend.sent.add_reply_to
    assert await add("j-1", PUSH, caller=ALICE, timeout_s=STEP_S) == "added"
    assert await add("j-1", PUSH, caller=ALICE, timeout_s=STEP_S) == "present"
    assert await add("j-1", PUSH, caller=BOB, timeout_s=STEP_S) == "missing"
    assert await add("j-9", PUSH, caller=ALICE, timeout_s=STEP_S) == "missing"
    sent = await backend.sent.get("j-1", timeout_s=STEP_S)
    assert sent is not None
    assert sent.mail is not None
    assert PUSH in sent.mail.reply_to
    remove = backend.sent.remove_reply_to
    assert await remove("j-1", PUSH, caller=ALICE, timeout_s=STEP_S) is True
    assert await remove("j-1", PUSH, caller=ALICE, timeout_s=STEP_S) is False
    claimed = await backend.jobs.claim(lease_s=30)
    assert claimed is not None
    await backend.jobs.finish(
        job_id="j-1",
        claim_token=claimed.claim_token,
        event=SettleRequested(Outcome.COMPLETED, "ok", None),
    )
    assert await add("j-1", PUSH, caller=ALICE, timeout_s=STEP_S) == "settled"


async def test_a_process_row_is_alive_once_seen_and_stopped_once_gone(backend: Backend) -> None:
    """No row before the first beat; alive after it; stopped after a clean stop."""
    assert await backend.alive() is None
    await backend.row.seen()
    assert await backend.alive() is True
    await backend.row.gone()
    assert await backend.alive() is False


async def test_a_token_names_its_agent_session_until_revoked(backend: Backend) -> None:
    """An issued token authenticates as its session; unknown, malformed and revoked do not."""
    token = await backend.issue(ALICE)
    assert await backend.tokens.authenticate(token) == ALICE
    assert await backend.tokens.authenticate(token + "x") is None
    assert await backend.tokens.authenticate("not a token") is None
    await backend.revoke("alice")
    assert await backend.tokens.authenticate(token) is None


async def test_a_caller_cancels_only_its_own_mails_job(backend: Backend) -> None:
    """Another caller's cancel is not found and changes nothing; the sender's settles it cancelled."""
    await backend.enqueue(mail_job("j-1"))
    with pytest.raises(JobNotFound):
        await backend.sent.cancel("j-1", caller=BOB, content="mine now", timeout_s=STEP_S)
    with pytest.raises(JobNotFound):
        await backend.sent.cancel("j-9", caller=ALICE, content="no such", timeout_s=STEP_S)
    sent = await backend.sent.get("j-1", timeout_s=STEP_S)
    assert sent is not None
    assert sent.state.value == "queued"
    outcome = await backend.sent.cancel("j-1", caller=ALICE, content="not needed", timeout_s=STEP_S)
    assert outcome is Outcome.CANCELLED
    sent = await backend.sent.get("j-1", timeout_s=STEP_S)
    assert sent is not None
    assert (sent.state.value, sent.outcome, sent.result) == (
        "settled",
        Outcome.CANCELLED,
        "not needed",
    )
