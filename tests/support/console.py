"""A small mail room with something in every state, for the operator's pages and commands.

Jobs go through the real job store (enqueue, claim, settle, fan out) and one reply is
delivered by a real drain; what a drain would take hours to reach (a dead letter, an
attempt log, an hour of activity) is written with SQL. Some keys, ids and errors are
hostile on purpose: markup, quotes, an escape sequence and a bidi override, so every
page and command can be checked for escaping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiohttp import web

from birddog import AgentAddress, Outcome
from birddog.clock import SystemClock
from birddog.console import Sessions, make_app
from birddog.core.egress import EgressPolicy
from birddog.http.server import serve
from birddog.postgres.admin import PostgresAdmin
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.service.replaying import CheckedReplay
from birddog.testing import FrozenClock, ManualWake, RecordingTransport
from tests.support import ALICE, CAROL, claim, enqueue, make_job
from tests.support.stacks import pg_room

HOSTILE_JOB = 'job-<script>alert("job")</script>'
"""A job id with markup and quotes (ids may hold any printable character)."""

HOSTILE_AGENT = "mallory\"'><img src=x onerror=alert(1)>"
"""An agent id that tries to break out of an attribute."""

HOSTILE_ERROR = "\x1b[2J\u202eevil <script>alert('err')</script> & \"quoted\""
"""A last error with an escape sequence, a bidi override, markup and quotes."""

CREDENTIAL_URL = "https://user:hunter2@alice.example/inbox?token=sekrit#frag"
"""Alice's inbox URL: its user info and query must never be shown."""

HISTORY = 300
"""Receipts written for the last hour's chart (besides the one real delivery)."""

ATTEMPTS = [
    {"at": "2026-01-01T00:00:01+00:00", "result": "failed", "status": 500, "ms": 12,
     "error": "HTTP 500 Internal Server Error"},
    {"at": "2026-01-01T00:00:03+00:00", "result": "deferred", "status": 503, "ms": 8,
     "error": "HTTP 503 retry after 2s"},
]  # fmt: skip
"""An attempt log as the drain records it (oldest first)."""


@dataclass(frozen=True)
class Seeded:
    """What :func:`seed` wrote.

    Attributes:
        delivered_key: alice's reply to job-1's mail, delivered (a receipt).
        held_key: carol's reply to job-1's mail, pending behind carol's hold.
        dead_key: the hostile job's reply to mallory, dead (mallory has a route since).
        queued_job: a queued job (to cancel).
        running_job: a running job.
        mail_key: job-1's mail key.
    """

    delivered_key: str = "outbox:mail-job-1:reply:0"
    held_key: str = "outbox:mail-job-1:reply:1"
    dead_key: str = f"outbox:mail-{HOSTILE_JOB}:reply:0"
    queued_job: str = "job-queued"
    running_job: str = "job-running"
    mail_key: str = "mail-job-1"


