"""Acceptance harness: the real CLI and daemon as subprocesses, real inboxes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest
from aiohttp import web

from birddog import AgentAddress, MailRoom, Reply
from birddog.clock import SystemClock
from birddog.http.inbox import Inbox
from birddog.http.server import serve
from birddog.http.transport import HttpTransport
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import create_pool
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.wake import PostgresWake
from tests.support import settled_job

ROOT = Path(__file__).resolve().parents[2]
BIRDDOG = str(Path(sys.executable).parent / "birddog")


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: the test database, no metrics ports, JSON logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIRDDOG_")}
    env.update(
        DATABASE_URL=database_url,
        BIRDDOG_METRICS_PORT="0",
        BIRDDOG_WORKER_METRICS_PORT="0",
        BIRDDOG_LOG_FORMAT="json",
        BIRDDOG_BASE_DELAY_S="0.05",
        BIRDDOG_MAX_DELAY_S="0.2",
        BIRDDOG_POST_TIMEOUT_S="5",
        BIRDDOG_BACKSTOP_S="2",
        BIRDDOG_SHUTDOWN_GRACE_S="2",
    )
    env.update(extra)
    return env


async def cli(
    database_url: str, *args: str, timeout_s: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``birddog ARGS`` to completion without blocking the event loop."""
    return await asyncio.to_thread(
        subprocess.run,
        [BIRDDOG, *args],
        env=cli_env(database_url, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


class Daemon:
    """A ``birddog run`` (or ``birddog COMMAND``) subprocess this test started and will stop by its pid."""

    def __init__(self, database_url: str, *args: str, command: str = "run", **env: str) -> None:
        # The log goes to a file, so a test can read it while the daemon runs.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(  # noqa: S603 - our own console script
            [BIRDDOG, command, *args],
            env=cli_env(database_url, **env),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            text=True,
        )

    def log(self) -> str:
        """Everything the daemon logged so far."""
        self._log.seek(0)
        return self._log.read()

    def terminate(self, timeout_s: float = 20) -> tuple[int, str]:
        """SIGTERM, wait, and return the exit code and the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=timeout_s)
        text = self.log()
        self._log.close()
        return self.proc.returncode, text

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=20)
        if not self._log.closed:
            self._log.close()


@pytest.fixture
def daemons(database_url: str) -> Iterator[Callable[..., Daemon]]:
    """Start daemons on the test database; every one is stopped at the end."""
    started: list[Daemon] = []

    def start(*args: str, command: str = "run", **env: str) -> Daemon:
        daemon = Daemon(database_url, *args, command=command, **env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


Behaviour = Callable[[Reply, int], Awaitable[web.StreamResponse | None]]


class TestInbox:
    """Inboxes on 127.0.0.1 for many agents at ``/inbox/<agent>``, verifying signatures.

    Attributes:
        posts: posts received per webhook-id (duplicates show as counts above 1).
        replies: the verified replies, in arrival order.
        behaviour: optional per-post override; return a response to answer it.
    """

    __test__ = False

    def __init__(self) -> None:
        self.posts: Counter[str] = Counter()
        self.replies: list[Reply] = []
        self.secrets: dict[str, Inbox] = {}
        self.behaviour: Behaviour | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen on an ephemeral port."""
        app = web.Application()
        app.router.add_post("/inbox/{agent}", self._view)
        self._runner, self.url = await serve(app, shutdown_timeout=0.5)

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()

    def url_for(self, agent: str) -> str:
        """The inbox URL of ``agent``."""
        return f"{self.url}/inbox/{agent}"

    async def _view(self, request: web.Request) -> web.StreamResponse:
        agent = request.match_info["agent"]
        body = await request.read()
        received = self.secrets[agent].receive(request.headers, body)
        self.posts[received.webhook_id] += 1
        if self.behaviour is not None:
            answer = await self.behaviour(received.reply, self.posts[received.webhook_id])
            if answer is not None:
                return answer
        self.replies.append(received.reply)
        return web.json_response({"accepted": True})


@pytest.fixture
async def inbox() -> AsyncIterator[TestInbox]:
    """A running multi-agent inbox on 127.0.0.1."""
    box = TestInbox()
    await box.start()
    yield box
    await box.stop()


class Harness:
    """In-test access to the same database the subprocesses use."""

    def __init__(self, pool: Any, inbox: TestInbox) -> None:
        self.pool = pool
        self.inbox = inbox
        self.routes = PostgresRoutes(pool)
        self.outbox = PostgresOutbox(pool)
        self.wake = PostgresWake(pool)
        self.room = MailRoom(
            outbox=self.outbox,
            transport=HttpTransport(self.routes),
            wake=self.wake,
            clock=SystemClock(),
        )

    async def add_agent(self, agent: str) -> None:
        """Route ``agent`` to the test inbox with a fresh secret."""
        route = await self.routes.add(agent, self.inbox.url_for(agent))
        self.inbox.secrets[agent] = Inbox(route.secret)

    async def receipts(self) -> int:
        """How many receipts exist."""
        count: int = await self.pool.fetchval("SELECT count(*) FROM birddog.receipts")
        return count

    async def drain_daemons(self) -> int:
        """How many drain daemons have recorded themselves as running."""
        count: int = await self.pool.fetchval(
            "SELECT count(*) FROM birddog.daemons WHERE kind = 'drain'"
        )
        return count

    async def states(self) -> dict[str, str]:
        """Every key's state: receipt, pending or dead."""
        rows = await self.pool.fetch(
            "SELECT key, state FROM birddog.outbox UNION ALL SELECT key, 'receipt' FROM birddog.receipts"
        )
        return {row["key"]: row["state"] for row in rows}


@pytest.fixture
async def harness(database_url: str, inbox: TestInbox) -> AsyncIterator[Harness]:
    """A pool on the test database and adapters over it."""
    pool = await create_pool(database_url)
    yield Harness(pool, inbox)
    await pool.close()


async def fan_out(harness: Harness, count: int, agents: list[str], prefix: str = "m") -> list[str]:
    """Fan out ``count`` settled jobs whose replies go to ``agents``; return the reply keys."""
    keys: list[str] = []
    for i in range(count):
        reply_to = [AgentAddress(agent_id=a, session_id=f"s-{a}") for a in agents]
        job = settled_job(key=f"{prefix}{i:04d}", reply_to=reply_to)
        keys += await harness.room.fan_out(job=job, content=f"reply {i}")
    return keys


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A short-pathed BIRDDOG_DATA_DIR for an embedded server a test's processes start.

    Short, since the server's socket lives inside it; reachable by the server's own user
    when tests run as root. A server still running in it at the end is stopped by its pid.
    """
    root = Path(tempfile.mkdtemp(prefix="bd-"))
    root.chmod(0o711)
    data = root / "data"
    try:
        yield data
    finally:
        if data.exists():
            from birddog.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415 - an extra

            pid = EmbeddedPostgres(data).pid
            if pid is not None:  # its last user's exit stops it; this only guards a crash
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], *, timeout_s: float = 30, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it holds, failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# ---- least privilege: one login per role ----------------------------------------------

KINDS = ("owner", "daemon", "worker", "sender", "reader")
"""The kinds of process, one role each (``birddog migrate --roles``)."""


def as_login(dsn: str, user: str, password: str) -> str:
    """The same database, logged in as another user with a password."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


@pytest.fixture
async def logins(database_url: str) -> AsyncIterator[dict[str, str]]:
    """``birddog migrate --roles`` as the superuser, then one login per role (DSNs by kind)."""
    done = await cli(database_url, "migrate", "--roles")
    assert done.returncode == 0, done.stderr
    assert "birddog_reader are in place" in done.stdout
    tag = secrets.token_hex(4)
    conn = await asyncpg.connect(database_url)
    made: dict[str, str] = {}
    try:
        for kind in KINDS:
            name, password = f"bdt_{tag}_{kind}", secrets.token_urlsafe(16)
            # Test-made names and passwords: letters, digits, '_' and '-' only.
            await conn.execute(
                f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE birddog_{kind}"
            )
            made[kind] = as_login(database_url, name, password)
        yield made
    finally:
        for kind in KINDS:
            await conn.execute(f"DROP ROLE IF EXISTS bdt_{tag}_{kind}")
        await conn.close()
