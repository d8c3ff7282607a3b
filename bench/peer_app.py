"""The peer: the same delivery job done with Procrastinate, one task per reply.

The task POSTs one reply body to the recipient's inbox with aiohttp (one pooled session
per worker process) and fails unless the inbox answers ``{"accepted": true}``, which is
what BirdDog's transport requires too. It neither signs nor looks up routes: the job
carries the URL. The app lives in its own database (``BENCH_PEER_DSN``).

The worker runs as a deployed one does (``wait=True``: it waits for notifications once
the queue is empty) until SIGTERM, Procrastinate's own graceful stop. Its connection
pool holds one connection per job in flight, up to ``POOL_MAX`` (the server allows 100
connections), so that its concurrency is not capped by the pool.

The loader defers a few warm-up jobs first, then defers the measured jobs on one
connection of its own inside one transaction (Procrastinate's ``connection=`` option)
and commits it only when the bench says so (``bench/child.py``): the clock starts at
that commit, whose trigger NOTIFYs wake the idle worker.

Run (the peer benchmark does this, after :func:`install` on a fresh database; the
process starts through ``bench.peer_procrastinate``, so the app is not defined in
``__main__``)::

    export BENCH_PEER_DSN=...
    .venv/bin/python -m bench.peer_procrastinate load <inbox URL> <count> <agents> <warm>
    .venv/bin/python -m bench.peer_procrastinate worker <concurrency>   # until SIGTERM
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from typing import Any

import aiohttp
import asyncpg
import procrastinate
import psycopg
from procrastinate.schema import SchemaManager

from bench.child import heard, say
from bench.harness import agent_names, dispatch, now_ns, process_cpu_s, reply_body

POOL_MAX = 64
"""The worker's pool: one connection per job in flight, at most this many."""
DEFER_CHUNK = 1000
DEFER_POOL = 4
PENDING_SQL = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
"""Jobs not finished yet."""


def _connector(pool_size: int) -> procrastinate.PsycopgConnector:
    return procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_PEER_DSN", ""), min_size=1, max_size=pool_size
    )


app = procrastinate.App(connector=_connector(DEFER_POOL))
_session: aiohttp.ClientSession | None = None


def _client() -> aiohttp.ClientSession:
    global _session  # noqa: PLW0603 - one pooled session per worker process
    if _session is None:
        _session = aiohttp.ClientSession()
    return _session


@app.task(name="deliver")
async def deliver(url: str, key: str, body: str) -> None:
    """POST one reply; raise unless the inbox accepted it."""
    headers = {"content-type": "application/json", "webhook-id": key}
    async with _client().post(url, data=body.encode(), headers=headers) as resp:
        accepted = resp.status == 200 and (await resp.json()).get("accepted") is True
    if not accepted:
        raise RuntimeError("the inbox did not accept the reply")


def pool_size(concurrency: int) -> int:
    """The worker's pool for ``concurrency`` jobs in flight (its fetch and events need one)."""
    return min(POOL_MAX, concurrency + 1)


async def _defer(
    base_url: str, indexes: range, agents: int, connection: psycopg.AsyncConnection | None
) -> None:
    """Defer the deliveries ``indexes`` round-robin over ``agents``, a chunk per statement."""
    names = agent_names(agents)
    deferrer = deliver.configure(connection=connection)
    for first in range(indexes.start, indexes.stop, DEFER_CHUNK):
        batch = []
        for index in range(first, min(indexes.stop, first + DEFER_CHUNK)):
            agent = names[index % agents]
            key, body = reply_body(index, agent)
            batch.append({"url": f"{base_url}/inbox/{agent}", "key": key, "body": body})
        await deferrer.batch_defer_async(*batch)


async def load(base_url: str, count: int, agents: int, warm: int) -> dict[str, Any]:
    """Defer ``warm`` jobs; defer ``count`` more in one transaction, committed when told."""
    async with app.open_async():
        await _defer(base_url, range(count, count + warm), agents, None)
        say(warm=warm)
        began = time.monotonic()
        conn = await psycopg.AsyncConnection.connect(os.environ["BENCH_PEER_DSN"])
        try:
            await _defer(base_url, range(count), agents, conn)
            # Statistics as autovacuum would leave them (the bench analyzes BirdDog's too).
            await conn.execute("ANALYZE procrastinate_jobs")
            say(inserted=count, insert_s=round(time.monotonic() - began, 3))
            await heard()
            await conn.commit()
            committed_ns = now_ns()
        finally:
            await conn.close()
    return {"committed_ns": committed_ns}


async def work(concurrency: int) -> dict[str, Any]:
    """Run a worker of ``concurrency`` jobs in flight until SIGTERM."""
    with app.replace_connector(_connector(pool_size(concurrency))) as worker_app:
        async with worker_app.open_async():
            await worker_app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)
    if _session is not None:
        await _session.close()
    return {
        "cpu_s": process_cpu_s(),
        "pool_size": pool_size(concurrency),
        "version": importlib.metadata.version("procrastinate"),
    }


async def install(conn: asyncpg.Connection) -> None:
    """Create Procrastinate's schema, its own SQL (the bench calls this itself)."""
    await conn.execute(SchemaManager.get_schema())


def main(argv: list[str]) -> None:
    """Dispatch ``load`` / ``worker``; the result as one JSON line."""
    dispatch(
        argv,
        {
            "load": lambda url, count, agents, warm: load(url, int(count), int(agents), int(warm)),
            "worker": lambda concurrency: work(int(concurrency)),
        },
    )