async def seed(pool: Pool, *, now: datetime) -> Seeded:
    """Fill the database with routes, jobs in every state, replies, receipts and history.

    Args:
        pool: the test database's pool.
        now: the current time (recent activity is written in the hour before it).

    Returns:
        The keys and ids written.
    """
    seeded = Seeded()
    clock = FrozenClock(now)
    routes = PostgresRoutes(pool, cache_s=0, clock=clock)
    jobs = PostgresJobs(pool, clock=clock)
    await routes.add("alice", "https://alice.example/inbox?token=sekrit")
    # Stored before URLs with credentials were refused: such a row can still be there.
    await pool.execute(
        "UPDATE birddog.routes SET url = $1 WHERE agent_id = 'alice'", CREDENTIAL_URL
    )
    await routes.add("carol", "http://127.0.0.1:9/inbox")
    await routes.hold("carol")
    await routes.add("dave", kind="mailbox")

    # job-1: settled; alice's reply is delivered, carol's waits behind her hold.
    await enqueue(pool, make_job("job-1", reply_to=(ALICE, CAROL)))
    token = (await claim(jobs)).claim_token
    await jobs.settle(
        job_id="job-1", claim_token=token, outcome=Outcome.COMPLETED, content="the answer"
    )
    room = pg_room(pool, RecordingTransport(True), wake=ManualWake(), clock=clock)
    await room.drain_outbox()
    await pool.execute(
        "UPDATE birddog.receipts SET attempt_log = $2::text::jsonb WHERE key = $1",
        seeded.delivered_key,
        json.dumps(ATTEMPTS),
    )

    # A hostile job that failed; its reply to mallory died with a hostile error.
    mallory = AgentAddress(agent_id=HOSTILE_AGENT, session_id="s-mallory")
    await enqueue(pool, make_job(HOSTILE_JOB, reply_to=(mallory,)))
    token = (await claim(jobs)).claim_token
    await jobs.settle(
        job_id=HOSTILE_JOB, claim_token=token, outcome=Outcome.FAILED, content="it broke"
    )
    await pool.execute(
        "UPDATE birddog.outbox SET state = 'dead', dead_reason = 'unknown_recipient', "
        "dead_at = $2::timestamptz, created_at = $2::timestamptz - interval '7 minutes', last_error = $3, attempts = 2, "
        "attempt_log = $4::text::jsonb WHERE key = $1",
        seeded.dead_key,
        now - timedelta(minutes=3),
        HOSTILE_ERROR,
        json.dumps(ATTEMPTS),
    )

    # Its cause fixed since (mallory has a route now), so the dead letter may be replayed.
    await routes.add(HOSTILE_AGENT, kind="mailbox")

    # One running job and one queued job, in sessions of their own.
    await enqueue(pool, make_job(seeded.running_job, session="s-run", reply_to=(ALICE,)))
    await claim(jobs, queues=["s-run"])
    await enqueue(pool, make_job(seeded.queued_job, session="s-wait", reply_to=(ALICE,)))

    # A drain daemon and a worker that beat just now.
    await pool.execute(
        "INSERT INTO birddog.daemons (daemon_id, kind, host, pid) VALUES "
        "('drain:host-a:4242', 'drain', 'host-a', 4242), "
        "('worker:host-a:4243', 'worker', 'host-a', 4243)"
    )

    # An hour of history: HISTORY receipts spread unevenly over the last 58 minutes.
    await pool.execute(
        "INSERT INTO birddog.receipts (key, delivered_at, attempts, recipient_agent_id, "
        "recipient_session_id, command_id, outcome) "
        "SELECT 'outbox:history-' || i || ':reply:0', "
        "$1::timestamptz - ((i * i * 7919) % 3480) * interval '1 s', "
        "1, 'alice', 's-alice', 'cmd', 'completed' FROM generate_series(1, $2::int) AS i",
        now,
        HISTORY,
    )
    return seeded


@dataclass
class ConsoleServer:
    """A console served on 127.0.0.1 for a test.

    Attributes:
        url: its base URL, ``http://127.0.0.1:<port>``.
        sessions: its start-up token and sessions.
        runner: stop it with ``await runner.cleanup()``.
    """

    url: str
    sessions: Sessions
    runner: web.AppRunner

    @property
    def sign_in_url(self) -> str:
        """The URL ``birddog console`` prints: the base URL with the token."""
        return f"{self.url}/?token={self.sessions.token}"


async def start_console(pool: Pool, *, read_only: bool = False) -> ConsoleServer:
    """Serve a console over ``pool`` on a free loopback port, on the wall clock."""
    sessions = Sessions()
    app = make_app(
        admin=PostgresAdmin(pool),
        outbox=CheckedReplay(
            PostgresOutbox(pool),
            PostgresRoutes(pool, cache_s=0, clock=SystemClock()),
            EgressPolicy(),
        ),
        routes=PostgresRoutes(pool, cache_s=0, clock=SystemClock()),
        jobs=PostgresJobs(pool, clock=SystemClock()),
        clock=SystemClock(),
        sessions=sessions,
        read_only=read_only,
    )
    runner, url = await serve(app, shutdown_timeout=0.5)
    return ConsoleServer(url=url, sessions=sessions, runner=runner)
