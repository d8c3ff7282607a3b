"""Secrets and trust: no log line carries a secret, a token or mail content; URLs come from routes.

A full delivery runs with known secrets (route secrets, the alert secret and alert URL
token, a bearer token and a password inside a handler's error, secrets in recipients'
error bodies, a password in the DSN when the server allows it) and known content; then
every line the daemon, the worker and the operator commands wrote is searched for them.
The same is done in-process on structlog's rendered output. Stored diagnostics are
checked to be redacted, and delivery is shown to go only where an operator's route says.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import structlog
from aiohttp import web

from birddog import (
    AgentAddress,
    AgentJobPayload,
    AgentWork,
    DeadReason,
    InvalidInput,
    Mail,
    Outcome,
    Reply,
    RetrySchedule,
    RowState,
    agent_job,
    bounded_diagnostic,
)
from birddog.clock import SystemClock
from birddog.core.delivery import new_row
from birddog.http import signing
from birddog.http.alerts import AlertPoster, DeadLetterGroup
from birddog.http.inbox import Inbox, aiohttp_handler
from birddog.http.server import serve
from birddog.http.transport import HttpTransport
from birddog.logs import configure
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import eventually
from tests.support.cli import spool_path_for
from tests.support.stacks import pg_room, run_worker_once

ROOT = Path(__file__).resolve().parents[2]
BIRDDOG = str(Path(sys.executable).parent / "birddog")


def _token(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


@dataclass(frozen=True)
class Secrets:
    """Everything that must never reach a log line, with a fresh random value each run."""

    bearer: str = field(default_factory=lambda: _token("sk-live-"))
    password: str = field(default_factory=lambda: _token("hunter2-"))
    recipient_token: str = field(default_factory=lambda: _token("rcpt-"))
    recipient_key: str = field(default_factory=lambda: _token("rk-"))
    alert_url_token: str = field(default_factory=lambda: _token("alerttoken"))
    alert_secret: str = field(default_factory=signing.generate_secret)
    mail_content: str = field(default_factory=lambda: _token("MAILCONTENT-"))
    answer: str = field(default_factory=lambda: _token("ANSWERCONTENT-"))
    route_secrets: list[str] = field(default_factory=list)
    dsn_password: str = field(default_factory=lambda: _token("dsnpw-"))

    def forbidden(self) -> dict[str, str]:
        """Every secret by name, and the base64 key of each signing secret too."""
        named = {
            "bearer token": self.bearer,
            "password": self.password,
            "recipient bearer token": self.recipient_token,
            "recipient api key": self.recipient_key,
            "alert URL token": self.alert_url_token,
            "alert secret": self.alert_secret.removeprefix("whsec_"),
            "mail content": self.mail_content,
            "reply content": self.answer,
            "DSN password": self.dsn_password,
        }
        for index, secret in enumerate(self.route_secrets):
            named[f"route secret {index}"] = secret.removeprefix("whsec_")
        return named

    def error_body(self) -> dict[str, str]:
        """What a failing recipient answers: an error quoting its own credentials."""
        return {
            "error": f"upstream 401 Authorization: Bearer {self.recipient_token} "
            f"api_key={self.recipient_key}"
        }


def assert_clean(text: str, known: Secrets, where: str) -> None:
    """``text`` holds none of the secrets."""
    leaked = [name for name, value in known.forbidden().items() if value in text]
    assert not leaked, f"{where} leaks {leaked}"


# ---------------------------------------------------------------------------------------
# the worker's handler (imported by `birddog worker --handler` from this module)
# ---------------------------------------------------------------------------------------


async def leaky(payload: AgentJobPayload) -> str:
    """Answer with content, or fail quoting a bearer token and a password, as providers do."""
    if payload.command_fact_id == "cmd-leak":
        raise RuntimeError(
            f"provider said 401 Authorization: Bearer {os.environ['SECRETS_TEST_BEARER']} "
            f"(password={os.environ['SECRETS_TEST_PASSWORD']})"
        )
    assert payload.mail is not None
    return f"{os.environ['SECRETS_TEST_ANSWER']} to {payload.mail.content}"


# ---------------------------------------------------------------------------------------
# recipients on 127.0.0.1
# ---------------------------------------------------------------------------------------


class Recipients:
    """Inboxes for alice (accepts), flaky (two errors first), gone (410), stuck (always 500).

    Errors quote credentials in their bodies, so stored ``last_error`` values must mask
    them. Alerts arrive at ``/alerts``.
    """

    def __init__(self, known: Secrets) -> None:
        self.known = known
        self.inboxes: dict[str, Inbox] = {}
        self.replies: list[Reply] = []
        self.posts: Counter[str] = Counter()
        self.alerts: list[tuple[dict[str, str], bytes]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen on an ephemeral port."""
        app = web.Application()
        app.router.add_post("/inbox/{agent}", self._inbox)
        app.router.add_post("/alerts", self._alert)
        self._runner, self.url = await serve(app)

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _inbox(self, request: web.Request) -> web.Response:
        agent = request.match_info["agent"]
        received = self.inboxes[agent].receive(request.headers, await request.read())
        self.posts[agent] += 1
        if agent == "gone":
            return web.json_response(self.known.error_body(), status=410)
        if agent == "stuck" or (agent == "flaky" and self.posts[agent] <= 2):
            return web.json_response(self.known.error_body(), status=500)
        self.replies.append(received.reply)
        return web.json_response({"accepted": True})

    async def _alert(self, request: web.Request) -> web.Response:
        self.alerts.append((dict(request.headers), await request.read()))
        return web.json_response({"ok": True})


