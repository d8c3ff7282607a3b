"""The second peer: the same signed deliveries done with PgQueuer, one job per reply.

PgQueuer (the ``pgqueuer`` package) dequeues a batch of jobs in one statement, buffers
their completions and writes them in one statement per batch, and wakes its workers
with a trigger's NOTIFY. Here it does what ``birddog run`` does for one reply:

- each job carries one reply's URL, key, JSON body and the recipient's signing secret
  (BirdDog reads the route; the peer is spared that lookup);
- the entrypoint signs the body (Standard Webhooks headers, BirdDog's own
  :class:`~birddog.http.signing.Signer`, one per secret), POSTs it through one shared
  aiohttp session with a 30 s timeout, and raises unless the inbox answered 200 with
  ``{"accepted": true}``;
- a raise is retried by PgQueuer's :class:`DatabaseRetryEntrypointExecutor` (the job
  re-queued with exponential backoff, 5 attempts), as BirdDog retries a delivery.

Its documented throughput settings, as in its own ``tools/benchmark.py``: the asyncpg
driver, uvloop, ``batch_size`` 10 (lower only where ``max_concurrent_tasks`` must be at
least twice it). Durability is its default (logged tables), as BirdDog's. The worker
runs in PgQueuer's continuous mode (as a deployed worker does) until SIGTERM, which sets
its shutdown event: it finishes what it holds and exits.

The loader commits a few warm-up jobs first, then writes the measured jobs in one
transaction and commits it only when the bench says so (``bench/child.py``): the clock
starts at that commit, whose trigger NOTIFY wakes the idle worker, as BirdDog's wake
does its idle daemon.

Run (``bench/peer.py`` does this, after :func:`install` on a fresh database)::

    export BENCH_PEER_DSN=...
    .venv/bin/python -m bench.peer_pgqueuer load <inbox URL> <count> <agents> <warm>
    .venv/bin/python -m bench.peer_pgqueuer worker <concurrency>   # until SIGTERM
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import signal
import sys
import time
from typing import Any

import aiohttp
import asyncpg
import uvloop
from pgqueuer import AsyncpgDriver, DatabaseRetryEntrypointExecutor, Job, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

from bench.child import heard, say
from bench.harness import agent_names, dispatch, now_ns, process_cpu_s, reply_body
from birddog.http.signing import Signer, generate_secret

ENTRYPOINT = "deliver"
BATCH_SIZE = 10
"""PgQueuer's default dequeue batch (its own benchmark's too)."""
ENQUEUE_CHUNK = 1000
POST_TIMEOUT_S = 30.0
PENDING_SQL = "SELECT count(*) FROM pgqueuer"
"""Jobs not finished yet (queued or picked): PgQueuer deletes a job when it logs its end."""


def batch_size(concurrency: int) -> int:
    """The dequeue batch for a cap of ``concurrency`` tasks (PgQueuer wants cap >= 2 x batch)."""
    return max(1, min(BATCH_SIZE, concurrency // 2))


def version() -> str:
    """The installed ``pgqueuer`` package's version."""
    return importlib.metadata.version("pgqueuer")


async def _connect() -> asyncpg.Connection:
    return await asyncpg.connect(os.environ["BENCH_PEER_DSN"])


async def install(conn: asyncpg.Connection) -> None:
    """Install PgQueuer's tables, trigger and functions (the bench calls this itself)."""
    await Queries(AsyncpgDriver(conn)).install()


async def _enqueue(queries: Queries, base_url: str, indexes: range, agents: int) -> None:
    """Enqueue the deliveries ``indexes`` round-robin over ``agents``, a chunk per statement."""
    names = agent_names(agents)
    secrets = {agent: generate_secret() for agent in names}
    for first in range(indexes.start, indexes.stop, ENQUEUE_CHUNK):
        payloads: list[bytes | None] = []
        for index in range(first, min(indexes.stop, first + ENQUEUE_CHUNK)):
            agent = names[index % agents]
            key, body = reply_body(index, agent)
            job = {"url": f"{base_url}/inbox/{agent}", "key": key, "body": body}
            payloads.append(json.dumps({**job, "secret": secrets[agent]}).encode())
        await queries.enqueue([ENTRYPOINT] * len(payloads), payloads, [0] * len(payloads))


async def load(base_url: str, count: int, agents: int, warm: int) -> dict[str, Any]:
    """Commit ``warm`` jobs; write ``count`` more in one transaction, committed when told."""
    conn = await _connect()
    try:
        queries = Queries(AsyncpgDriver(conn))
        await _enqueue(queries, base_url, range(count, count + warm), agents)
        say(warm=warm)
        began = time.monotonic()
        async with conn.transaction():
            await _enqueue(queries, base_url, range(count), agents)
            # Statistics as autovacuum would leave them (the bench analyzes BirdDog's too).
            await conn.execute("ANALYZE pgqueuer")
            say(inserted=count, insert_s=round(time.monotonic() - began, 3))
            await heard()
        committed_ns = now_ns()
    finally:
        await conn.close()
    return {"committed_ns": committed_ns}


async def work(concurrency: int) -> dict[str, Any]:
    """One QueueManager capped at ``concurrency`` jobs in flight, until SIGTERM."""
    conn = await _connect()
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_S))
    signers: dict[str, Signer] = {}
    manager = QueueManager(Queries(AsyncpgDriver(conn)))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, manager.shutdown.set)

    @manager.entrypoint(ENTRYPOINT, executor_factory=DatabaseRetryEntrypointExecutor)
    async def deliver(job: Job) -> None:
        assert job.payload is not None
        item = json.loads(job.payload)
        signer = signers.get(item["secret"])
        if signer is None:
            signer = signers[item["secret"]] = Signer([item["secret"]])
        body = item["body"].encode()
        headers = signer.headers(msg_id=item["key"], timestamp=int(time.time()), body=body)
        headers["content-type"] = "application/json"
        async with session.post(item["url"], data=body, headers=headers) as resp:
            accepted = resp.status == 200 and (await resp.json()).get("accepted") is True
        if not accepted:
            raise RuntimeError("the inbox did not accept the reply")

    try:
        await manager.run(
            batch_size=batch_size(concurrency),
            mode=QueueExecutionMode.continuous,
            max_concurrent_tasks=concurrency,
        )
        left = await conn.fetchval(PENDING_SQL)
    finally:
        await session.close()
        await conn.close()
    return {
        "cpu_s": process_cpu_s(),
        "left_in_queue": left,
        "batch_size": batch_size(concurrency),
        "version": version(),
    }


def main(argv: list[str]) -> None:
    """Dispatch ``load`` / ``worker``; the result as one JSON line."""
    dispatch(
        argv,
        {
            "load": lambda url, count, agents, warm: load(url, int(count), int(agents), int(warm)),
            "worker": lambda concurrency: work(int(concurrency)),
        },
        run=uvloop.run,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
