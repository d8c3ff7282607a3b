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
least twice it), ``mode=drain`` (exit once the queue is empty). Durability is its
default (logged tables), as BirdDog's.

Run (``bench/peer.py`` does this)::

    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer_pgqueuer schema
    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer_pgqueuer enqueue <inbox URL> <count> <agents>
    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer_pgqueuer worker <concurrency>
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import time
from typing import Any

import aiohttp
import asyncpg
import uvloop
from pgqueuer import AsyncpgDriver, DatabaseRetryEntrypointExecutor, Job, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

from bench.harness import agent_names, dispatch, process_cpu_s, reply_body
from birddog.http.signing import Signer, generate_secret

ENTRYPOINT = "deliver"
BATCH_SIZE = 10
"""PgQueuer's default dequeue batch (its own benchmark's too)."""
ENQUEUE_CHUNK = 1000
POST_TIMEOUT_S = 30.0


def batch_size(concurrency: int) -> int:
    """The dequeue batch for a cap of ``concurrency`` tasks (PgQueuer wants cap >= 2 x batch)."""
    return max(1, min(BATCH_SIZE, concurrency // 2))


def version() -> str:
    """The installed ``pgqueuer`` package's version."""
    return importlib.metadata.version("pgqueuer")


async def _connect() -> asyncpg.Connection:
    return await asyncpg.connect(os.environ["BENCH_PEER_DSN"])


async def schema() -> dict[str, Any]:
    """Install PgQueuer's tables, trigger and functions."""
    conn = await _connect()
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()
    return {"version": version()}


async def enqueue(base_url: str, count: int, agents: int) -> dict[str, Any]:
    """Enqueue ``count`` deliveries round-robin over ``agents``, ``ENQUEUE_CHUNK`` per statement."""
    names = agent_names(agents)
    secrets = {agent: generate_secret() for agent in names}
    started = time.time()
    conn = await _connect()
    try:
        queries = Queries(AsyncpgDriver(conn))
        for first in range(0, count, ENQUEUE_CHUNK):
            payloads: list[bytes | None] = []
            for index in range(first, min(count, first + ENQUEUE_CHUNK)):
                agent = names[index % agents]
                key, body = reply_body(index, agent)
                job = {
                    "url": f"{base_url}/inbox/{agent}",
                    "key": key,
                    "body": body,
                    "secret": secrets[agent],
                }
                payloads.append(json.dumps(job).encode())
            await queries.enqueue([ENTRYPOINT] * len(payloads), payloads, [0] * len(payloads))
    finally:
        await conn.close()
    return {"enqueued": count, "elapsed_s": time.time() - started}


async def work(concurrency: int) -> dict[str, Any]:
    """Drain the queue with one QueueManager capped at ``concurrency`` jobs in flight."""
    started = time.time()
    conn = await _connect()
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_S))
    signers: dict[str, Signer] = {}
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

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
            mode=QueueExecutionMode.drain,
            max_concurrent_tasks=concurrency,
        )
        left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await session.close()
        await conn.close()
    return {
        "elapsed_s": time.time() - started,
        "cpu_s": process_cpu_s(),
        "left_in_queue": left,
        "batch_size": batch_size(concurrency),
        "version": version(),
    }


def main(argv: list[str]) -> None:
    """Dispatch ``schema`` / ``enqueue`` / ``worker``; the result as one JSON line."""
    dispatch(
        argv,
        {
            "schema": schema,
            "enqueue": lambda url, count, agents: enqueue(url, int(count), int(agents)),
            "worker": lambda concurrency: work(int(concurrency)),
        },
        run=uvloop.run,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
