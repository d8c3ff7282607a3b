"""The operator commands' ports' contract, on the fakes and on PostgreSQL.

What ``birddog status``, ``check``, ``prune``, ``agent``, ``route``, ``jobs`` and ``inbox
--follow`` call. InMemoryOutboxAdmin, InMemoryJobAdmin, InMemoryReports, InMemoryRetention, InMemoryAgents,
InMemoryRoutes and InMemoryMailbox against PostgresOutbox, PostgresJobs, PostgresReports,
PostgresRetention, PostgresAgents, PostgresRoutes and PostgresMailbox: the same counts,
the same rows reported stuck (rows are aged by the backend, as time would age them), the
same rows pruned, the same tokens and rotations, the same batches followed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from birddog import AgentAddress, DeadReason, Job, RowState
from birddog.core.delivery import OutboxRow
from birddog.core.errors import AgentNotFound, InvalidInput, JobNotFound, RouteNotFound
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import Outcome, Reply
from birddog.core.retention import RetentionPolicy
from birddog.core.turns import Turn
from birddog.ports import (
    AgentAccounts,
    JobAdmin,
    JobStore,
    MailboxFeed,
    Outbox,
    OutboxAdmin,
    Reports,
    Retention,
    RouteAdmin,
    TokenBook,
)
from birddog.postgres.agents import PostgresAgents
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.reports import PostgresReports
from birddog.postgres.retention import PostgresRetention
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import (
    DaemonSeen,
    FrozenClock,
    InMemoryAgents,
    InMemoryJobAdmin,
    InMemoryJobs,
    InMemoryMailbox,
    InMemoryOutbox,
    InMemoryOutboxAdmin,
    InMemoryReports,
    InMemoryRetention,
    InMemoryRoutes,
)
from tests.support import (
    deliver_to_mailbox,
    eventually,
    mailbox_on,
    make_job,
    make_reply,
    make_row,
    receipt_for,
    store_claim,
)

PORTS = (
    "OutboxAdmin",
    "JobAdmin",
    "Reports",
    "Retention",
    "AgentAccounts",
    "RouteAdmin",
    "MailboxFeed",
)
"""The ports these tests hold their fakes and their Postgres adapters to."""

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
HOUR_S = 3600.0
DAY_S = 86400.0
URL = "https://carol.example/inbox"

Age = Callable[[str, float], Awaitable[None]]
"""Makes a row (by key, job id or agent id) older by some seconds, as time would."""


@dataclass
class Backend:
    """The command ports under test, the stores they read, and ways to age their rows."""

    name: str
    clock: FrozenClock
    outbox: Outbox
    outbox_admin: OutboxAdmin
    jobs: JobStore
    job_admin: JobAdmin
    enqueue: Callable[[Job], Awaitable[object]]
    routes: RouteAdmin
    reports: Reports
    retention: Retention
    agents: AgentAccounts
    tokens: TokenBook
    mailbox: MailboxFeed
    deliver: Callable[[Reply], Awaitable[None]]
    age_dead: Age
    age_created: Age
    age_lease: Age
    age_started: Age
    age_hold: Age
    digest_due: Age
    beat: Callable[[str, str, float, bool], Awaitable[None]]


def _now() -> datetime:
    """The wall clock: Postgres stamps rows with ``now()``, so both backends start there."""
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
async def memory_backend() -> Backend:
    """The fakes over one outbox, job store, route book and mailbox."""
    clock = FrozenClock(_now())
    outbox = InMemoryOutbox(clock=clock)
    jobs = InMemoryJobs(clock=clock, outbox=outbox)
    routes = InMemoryRoutes(clock=clock, outbox=outbox)
    mailbox = InMemoryMailbox(clock=clock)
    reports = InMemoryReports(outbox=outbox, jobs=jobs, routes=routes, clock=clock)
    agents = InMemoryAgents(routes=routes, clock=clock)

    def ago(when: datetime, seconds: float) -> datetime:
        return when - timedelta(seconds=seconds)

    async def deliver(reply: Reply) -> None:
        mailbox.deliver(reply)

    async def age_dead(key: str, seconds: float) -> None:
        outbox.rows[key] = replace(outbox.rows[key], due_at=ago(outbox.rows[key].due_at, seconds))

    async def age_created(job_id: str, seconds: float) -> None:
        jobs.jobs[job_id].created_at = ago(jobs.jobs[job_id].created_at, seconds)

    async def age_lease(job_id: str, seconds: float) -> None:
        stored = jobs.jobs[job_id]
        assert stored.lease_expires_at is not None
        stored.lease_expires_at = ago(stored.lease_expires_at, seconds)

    async def age_started(job_id: str, seconds: float) -> None:
        stored = jobs.jobs[job_id]
        assert stored.started_at is not None
        stored.started_at = ago(stored.started_at, seconds)

    async def age_hold(agent_id: str, seconds: float) -> None:
        route = routes.routes[agent_id]
        assert route.held_at is not None
        routes.routes[agent_id] = replace(route, held_at=ago(route.held_at, seconds))

    async def digest_due(job_id: str, seconds: float) -> None:
        jobs.jobs[job_id].digest_at = ago(clock.now(), seconds)

    async def beat(daemon_id: str, kind: str, ago_s: float, stopped: bool) -> None:
        seen = ago(clock.now(), ago_s)
        reports.daemons[daemon_id] = DaemonSeen(
            daemon_id, kind, "host-1", 4242, seen, seen, seen if stopped else None
        )

    return Backend(
        "memory",
        clock,
        outbox,
        InMemoryOutboxAdmin(outbox, clock=clock),
        jobs,
        InMemoryJobAdmin(jobs),
        jobs.enqueue,
        routes,
        reports,
        InMemoryRetention(outbox=outbox, jobs=jobs, mailbox=mailbox, clock=clock),
        agents,
        agents.tokens,
        mailbox,
        deliver,
        age_dead,
        age_created,
        age_lease,
        age_started,
        age_hold,
        digest_due,
        beat,
    )


@pytest.fixture
async def postgres_backend(pg_pool: Pool) -> AsyncIterator[Backend]:
    """The Postgres adapters on a fresh database, on a clock at the database's time."""
    clock = FrozenClock(_now())
    jobs = PostgresJobs(pg_pool, clock=clock)
    agents = PostgresAgents(pg_pool)

    async def enqueue(job: Job) -> bool:
        async with pg_pool.acquire() as conn, conn.transaction():
            return await enqueue_accepted_job(conn, job)

    async def deliver(reply: Reply) -> None:
        await deliver_to_mailbox(pg_pool, reply, at=clock.now())

    def aging(sql: str) -> Age:
        async def age(key: str, seconds: float) -> None:
            status = await pg_pool.execute(sql, key, timedelta(seconds=seconds))
            assert status.endswith(" 1"), f"{sql!r} changed no row of {key!r}"

        return age

    async def beat(daemon_id: str, kind: str, ago_s: float, stopped: bool) -> None:
        await pg_pool.execute(
            "INSERT INTO birddog.daemons (daemon_id, kind, host, pid, started_at, seen_at, "
            "stopped_at) VALUES ($1, $2, 'host-1', 4242, now() - $3::interval, "
            "now() - $3::interval, CASE WHEN $4 THEN now() - $3::interval END)",
            daemon_id,
            kind,
            timedelta(seconds=ago_s),
            stopped,
        )

    async with mailbox_on(pg_pool, None, poll_s=0.05) as mailbox:
        yield Backend(
            "postgres",
            clock,
            PostgresOutbox(pg_pool),
            PostgresOutbox(pg_pool),
            jobs,
            jobs,
            enqueue,
            PostgresRoutes(pg_pool, cache_s=0, clock=clock),
            PostgresReports(pg_pool),
            PostgresRetention(pg_pool, clock=clock),
            agents,
            agents,
            mailbox,
            deliver,
            aging("UPDATE birddog.outbox SET dead_at = dead_at - $2::interval WHERE key = $1"),
            aging(
                "UPDATE birddog.jobs SET created_at = created_at - $2::interval WHERE job_id = $1"
            ),
            aging(
                "UPDATE birddog.jobs SET lease_expires_at = lease_expires_at - $2::interval "
                "WHERE job_id = $1"
            ),
            aging(
                "UPDATE birddog.jobs SET started_at = started_at - $2::interval WHERE job_id = $1"
            ),
            aging("UPDATE birddog.routes SET held_at = held_at - $2::interval WHERE agent_id = $1"),
            aging("UPDATE birddog.jobs SET digest_at = now() - $2::interval WHERE job_id = $1"),
            beat,
        )