@pytest.fixture
async def recipients() -> AsyncIterator[Recipients]:
    """The recipients, with fresh secrets."""
    box = Recipients(Secrets())
    await box.start()
    yield box
    await box.stop()


async def with_password(dsn: str, password: str) -> str:
    """``dsn`` with a password in it when the server lets that connect (trust auth), else as is."""
    if "postgres:@" not in dsn:
        return dsn
    candidate = dsn.replace("postgres:@", f"postgres:{password}@", 1)
    try:
        conn = await asyncpg.connect(candidate)
    except (OSError, asyncpg.PostgresError):
        return dsn
    await conn.close()
    return candidate


ADDRESSES = {name: AgentAddress(agent_id=name, session_id=f"s-{name}") for name in
             ("alice", "flaky", "gone", "stuck")}  # fmt: skip
BOB = AgentAddress(agent_id="bob", session_id="s-bob")


def the_jobs(known: Secrets) -> list[Any]:
    """A job whose replies go to every recipient, and one whose handler fails leaking."""
    talk = Mail(
        key="mail-talk", to=BOB, from_=ADDRESSES["alice"], reply_to=list(ADDRESSES.values()),
        content=known.mail_content, created_at=1,
    )  # fmt: skip
    leak = Mail(
        key="mail-leak", to=BOB, from_=ADDRESSES["alice"], reply_to=[ADDRESSES["alice"]],
        content=known.mail_content, created_at=2,
    )  # fmt: skip
    return [
        agent_job(
            AgentWork(job_id="job-talk", session_id="s-bob", command_fact_id="cmd-talk"), talk
        ),
        agent_job(
            AgentWork(job_id="job-leak", session_id="s-bob", command_fact_id="cmd-leak"), leak
        ),
    ]


FOR_PEOPLE = ("birddog is ready: ", "settled ")
"""How the lines a process prints for people (not log events) begin."""


