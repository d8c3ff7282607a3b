"""Helpers the test suites share: sample addresses and jobs, rows and replies, fakes, queries.

Fixtures live in the ``conftest.py`` files; these are the plain functions and classes
they and the tests build on. Tests import shared code from this package only, never from
another test module or a conftest (``tests/unit/test_test_layout.py`` holds the rule).
This module has what most suites use; the rest has a module of its own:

- ``waiting``: :func:`eventually`, the one poll with a deadline (re-exported here).
- ``inbox``: :class:`~tests.support.inbox.TestInbox`, signed inboxes on 127.0.0.1.
- ``stacks``: mail rooms over PostgreSQL (:func:`~tests.support.stacks.pg_room`,
  the acceptance :class:`~tests.support.stacks.Harness`).
- ``cli``: the ``birddog`` command and daemon as subprocesses, logins per role.
- ``console``: a seeded database and a console served over it; ``browser``: pages.
- ``proxy``: a TCP proxy in front of a test database that a test cuts and restores.
- ``mcp``: ``birddog mcp`` over stdio with the SDK's client (:func:`~tests.support.mcp.stdio_mcp`).
- ``chaos``: the fault run's plan, processes and misbehaving recipients.
- ``users``: OS users made for one test (root only), for agents run ``--user``.
- ``world``: the mail service over birddog.testing's fakes, wired together
  (:class:`~tests.support.world.World`), for the service's and the MCP agent tools's unit tests.
- ``services``: the commands' Services over those fakes
  (:class:`~tests.support.services.FakeServices`), for the commands' logic without a database.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from birddog import (
    AgentAddress,
    AgentWork,
    Job,
    JobState,
    Mail,
    MailRoom,
    MailService,
    Outbox,
    OutboxRow,
    Outcome,
    Page,
    Receipt,
    Recovery,
    Reply,
    ReplyFacts,
    RetrySchedule,
    agent_job,
)
from birddog.clock import SystemClock
from birddog.core.delivery import Attempt, RowOutcome, new_row
from birddog.ports import Settled
from birddog.postgres.jobs import ClaimedJob, PostgresJobs, enqueue_accepted_job
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.notices import PostgresNotices
from birddog.postgres.pool import Pool
from birddog.sqlite import SqliteSpool
from birddog.testing import FrozenClock, InMemoryOutbox, ManualWake, RecordingTransport
from tests.support.waiting import eventually as eventually  # re-exported (see above)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
"""The tests' epoch: frozen clocks start here."""

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
CAROL = AgentAddress(agent_id="carol", session_id="s-carol")
SENDER = AgentAddress(agent_id="boss", session_id="boss-session")


# ---- jobs ----------------------------------------------------------------------------


def settled_job(
    *,
    key: str = "mail-1",
    reply_to: Sequence[AgentAddress] = (ALICE, CAROL),
    outcome: Outcome = Outcome.COMPLETED,
    with_mail: bool = True,
) -> Job:
    """A settled agent job for bob's session whose mail asks for replies to ``reply_to``."""
    mail = Mail(
        key=key, to=BOB, from_=ALICE, reply_to=list(reply_to), content="please", created_at=1
    )
    job = agent_job(
        AgentWork(job_id=f"job-{key}", session_id="s-bob", command_fact_id=f"cmd-{key}"),
        mail if with_mail else None,
    )
    return job.model_copy(update={"state": JobState.SETTLED, "outcome": outcome})


def make_job(
    job_id: str = "job-1",
    *,
    session: str = "s-bob",
    priority: int = 0,
    agent: str = "bob",
    reply_to: Sequence[AgentAddress] = (ALICE, CAROL),
    with_mail: bool = True,
    max_recoveries: int | None = None,
    kind: str | None = None,
) -> Job:
    """An agent job for ``agent``'s ``session`` whose mail (key ``mail-<job_id>``) asks for ``reply_to``."""
    mail = Mail(
        key=f"mail-{job_id}",
        to=AgentAddress(agent_id=agent, session_id=session),
        from_=ALICE,
        reply_to=list(reply_to),
        content="please",
        created_at=1,
    )
    work = AgentWork(
        job_id=job_id,
        session_id=session,
        command_fact_id=f"cmd-{job_id}",
        recovery=None if max_recoveries is None else Recovery(max_recoveries=max_recoveries),
    )
    job = agent_job(work, mail if with_mail else None, kind=kind)
    return job if priority == 0 else job.model_copy(update={"priority": priority})