@pytest.fixture(params=["memory_backend", "postgres_backend"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    result: Backend = request.getfixturevalue(request.param)
    return result


def row_at(backend: Backend, key: str, *, agent: str = "alice", age_s: float = 0.0) -> OutboxRow:
    """A pending row created ``age_s`` before the backend's clock, due then."""
    when = backend.clock.now() - timedelta(seconds=age_s)
    return replace(make_row(key, agent=agent), created_at=when, due_at=when)


async def kill(backend: Backend, *keys: str) -> None:
    """Claim the rows under ``keys`` and store them dead, dying now."""
    page = await backend.outbox.claim_page(
        after_key=None, limit=50, now=backend.clock.now(), lease_s=30
    )
    dead = [
        replace(
            row,
            state=RowState.DEAD,
            attempts=1,
            dead_reason=DeadReason.GONE,
            due_at=backend.clock.now(),
        )
        for row in page.rows
        if row.key in keys
    ]
    await store_claim(backend.outbox, page=page, outcomes=dead)
    await backend.outbox.release_rows(
        [(page.claim, row.key) for row in page.rows if row.key not in keys]
    )


async def settle_one(backend: Backend, job_id: str) -> None:
    """Claim and settle the next job (``job_id``) completed."""
    claimed = await backend.jobs.claim(lease_s=30)
    assert claimed is not None
    assert claimed.job.job_id == job_id
    await backend.jobs.finish(
        job_id=job_id,
        claim_token=claimed.claim_token,
        event=SettleRequested(Outcome.COMPLETED, "done", None),
    )


# ---- OutboxAdmin ----------------------------------------------------------------------


async def test_outbox_counts_and_lists_show_pending_held_and_dead(backend: Backend) -> None:
    """Counts by state (held among pending), pending oldest first, dead letters listed."""
    await backend.routes.add("bob", kind="mailbox")
    await backend.outbox.add(
        [
            row_at(backend, "k-old", age_s=600),
            row_at(backend, "k-new", age_s=60),
            row_at(backend, "k-bob", agent="bob", age_s=300),
            row_at(backend, "k-dead", age_s=900),
        ]
    )
    await kill(backend, "k-dead")
    await backend.routes.hold("bob")
    counts = await backend.outbox_admin.counts()
    assert {k: counts[k] for k in ("pending", "dead", "held", "in_flight")} == {
        "pending": 3,
        "dead": 1,
        "held": 1,
        "in_flight": 0,
    }
    assert counts["oldest_pending_at"] == backend.clock.now() - timedelta(seconds=600)
    assert counts["next_due_at"] == backend.clock.now() - timedelta(seconds=600)
    pending = await backend.outbox_admin.list_pending(limit=2)
    assert [row["key"] for row in pending] == ["k-old", "k-bob"]
    assert [(row["status"], row["held"]) for row in pending] == [("due", False), ("held", True)]
    [dead] = await backend.outbox_admin.list_dead()
    assert (dead["key"], dead["dead_reason"], dead["attempts"]) == ("k-dead", "gone", 1)


# ---- JobAdmin -------------------------------------------------------------------------


async def test_job_counts_later_jobs_and_a_cancel(backend: Backend) -> None:
    """Every state counted; a job sent for later counted apart; a queued job cancels at once."""
    later = backend.clock.now() + timedelta(hours=2)
    await backend.enqueue(make_job("j-1"))
    await backend.enqueue(make_job("j-later").model_copy(update={"not_before": later}))
    await backend.enqueue(make_job("j-2", session="s-2"))
    assert await backend.job_admin.counts() == {"queued": 3, "running": 0, "settled": 0}
    assert await backend.job_admin.not_yet_due() == (1, later)
    assert (await backend.job_admin.get("j-1")).job_id == "j-1"
    assert await backend.job_admin.cancel(job_id="j-2", content="stop") == Outcome.CANCELLED
    assert await backend.job_admin.counts() == {"queued": 2, "running": 0, "settled": 1}
    with pytest.raises(JobNotFound):
        await backend.job_admin.get("j-none")


async def test_turns_are_counted_by_kind_and_how_they_ran(backend: Backend) -> None:
    """Two jobs one claim took are one worker turn, one spawn; an MCP server's or a live worker's claim is a live turn."""
    await backend.enqueue(make_job("j-1"))
    await backend.enqueue(make_job("j-2"))
    await backend.enqueue(make_job("j-3", session="s-3"))
    await backend.enqueue(make_job("j-4", session="s-4"))
    batch = await backend.jobs.claim_many(queues=["s-bob"], worker_id="w-1", batch=2, lease_s=30)
    assert sorted(claimed.job.job_id for claimed in batch) == ["j-1", "j-2"]
    live = await backend.jobs.claim(queues=["s-3"], worker_id="mcp:session", lease_s=30)
    live_worker = await backend.jobs.claim(queues=["s-4"], worker_id="live:h:1", lease_s=30)
    assert live is not None
    assert live_worker is not None
    turn = Turn(host="h", boot_id="b", pid=7, start_ticks=1)
    for claimed in [*batch, live_worker]:
        await backend.jobs.record_turn(
            job_id=claimed.job.job_id, claim_token=claimed.claim_token, turn=turn
        )
    for claimed in [*batch, live, live_worker]:
        await backend.jobs.finish(
            job_id=claimed.job.job_id,
            claim_token=claimed.claim_token,
            event=SettleRequested(Outcome.COMPLETED, "done", None),
        )
    since = backend.clock.now() - timedelta(hours=1)
    assert await backend.job_admin.turns_since(since) == [
        {"kind": "task", "how": "live", "turns": 2, "mails": 2, "spawns": 1},
        {"kind": "task", "how": "worker", "turns": 1, "mails": 2, "spawns": 1},
    ]
    assert await backend.job_admin.turns_since(backend.clock.now() + timedelta(hours=1)) == []


# ---- Reports --------------------------------------------------------------------------


async def test_the_reports_name_stale_pending_new_dead_and_long_holds(backend: Backend) -> None:
    """Rows past each limit are named, oldest (or newest dead) first; younger ones are not."""
    await backend.routes.add("bob", kind="mailbox")
    await backend.outbox.add(
        [
            row_at(backend, "k-stale", age_s=2 * HOUR_S),
            row_at(backend, "k-fresh", age_s=60),
            row_at(backend, "k-bob", agent="bob", age_s=3 * HOUR_S),
            row_at(backend, "k-dead-new"),
            row_at(backend, "k-dead-old"),
        ]
    )
    await kill(backend, "k-dead-new", "k-dead-old")
    await backend.age_dead("k-dead-old", 2 * HOUR_S)
    await backend.routes.hold("bob")
    stale = await backend.reports.stale_pending(older_than_s=HOUR_S, limit=5)
    assert [row["key"] for row in stale] == ["k-stale"]  # bob's is held: not stale
    assert stale[0]["recipient_agent_id"] == "alice"
    dead = await backend.reports.new_dead(within_s=HOUR_S, limit=5)
    assert [(row["key"], row["dead_reason"]) for row in dead] == [("k-dead-new", "gone")]
    assert await backend.reports.long_holds(older_than_s=HOUR_S, limit=5) == []
    await backend.age_hold("bob", 2 * HOUR_S)
    [hold] = await backend.reports.long_holds(older_than_s=HOUR_S, limit=5)
    assert (hold["agent_id"], hold["waiting"]) == ("bob", 1)


async def test_the_reports_name_stale_queued_and_overdue_running_jobs(backend: Backend) -> None:
    """An interactive job queued past the limit (not a report), one running past its lease.

    A report is stale only once it waited that long past its digest time.
    """
    await backend.enqueue(make_job("j-run", session="s-2"))
    await backend.enqueue(make_job("j-report", session="s-4", kind="report"))
    await backend.age_created("j-report", 3 * HOUR_S)
    await backend.age_created("j-run", 4 * HOUR_S)
    await backend.enqueue(make_job("j-old"))
    await backend.enqueue(make_job("j-new", session="s-3"))
    await backend.age_created("j-old", 2 * HOUR_S)
    claimed = await backend.jobs.claim(queues=["s-2"], lease_s=30, worker_id="w-1")
    assert claimed is not None
    queued = await backend.reports.stale_queued(older_than_s=HOUR_S, limit=5)
    assert [(row["job_id"], row["queue"], row["kind"]) for row in queued] == [
        ("j-old", "s-bob", "task")
    ]
    await backend.digest_due("j-report", HOUR_S / 2)
    assert [
        row["job_id"] for row in await backend.reports.stale_queued(older_than_s=HOUR_S, limit=5)
    ] == ["j-old"]
    await backend.digest_due("j-report", 3 * HOUR_S)
    queued = await backend.reports.stale_queued(older_than_s=HOUR_S, limit=5)
    assert [(row["job_id"], row["kind"]) for row in queued] == [
        ("j-report", "report"),
        ("j-old", "task"),
    ]
    assert queued[0]["digest_at"] is not None
    assert queued[1]["digest_at"] is None
    assert await backend.reports.overdue_running(grace_s=60, limit=5) == []
    await backend.age_lease("j-run", 600)
    [overdue] = await backend.reports.overdue_running(grace_s=60, limit=5)
    assert (overdue["job_id"], overdue["queue"], overdue["worker_id"]) == ("j-run", "s-2", "w-1")


async def test_the_reports_name_a_queue_held_past_the_servers_limits(backend: Backend) -> None:
    """A job running past max_hold_s with another behind it, or with a far lease, is named."""
    await backend.enqueue(make_job("j-hold", session="s-2"))
    await backend.enqueue(make_job("j-alone", session="s-3"))
    for queue in ("s-2", "s-3"):
        assert await backend.jobs.claim(queues=[queue], lease_s=30, worker_id="w-1") is not None
    await backend.age_started("j-hold", 2 * HOUR_S)
    await backend.age_started("j-alone", 3 * HOUR_S)
    assert await backend.reports.held_queues(limit=5) == []  # nothing waits behind them
    await backend.enqueue(make_job("j-behind", session="s-2"))
    [held] = await backend.reports.held_queues(limit=5)
    assert (held["job_id"], held["queue"], held["worker_id"], held["waiting"]) == (
        "j-hold",
        "s-2",
        "w-1",
        1,
    )
    await backend.age_lease("j-alone", -3 * HOUR_S)  # a lease no claim of today could take
    held_longest_first = await backend.reports.held_queues(limit=5)
    assert [row["job_id"] for row in held_longest_first] == ["j-alone", "j-hold"]


async def test_daemons_seen_and_replies_due_without_a_drain(backend: Backend) -> None:
    """Running processes seen lately are listed; due replies with no live drain are named."""
    assert await backend.reports.due_without_daemon(within_s=120) is None  # nothing due
    await backend.outbox.add([row_at(backend, "k-due", age_s=300)])
    never = await backend.reports.due_without_daemon(within_s=120)
    assert never is not None
    assert (never["due"], never["last_seen_at"], never["last_stopped_at"]) == (1, None, None)
    await backend.beat("d-gone", "drain", 600, False)
    await backend.beat("w-1", "worker", 5, False)
    await backend.beat("w-stopped", "worker", 5, True)
    seen = await backend.reports.daemons_seen(within_s=60)
    assert [(row["daemon_id"], row["kind"], row["host"]) for row in seen] == [
        ("w-1", "worker", "host-1")
    ]
    vanished = await backend.reports.due_without_daemon(within_s=120)
    assert vanished is not None
    assert vanished["last_seen_at"] is not None
    assert vanished["last_stopped_at"] is None
    await backend.beat("d-live", "drain", 5, False)
    assert await backend.reports.due_without_daemon(within_s=120) is None


# ---- Retention ------------------------------------------------------------------------


async def test_a_prune_deletes_only_what_the_policy_no_longer_keeps(backend: Backend) -> None:
    """Old receipts go first; nothing without a retention; later, everything past its age."""
    await backend.outbox.add(
        [row_at(backend, "k-1"), row_at(backend, "k-2"), row_at(backend, "k-3")]
    )
    page = await backend.outbox.claim_page(
        after_key=None, limit=5, now=backend.clock.now(), lease_s=30
    )
    rows = {row.key: row for row in page.rows}
    now = backend.clock.now()
    await store_claim(
        backend.outbox,
        page=page,
        outcomes=[
            receipt_for(rows["k-1"], when=now - timedelta(days=2)),
            receipt_for(rows["k-2"], when=now),
        ],
    )
    await backend.outbox.release_rows([(page.claim, "k-3")])
    await kill(backend, "k-3")
    await backend.enqueue(make_job("j-1"))
    await settle_one(backend, "j-1")
    await backend.deliver(make_reply("outbox:m:reply:0", agent="alice"))
    assert await backend.mailbox.ack(["outbox:m:reply:0"]) == ["outbox:m:reply:0"]

    first = await backend.retention.prune(RetentionPolicy(receipts_s=DAY_S))
    assert (first.receipts, first.jobs, first.dead_letters, first.mailbox) == (1, 0, 0, 0)
    assert (await backend.retention.prune(RetentionPolicy())).total == 0
    backend.clock.advance(2 * DAY_S)
    every = RetentionPolicy(
        receipts_s=DAY_S, jobs_settled_s=DAY_S, dead_s=DAY_S, mailbox_read_s=DAY_S
    )
    later = await backend.retention.prune(every)
    assert (later.receipts, later.jobs, later.dead_letters, later.mailbox) == (1, 1, 1, 1)
    assert (await backend.retention.prune(every)).total == 0


# ---- AgentAccounts --------------------------------------------------------------------


async def test_an_agent_added_gets_a_mailbox_and_tokens_until_revoked(backend: Backend) -> None:
    """Added once (a mailbox route when it has none), tokens issued and listed, then revoked."""
    added = await backend.agents.add(ALICE)
    assert added.mailbox_added is True
    assert added.login is None
    route = await backend.routes.route("alice")
    assert route is not None
    assert route.kind == "mailbox"
    assert await backend.tokens.authenticate(added.token) == ALICE
    with pytest.raises(InvalidInput, match="added before"):
        await backend.agents.add(ALICE)
    other = AgentAddress(agent_id="alice", session_id="s-2")
    second = await backend.agents.issue(other)
    [info] = await backend.agents.list()
    assert (info.agent_id, info.login) == ("alice", None)
    assert sorted(t.session_id for t in info.tokens) == ["s-2", "s-alice"]
    assert all(not hasattr(t, "token") for t in info.tokens)
    assert await backend.agents.revoke("alice", token_id=second.token_id) == [second.token_id]
    assert await backend.tokens.authenticate(second.token) is None
    assert await backend.agents.revoke("alice") == [added.issued.token_id]
    assert await backend.tokens.authenticate(added.token) is None
    assert await backend.agents.revoke_login("alice") is None
    await backend.routes.add("bob", URL)
    assert (await backend.agents.add(BOB)).mailbox_added is False
    with pytest.raises(AgentNotFound):
        await backend.agents.issue(AgentAddress(agent_id="nobody", session_id="s"))
    with pytest.raises(AgentNotFound):
        await backend.agents.revoke("nobody")


# ---- RouteAdmin -----------------------------------------------------------------------


async def test_a_rotation_keeps_the_old_secret_signing_for_the_overlap(backend: Backend) -> None:
    """The new secret and the old one beside it until the overlap ends; http routes only."""
    added = await backend.routes.add("carol", URL)
    rotated = await backend.routes.rotate("carol", overlap_s=HOUR_S)
    assert rotated.secret is not None
    assert rotated.secret.startswith("whsec_")
    assert rotated.secret != added.secret
    assert rotated.previous_secret == added.secret
    assert rotated.previous_secret_until == backend.clock.now() + timedelta(hours=1)
    assert rotated.signing_secrets(backend.clock.now()) == [rotated.secret, added.secret]
    await backend.routes.add("alice", kind="mailbox")
    with pytest.raises(RouteNotFound):
        await backend.routes.rotate("alice", overlap_s=0)
    with pytest.raises(InvalidInput):
        await backend.routes.rotate("carol", overlap_s=-1)


async def test_missing_routes_removal_and_a_reseal_without_a_key(backend: Backend) -> None:
    """Unrouted agents named once in order; a removed route is gone; plain secrets stay."""
    await backend.routes.add("carol", URL)
    await backend.routes.add("alice", kind="mailbox")
    assert await backend.routes.missing(["x", "alice", "y", "x", "carol"]) == ["x", "y"]
    report = await backend.routes.reseal()
    assert (report.routes, report.resealed) == (1, 0)
    await backend.routes.remove("carol")
    assert await backend.routes.route("carol") is None
    assert [route.agent_id for route in await backend.routes.list()] == ["alice"]
    with pytest.raises(RouteNotFound):
        await backend.routes.remove("carol")


# ---- MailboxFeed ----------------------------------------------------------------------


async def test_following_a_mailbox_yields_each_new_reply_once(backend: Backend) -> None:
    """What is unread first, then each reply as it arrives, never one twice, until stopped."""
    await backend.deliver(make_reply("outbox:m-1:reply:0", agent="alice"))
    await backend.deliver(make_reply("outbox:m-2:reply:0", agent="bob"))
    stop = asyncio.Event()
    batches: list[list[str]] = []

    async def follow() -> None:
        async for batch in backend.mailbox.follow("alice", stop=stop):
            batches.append([entry.key for entry in batch])  # noqa: PERF401 - seen as it comes

    following = asyncio.create_task(follow())
    try:
        await eventually(lambda: list(batches), "the unread reply", until=lambda b: len(b) == 1)
        await backend.deliver(make_reply("outbox:m-3:reply:0", agent="alice"))
        await eventually(lambda: list(batches), "the new reply", until=lambda b: len(b) == 2)
    finally:
        stop.set()
        await asyncio.wait_for(following, timeout=10)
    assert batches == [["outbox:m-1:reply:0"], ["outbox:m-3:reply:0"]]