def run_cli(env: dict[str, str], *args: str) -> str:
    """Run ``birddog ARGS`` and return everything it printed (stdout and stderr)."""
    done = subprocess.run(  # noqa: S603 - our own console script
        [BIRDDOG, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-1000:]
    return done.stdout + done.stderr


async def test_a_full_delivery_logs_no_secret_token_or_content(
    database_url: str, pg_pool: Pool, recipients: Recipients, tmp_path: Path
) -> None:
    """Daemon, worker and operator commands print no secret, token or content; rows are masked."""
    known = recipients.known
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    for agent in ADDRESSES:
        route = await routes.add(agent, f"{recipients.url}/inbox/{agent}")
        assert route.secret is not None
        recipients.inboxes[agent] = Inbox(route.secret)
        known.route_secrets.append(route.secret)
    async with pg_pool.acquire() as conn, conn.transaction():
        for job in the_jobs(known):
            await enqueue_accepted_job(conn, job)
    dsn = await with_password(database_url, known.dsn_password)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIRDDOG_")}
    env |= {
        "DATABASE_URL": dsn, "BIRDDOG_SPOOL_PATH": str(spool_path_for(dsn)),
        "BIRDDOG_LOG_FORMAT": "json", "BIRDDOG_LOG_LEVEL": "debug",
        "BIRDDOG_METRICS_PORT": "0", "BIRDDOG_BASE_DELAY_S": "0.05", "BIRDDOG_MAX_DELAY_S": "0.2",
        "BIRDDOG_BACKSTOP_S": "1", "BIRDDOG_MAX_ATTEMPTS": "1000",
        "BIRDDOG_ALERT_SECRET": known.alert_secret, "BIRDDOG_ALERT_COALESCE_S": "0.2",
        "BIRDDOG_ALERT_URL": f"{recipients.url}/alerts?token={known.alert_url_token}",
        "SECRETS_TEST_BEARER": known.bearer, "SECRETS_TEST_PASSWORD": known.password,
        "SECRETS_TEST_ANSWER": known.answer,
    }  # fmt: skip
    outputs: dict[str, str] = {}
    outputs["worker"] = await asyncio.to_thread(
        run_cli,
        env,
        "worker",
        "--handler",
        "tests.integration.test_secrets_in_logs:leaky",
        "--once",
    )
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as log:
        daemon = await asyncio.to_thread(
            subprocess.Popen,
            [BIRDDOG, "run"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            await eventually(
                lambda: _delivered(pg_pool, recipients), "every reply's end", within_s=60
            )
            for command in (["pending", "--json"], ["dead", "--json"], ["status", "--json"],
                            ["route", "list"]):  # fmt: skip
                outputs[" ".join(command)] = await asyncio.to_thread(run_cli, env, *command)
        finally:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(daemon.wait, 30)
    outputs["daemon"] = log_path.read_text()
    assert code == 0, outputs["daemon"][-2000:]

    for where, text in outputs.items():
        assert_clean(text, known, where)
    for where in ("worker", "daemon"):
        lines = [line for line in outputs[where].splitlines() if line.strip()]
        assert lines, f"{where} logged nothing"
        # Besides its log, a process prints one line for people: the daemon's ready line,
        # the worker's summary of what it settled.
        logged = [line for line in lines if not line.startswith(FOR_PEOPLE)]
        assert len(lines) - len(logged) <= 1, f"{where} printed more than one line for people"
        assert all(json.loads(line)["event"] for line in logged), f"{where} wrote a non-JSON line"
    assert '"handler_failed"' in outputs["worker"]
    assert '"reply_dead"' in outputs["daemon"]

    # Stored diagnostics are masked: the job's, the reply's, and each row's last error.
    diagnostic = await pg_pool.fetchval(
        "SELECT diagnostic FROM birddog.jobs WHERE job_id = 'job-leak'"
    )
    assert "Bearer [redacted]" in diagnostic
    assert_clean(diagnostic, known, "jobs.diagnostic")
    [failed] = [reply for reply in recipients.replies if reply.in_reply_to == "mail-leak"]
    assert failed.reply.outcome is Outcome.FAILED
    assert failed.reply.diagnostic is not None
    assert "[redacted]" in failed.reply.diagnostic
    assert_clean(failed.reply.diagnostic, known, "the reply's diagnostic")
    errors = await pg_pool.fetch("SELECT key, state, last_error FROM birddog.outbox ORDER BY key")
    assert {row["state"] for row in errors} == {"pending", "dead"}
    for row in errors:
        assert "[redacted]" in row["last_error"], row["last_error"]
        assert_clean(row["last_error"], known, f"outbox.last_error of {row['key']}")
    # The alert is signed, says what died and why, and carries neither content nor secrets.
    [(headers, body)] = recipients.alerts
    key = signing.secret_key(known.alert_secret)
    assert signing.verify(
        [key], msg_id=headers["webhook-id"], timestamp=int(headers["webhook-timestamp"]),
        body=body, signatures=headers["webhook-signature"],
    )  # fmt: skip
    assert json.loads(body)["deadReasons"] == {"gone": 1}
    assert_clean(body.decode(), known, "the alert")


async def _delivered(pool: Pool, recipients: Recipients) -> bool:
    """Both of alice's replies and flaky's arrived, gone's died, stuck failed twice, an alert came."""
    states = {
        row["key"]: (row["state"], row["attempts"])
        for row in await pool.fetch("SELECT key, state, attempts FROM birddog.outbox")
    }
    receipts = await pool.fetchval("SELECT count(*) FROM birddog.receipts")
    stuck = states.get("outbox:mail-talk:reply:3", ("", 0))
    return (
        receipts == 3
        and states.get("outbox:mail-talk:reply:2", ("",))[0] == "dead"
        and stuck[0] == "pending"
        and stuck[1] >= 2
        and len(recipients.alerts) == 1
    )


# ---------------------------------------------------------------------------------------
# in-process: structlog's rendered output
# ---------------------------------------------------------------------------------------


@pytest.fixture
def rendered_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """BirdDog's own log configuration (JSON, debug), rendering into a buffer."""
    saved = structlog.get_config()
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buffer)
    configure(log_format="json", level="debug")
    yield buffer
    structlog.configure(**saved)


async def test_in_process_logs_carry_no_secret_or_content(
    pg_pool: Pool,
    recipients: Recipients,
    rendered_logs: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker, drain, inbox refusals, a failing host handler and alerts log no secret or content."""
    known = recipients.known
    monkeypatch.setenv("SECRETS_TEST_BEARER", known.bearer)
    monkeypatch.setenv("SECRETS_TEST_PASSWORD", known.password)
    monkeypatch.setenv("SECRETS_TEST_ANSWER", known.answer)
    await _run_in_process(pg_pool, known)
    structlog.get_logger("birddog.test").info(
        "bound_by_mistake", content=known.mail_content, secret=known.alert_secret,
        token=known.bearer, authorization=f"Bearer {known.bearer}", body=known.answer,
        dsn=f"postgresql://u:{known.dsn_password}@h/db", password=known.password,
    )  # fmt: skip
    text = rendered_logs.getvalue()
    for event in ("handler_failed", "job_settled", "inbox_refused", "inbox_handler_failed",
                  "alert_failed", "bound_by_mistake"):  # fmt: skip
        assert f'"{event}"' in text, f"{event} was not logged; the capture is broken"
    assert_clean(text, known, "structlog output")


class Host:
    """A recipient host on 127.0.0.1 whose handler fails the first reply, quoting its content."""

    def __init__(self, secret: str) -> None:
        self.inbox = Inbox(secret)
        self.taken: list[Reply] = []
        self.failed = False
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def on_reply(self, reply: Reply) -> None:
        """Store the reply; the first time, fail as a careless host would."""
        if not self.failed:
            self.failed = True
            raise RuntimeError(f"could not store {reply.content}")
        self.taken.append(reply)

    async def __aenter__(self) -> Host:
        app = web.Application()
        app.router.add_post("/host", aiohttp_handler(self.inbox, self.on_reply))
        self._runner, url = await serve(app)
        self.url = f"{url}/host"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _run_in_process(pool: Pool, known: Secrets) -> None:
    """Run a worker, drains, an intruder's post and a failing alert, all in this process."""
    routes = PostgresRoutes(pool, clock=SystemClock())
    route = await routes.add("alice", "http://127.0.0.1:1/not-yet")
    assert route.secret is not None
    known.route_secrets.append(route.secret)
    solo = Mail(
        key="mail-solo", to=BOB, from_=ADDRESSES["alice"], reply_to=[ADDRESSES["alice"]],
        content=known.mail_content, created_at=3,
    )  # fmt: skip
    work = AgentWork(job_id="job-solo", session_id="s-bob", command_fact_id="cmd-solo")
    leak = next(job for job in the_jobs(known) if job.job_id == "job-leak")
    async with pool.acquire() as conn, conn.transaction():
        await enqueue_accepted_job(conn, agent_job(work, solo))
        await enqueue_accepted_job(conn, leak)
    await run_worker_once(pool, leaky)

    async with Host(route.secret) as host, HttpTransport(routes, clock=SystemClock()) as transport:
        await routes.update("alice", url=host.url)
        room = pg_room(pool, transport, schedule=RetrySchedule(base_delay_s=0.0, jitter=0.0))

        async def both_taken() -> bool:
            await room.drain_outbox()
            return len(host.taken) == 2

        await eventually(both_taken, "both replies taken", within_s=30)
        async with (
            aiohttp.ClientSession() as intruder,
            intruder.post(
                host.url,
                data=json.dumps({"content": known.mail_content}),
                headers={
                    "webhook-id": "x",
                    "webhook-timestamp": "1",
                    "webhook-signature": "v1,AA==",
                },
            ) as answer,
        ):
            assert answer.status == 401
    reply = host.taken[0]
    dead = replace(
        new_row(reply, now=datetime.now(UTC)),
        state=RowState.DEAD,
        dead_reason=DeadReason.GONE,
        last_error=bounded_diagnostic(f"Authorization: Bearer {known.bearer}"),
    )
    async with AlertPoster(
        f"http://127.0.0.1:1/alerts?token={known.alert_url_token}",
        known.alert_secret,
        clock=SystemClock(),
    ) as alerts:
        assert not await alerts.alert(DeadLetterGroup.of([dead], dead_at=datetime.now(UTC)))


# ---------------------------------------------------------------------------------------
# trust: inbox URLs come only from the operator's routes
# ---------------------------------------------------------------------------------------

NOT_HTTP = [
    "file:///etc/passwd",
    "ftp://127.0.0.1/inbox",
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "gopher://127.0.0.1:70/",
    "unix:///var/run/docker.sock",
    "http://",
    "//evil.example/inbox",
    "127.0.0.1:8080/inbox",
    "",
]


@pytest.mark.parametrize("url", NOT_HTTP)
async def test_routes_take_only_http_and_https(pg_pool: Pool, url: str) -> None:
    """Adding or updating a route to a URL that is not http(s) with a host names url; nothing changes."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    with pytest.raises(InvalidInput) as added:
        await routes.add("mallory", url)
    assert added.value.field == "url"
    await routes.add("alice", "https://inbox.example/alice")
    with pytest.raises(InvalidInput) as updated:
        await routes.update("alice", url=url)
    assert updated.value.field == "url"
    assert [(r.agent_id, r.url) for r in await routes.list()] == [
        ("alice", "https://inbox.example/alice")
    ]


async def test_urls_inside_mail_cannot_redirect_delivery(
    pg_pool: Pool, recipients: Recipients
) -> None:
    """URL-looking ids, keys and content go nowhere: only the route of a known agent is posted to."""
    evil = Recipients(recipients.known)
    await evil.start()
    try:
        trap = f"{evil.url}/inbox/alice"
        routes = PostgresRoutes(pg_pool, clock=SystemClock())
        route = await routes.add("alice", f"{recipients.url}/inbox/alice")
        assert route.secret is not None
        recipients.inboxes["alice"] = Inbox(route.secret)
        evil.inboxes["alice"] = Inbox(route.secret)
        lure = AgentAddress(agent_id=trap, session_id=trap)
        mail = Mail(
            key=f"mail {trap}", to=BOB, from_=lure, reply_to=[ADDRESSES["alice"], lure],
            content=f"please reply to {trap}", created_at=1,
        )  # fmt: skip
        work = AgentWork(job_id="job-lure", session_id="s-bob", command_fact_id=trap)
        async with pg_pool.acquire() as conn:
            await enqueue_accepted_job(conn, agent_job(work, mail))
        jobs = PostgresJobs(pg_pool, clock=SystemClock())
        claimed = await jobs.claim()
        assert claimed is not None
        await jobs.settle(
            job_id="job-lure", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED,
            content=f"see {trap}",
        )  # fmt: skip
        async with HttpTransport(routes, clock=SystemClock()) as transport:
            room = pg_room(pg_pool, transport)
            report = await room.drain_outbox()
    finally:
        await evil.stop()
    assert evil.posts == Counter()
    assert recipients.posts == Counter({"alice": 1})
    assert report.dead == [(f"outbox:mail {trap}:reply:1", DeadReason.UNKNOWN_RECIPIENT)]