async def enqueue(pool: Pool, *jobs: Job, created_at: datetime | None = None) -> None:
    """Enqueue jobs in one committed transaction."""
    async with pool.acquire() as conn, conn.transaction():
        for job in jobs:
            assert await enqueue_accepted_job(conn, job, created_at=created_at)


async def claim(jobs: PostgresJobs, **kwargs: Any) -> ClaimedJob:
    """Claim a job that must be there."""
    claimed = await jobs.claim(**kwargs)
    assert claimed is not None
    return claimed


def answer_for(command_id: str) -> str:
    """The reply content a job with this command fact id settles with (the fault run)."""
    return f"answer:{command_id}"


# ---- outbox rows and replies ---------------------------------------------------------


def at(seconds: float) -> datetime:
    """T0 plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def make_reply(key: str, *, agent: str = "alice", content: str = "done") -> Reply:
    """A reply to ``agent`` under ``key``."""
    return Reply(
        key=key,
        in_reply_to="mail-1",
        to=AgentAddress(agent_id=agent, session_id=f"{agent}-session"),
        from_=SENDER,
        content=content,
        created_at=1_767_225_600_000,
        reply=ReplyFacts(command_id="command-1", outcome=Outcome.COMPLETED),
    )


def make_row(
    key: str, *, agent: str = "alice", due: float = 0.0, created: float = 0.0
) -> OutboxRow:
    """A fresh pending row under ``key``, created at T0+created and due at T0+due."""
    row = new_row(make_reply(key, agent=agent), now=at(created))
    return replace(row, due_at=at(due))


def receipt_for(row: OutboxRow, *, when: datetime) -> Receipt:
    """The receipt a delivery of ``row`` at ``when`` stores."""
    return Receipt(
        key=row.key,
        delivered_at=when,
        attempts=row.attempts + 1,
        recipient=row.recipient,
        command_id=row.reply.reply.command_id,
        outcome=row.reply.reply.outcome,
    )


# ---- storing a claim's outcomes -------------------------------------------------------


async def store_claim(
    outbox: Outbox,
    *,
    page: Page,
    outcomes: Sequence[RowOutcome],
    attempts: Sequence[Attempt | None] = (),
    mailbox: Collection[str] = (),
) -> list[str]:
    """Store one claim's outcomes through ``Outbox.store`` (what a drain of one page stores).

    Args:
        outbox: the outbox under test.
        page: the claim the rows were taken under.
        outcomes: one per row.
        attempts: the attempt behind each outcome, in the same order (missing: none).
        mailbox: keys of receipts delivered into the mailbox table.

    Returns:
        The keys whose outcome was stored.
    """
    items = [
        Settled(
            claim=page.claim,
            outcome=outcome,
            attempt=attempts[index] if index < len(attempts) else None,
            mailbox=outcome.key in mailbox,
        )
        for index, outcome in enumerate(outcomes)
    ]
    return await outbox.store(items)


async def release_claim(outbox: Outbox, *, page: Page) -> None:
    """Give a page's rows back untouched through ``Outbox.release_rows``."""
    await outbox.release_rows([(page.claim, row.key) for row in page.rows])


# ---- what the database holds ---------------------------------------------------------


async def outbox_rows(pool: Pool) -> list[dict[str, Any]]:
    """Every outbox row, in key order, with its reply decoded."""
    rows = await pool.fetch(
        "SELECT key, recipient_agent_id, state, due_at, reply::text AS reply "
        "FROM birddog.outbox ORDER BY key"
    )
    return [dict(row) | {"reply": _reply(row["reply"])} for row in rows]


def _reply(stored: str) -> dict[str, Any]:
    # How the outbox stores an absent diagnostic (null or no key) is the outbox's business.
    reply: dict[str, Any] = json.loads(stored)
    reply["reply"] = {key: value for key, value in reply["reply"].items() if value is not None}
    return reply


def json_at(value: object, *path: str | int) -> Any:
    """The part of decoded JSON at ``path`` (object keys and list indexes), checked on the way.

    A job's payload or a stored reply is typed as any JSON value; this walks into it and
    fails naming the step where the shape is not the one the test expects.
    """
    for step in path:
        if isinstance(step, str):
            assert isinstance(value, dict), f"not an object at {step!r}: {value!r}"
            value = value[step]
        else:
            assert isinstance(value, list), f"not a list at {step!r}: {value!r}"
            value = value[step]
    return value


