"""Mail rooms over a test's PostgreSQL database, as the processes build them."""

from __future__ import annotations

import asyncio
from typing import Any

from birddog import AgentAddress, Clock, MailRoom, Outbox, Transport, WakeScheduler
from birddog.clock import SystemClock
from birddog.engine import EngineConfig
from birddog.http.inbox import Inbox
from birddog.http.transport import HttpTransport
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.postgres.wake import PostgresWake
from birddog.testing import ManualListener
from birddog.worker import Handler, Worker
from tests.support import settled_job
from tests.support.inbox import TestInbox

QUICK = EngineConfig(linger_s=0.001)
"""An engine that waits only 1 ms for more rows before a post: tests need no company."""


def pg_room(
    pool: Pool,
    transport: Transport,
    *,
    outbox: Outbox | None = None,
    wake: WakeScheduler | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> MailRoom:
    """A mail room over the test database: its outbox and wake table, the wall clock.

    Args:
        pool: the test database's pool.
        transport: how replies are posted (a recording fake or the HTTP transport).
        outbox: the outbox; by default a new ``PostgresOutbox`` on ``pool``.
        wake: the wake scheduler; by default a new ``PostgresWake`` on ``pool``.
        clock: the clock; by default the system clock.
        **options: the rest of :class:`~birddog.MailRoom`'s options (schedule, config...).

    Returns:
        The mail room.
    """
    return MailRoom(
        outbox=PostgresOutbox(pool) if outbox is None else outbox,
        transport=transport,
        wake=PostgresWake(pool) if wake is None else wake,
        clock=SystemClock() if clock is None else clock,
        **options,
    )


async def run_worker_once(pool: Pool, handler: Handler, *, timeout_s: float = 30) -> None:
    """Run a worker over the test database until no job is queued (``once``), lease 5 s."""
    worker = Worker(
        jobs=PostgresJobs(pool, clock=SystemClock()),
        handler=handler,
        listener=ManualListener(max_wait_s=0),
        lease_s=5,
    )
    await asyncio.wait_for(worker.run(once=True), timeout_s)


class Harness:
    """In-test access to the same database the subprocesses use."""

    def __init__(self, pool: Any, inbox: TestInbox) -> None:
        self.pool = pool
        self.inbox = inbox
        self.routes = PostgresRoutes(pool, clock=SystemClock())
        self.outbox = PostgresOutbox(pool)
        self.wake = PostgresWake(pool)
        self.room = pg_room(
            pool,
            HttpTransport(self.routes, clock=SystemClock()),
            outbox=self.outbox,
            wake=self.wake,
        )

    async def add_agent(self, agent: str) -> None:
        """Route ``agent`` to the test inbox with a fresh secret."""
        route = await self.routes.add(agent, self.inbox.url_for(agent))
        assert route.secret is not None, "an HTTP route has a secret"
        self.inbox.secrets[agent] = Inbox(route.secret)

    async def receipts(self) -> int:
        """How many receipts exist."""
        count: int = await self.pool.fetchval("SELECT count(*) FROM birddog.receipts")
        return count

    async def drain_daemons(self) -> int:
        """How many drain daemons have recorded themselves as running (and not stopped)."""
        count: int = await self.pool.fetchval(
            "SELECT count(*) FROM birddog.daemons WHERE kind = 'drain' AND stopped_at IS NULL"
        )
        return count

    async def states(self) -> dict[str, str]:
        """Every key's state: receipt, pending or dead."""
        rows = await self.pool.fetch(
            "SELECT key, state FROM birddog.outbox UNION ALL SELECT key, 'receipt' FROM birddog.receipts"
        )
        return {row["key"]: row["state"] for row in rows}


async def fan_out(harness: Harness, count: int, agents: list[str], prefix: str = "m") -> list[str]:
    """Fan out ``count`` settled jobs whose replies go to ``agents``; return the reply keys."""
    keys: list[str] = []
    for i in range(count):
        reply_to = [AgentAddress(agent_id=a, session_id=f"s-{a}") for a in agents]
        job = settled_job(key=f"{prefix}{i:04d}", reply_to=reply_to)
        keys += await harness.room.fan_out(job=job, content=f"reply {i}")
    return keys
