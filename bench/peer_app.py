"""The peer: the same delivery job done with Procrastinate, one task per reply.

The task POSTs one reply body to the recipient's inbox with aiohttp (one pooled session
per worker process) and fails unless the inbox answers ``{"accepted": true}``, which is
what BirdDog's transport requires too. It neither signs nor looks up routes: the job
carries the URL. The app lives in its own database (``BENCH_PEER_DSN``).

Run (the peer benchmark does this; ``bench.peer`` imports this module, so the app is not
defined in ``__main__``)::

    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer schema
    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer defer <inbox base URL> <count> <agents>
    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer worker <concurrency>
"""

from __future__ import annotations

import os
import time

import aiohttp
import procrastinate

from bench.harness import agent_names, dispatch, process_cpu_s, reply_body

POOL_SIZE = 16
DEFER_CHUNK = 1000

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_PEER_DSN", ""), min_size=1, max_size=POOL_SIZE
    )
)
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


async def defer(base_url: str, count: int, agents: int) -> dict[str, float]:
    """Defer ``count`` deliveries, ``DEFER_CHUNK`` per statement."""
    names = agent_names(agents)
    started = time.time()
    async with app.open_async():
        for first in range(0, count, DEFER_CHUNK):
            batch = []
            for index in range(first, min(count, first + DEFER_CHUNK)):
                agent = names[index % agents]
                key, body = reply_body(index, agent)
                batch.append({"url": f"{base_url}/inbox/{agent}", "key": key, "body": body})
            await deliver.batch_defer_async(*batch)
    return {"deferred": count, "elapsed_s": time.time() - started}


async def work(concurrency: int) -> dict[str, float]:
    """Run a worker until the queue is empty."""
    cpu_before = process_cpu_s()
    started = time.time()
    async with app.open_async():
        await app.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=True
        )
    if _session is not None:
        await _session.close()
    return {"elapsed_s": time.time() - started, "cpu_s": process_cpu_s() - cpu_before}


async def schema() -> dict[str, float]:
    """Create Procrastinate's schema."""
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return {"ok": 1.0}


def main(argv: list[str]) -> None:
    """Dispatch ``schema`` / ``defer`` / ``worker``."""
    dispatch(
        argv,
        {
            "schema": schema,
            "defer": lambda url, count, agents: defer(url, int(count), int(agents)),
            "worker": lambda concurrency: work(int(concurrency)),
        },
    )