def spool_file(service: MailService) -> SqliteSpool:
    """The SQLite spool behind ``service``: one opened with a spool path has one."""
    assert isinstance(service.spool, SqliteSpool), service.spool
    return service.spool


async def wake_at(pool: Pool) -> datetime | None:
    """The armed wake time, if any."""
    value: datetime | None = await pool.fetchval("SELECT wake_at FROM birddog.wake")
    return value


async def job_row(pool: Pool, job_id: str) -> dict[str, Any]:
    """The stored columns of one job."""
    row = await pool.fetchrow("SELECT * FROM birddog.jobs WHERE job_id = $1", job_id)
    assert row is not None
    return dict(row)


# ---- mailboxes -----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def mailbox_on(
    pool: Pool, listen_dsn: str | None = None, **options: Any
) -> AsyncIterator[PostgresMailbox]:
    """A PostgresMailbox over ``pool`` whose waits LISTEN on ``listen_dsn`` (None: poll only)."""
    notices = PostgresNotices(listen_dsn)
    options.setdefault("clock", SystemClock())
    mailbox = PostgresMailbox(pool, notices=notices, **options)
    try:
        yield mailbox
    finally:
        await mailbox.close()
        await notices.close()


# ---- the network ---------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def deliver_to_mailbox(
    pool: Pool, reply: Reply, *, at: datetime, notify: bool = True, raw: str | None = None
) -> None:
    """Put a reply into birddog.mailbox as a mailbox delivery does (NOTIFY included)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO birddog.mailbox (key, agent_id, session_id, in_reply_to, command_id, "
            "outcome, reply, delivered_at) VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8)",
            reply.key,
            reply.to.agent_id,
            reply.to.session_id,
            reply.in_reply_to,
            reply.reply.command_id,
            reply.reply.outcome.value,
            reply.model_dump_json() if raw is None else raw,
            at,
        )
        if notify:
            await conn.execute("SELECT pg_notify('birddog_mailbox', $1)", reply.to.agent_id)


async def answer_next_job(
    pool: Pool, jobs: PostgresJobs, outcome: Outcome, content: str, diagnostic: str | None = None
) -> str:
    """Play the worker: settle the queued job, whose reply the settlement puts in the mailbox.

    The asker's route is a mailbox, so the settlement itself delivers the reply (with its
    receipt); no drain is needed.

    Returns:
        The job id.
    """
    claimed = await eventually(
        lambda: jobs.claim(lease_s=30),
        "a job the ask enqueued",
        until=lambda job: job is not None,
        within_s=30,
    )
    assert isinstance(claimed, ClaimedJob)
    [key] = await jobs.settle(
        job_id=claimed.job.job_id,
        claim_token=claimed.claim_token,
        outcome=outcome,
        content=content,
        diagnostic=diagnostic,
    )
    assert await pool.fetchval("SELECT count(*) FROM birddog.mailbox WHERE key = $1", key) == 1
    return claimed.job.job_id


async def until_listening(pool: Pool, channel: str = "birddog_mailbox") -> None:
    """Wait (polling, with a deadline) until a session of this database LISTENs on ``channel``."""
    await eventually(
        lambda: pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query = $1"
            " AND datname = current_database()",
            f'LISTEN "{channel}"',
        ),
        f"a session listening on {channel}",
        within_s=60,
    )


def process_running(pid: int) -> bool:
    """Whether a process runs (Linux /proc); an exited zombie awaiting its reaper does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in {"Z", "X"}


# ---- a mail room on fakes ------------------------------------------------------------


class Room:
    """A mail room wired to inspectable fakes."""

    def __init__(self, schedule: RetrySchedule | None = None, page_size: int = 64) -> None:
        self.outbox = InMemoryOutbox()
        self.transport = RecordingTransport(True)
        self.wake = ManualWake()
        self.clock = FrozenClock()
        self.room = MailRoom(
            outbox=self.outbox,
            transport=self.transport,
            wake=self.wake,
            clock=self.clock,
            schedule=schedule,
            page_size=page_size,
            post_timeout_s=1.0,
            rng=lambda: 0.5,
        )


async def http_get_ok(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 now (False while nothing listens there)."""
    import httpx  # noqa: PLC0415 - the A2A tests' client library, only for them

    async with httpx.AsyncClient() as http:
        with contextlib.suppress(httpx.HTTPError):
            return (await http.get(url)).status_code == 200
    return False
