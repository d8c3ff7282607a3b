"""The peer of ``ask``: the same exchange between DBOS workflows, with ``send`` and ``recv``.

DBOS (the ``dbos`` package: durable workflows on PostgreSQL) lets one workflow send a
message to another (``DBOS.send``), which takes it with ``DBOS.recv`` (waiting on its
LISTEN/NOTIFY listener, with a timeout). The exchange an ``ask`` makes, in DBOS's terms:

- **responders** (one process, like a worker): one workflow per asker, ``responder-<i>``,
  that ``recv``s a question and ``send``s its content back to the asking workflow, at once;
- **askers** (another process, like the asking process): one workflow per asker, each
  asking once untimed, then (once every asker has) its share of the questions in turn:
  ``send`` to its responder, then ``recv`` with a timeout; the clock runs from before
  the ``send`` to the ``recv``'s return, and the answer is checked.

Both processes run DBOS's defaults (LISTEN/NOTIFY on, its pool) over one system
database (``BENCH_PEER_DSN``), each under its own executor id so that neither recovers
the other's workflows. Workflows are ``async`` (one event loop per process; DBOS runs
its database calls in its thread pool).

Run (``bench/ask.py`` does this)::

    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer_dbos respond <askers>   # until SIGTERM
    BENCH_PEER_DSN=... .venv/bin/python -m bench.peer_dbos ask <askers> <count>
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

from dbos import DBOS, DBOSConfig, SetWorkflowID

from bench.harness import dispatch, process_cpu_s

RECV_TIMEOUT_S = 60.0
"""The longest an asker (or an idle responder) waits in one ``recv``."""


def responder_id(index: int) -> str:
    """The workflow id of asker ``index``'s responder."""
    return f"responder-{index:04d}"


@DBOS.workflow()
async def responder(index: int) -> None:
    """Answer each question at once with its content, for as long as the process runs."""
    while True:
        message = await DBOS.recv_async(timeout_seconds=RECV_TIMEOUT_S)
        if message is not None:
            await DBOS.send_async(message["reply_to"], message["content"])


class _Start:
    """Every asker asks once untimed, then all start timing together (one process)."""

    left = 0
    go: asyncio.Event | None = None


async def _ask_once(index: int, me: str, content: str) -> None:
    await DBOS.send_async(responder_id(index), {"reply_to": me, "content": content})
    answer = await DBOS.recv_async(timeout_seconds=RECV_TIMEOUT_S)
    if answer != content:
        raise RuntimeError(f"asker {index} got {answer!r} for {content!r}")


@DBOS.workflow()
async def asker(index: int, count: int, round_name: str) -> list[list[float]]:
    """Ask once untimed, then ``count`` questions of responder ``index`` in turn, timed.

    Returns:
        ``[wall start, seconds taken]`` of each timed ask.
    """
    me = DBOS.workflow_id
    assert me is not None
    assert _Start.go is not None
    await _ask_once(index, me, f"warm-up {round_name} {index}")
    _Start.left -= 1
    if _Start.left == 0:
        _Start.go.set()
    await _Start.go.wait()
    timings = []
    for number in range(count):
        began_wall = time.time()
        began = time.perf_counter()
        await _ask_once(index, me, f"question {round_name} {index} {number}")
        timings.append([began_wall, time.perf_counter() - began])
    return timings


def version() -> str:
    """The installed ``dbos`` package's version."""
    return importlib.metadata.version("dbos")


def launch(role: str) -> None:
    """Configure and launch DBOS over ``BENCH_PEER_DSN`` under an executor id of ``role``."""
    config: DBOSConfig = {
        "name": "birddog-bench",
        "system_database_url": os.environ["BENCH_PEER_DSN"],
        "executor_id": f"bench-{role}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()


async def respond(askers: int) -> None:
    """Start one responder per asker, say so on stdout, and serve until SIGTERM."""
    launch("respond")
    for index in range(askers):
        with SetWorkflowID(responder_id(index)):
            await DBOS.start_workflow_async(responder, index)
    print(json.dumps({"ready": askers, "version": version()}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def ask(askers: int, count: int, round_name: str) -> dict[str, Any]:
    """Run the askers (``count`` questions between them); every ask's timing."""
    launch("ask")
    shares = [count // askers + (1 if i < count % askers else 0) for i in range(askers)]
    _Start.left, _Start.go = askers, asyncio.Event()
    handles = []
    for index, share in enumerate(shares):
        with SetWorkflowID(f"asker-{round_name}-{index:04d}"):
            handles.append(await DBOS.start_workflow_async(asker, index, share, round_name))
    await _Start.go.wait()
    cpu_before = process_cpu_s()
    results = await asyncio.gather(*(handle.get_result() for handle in handles))
    cpu_s = process_cpu_s() - cpu_before
    timings = [timing for result in results for timing in result]
    return {
        "asks": len(timings),
        "first_wall": min(t[0] for t in timings),
        "last_wall": max(t[0] + t[1] for t in timings),
        "took_s": [t[1] for t in timings],
        "cpu_s": cpu_s,
        "version": version(),
    }


async def _respond(askers: str) -> dict[str, Any]:
    await respond(int(askers))
    return {"stopped": True}


def main(argv: list[str]) -> None:
    """Dispatch ``respond`` / ``ask``; the result as one JSON line."""
    dispatch(
        argv,
        {
            "respond": _respond,
            "ask": lambda askers, count, round_name: ask(int(askers), int(count), round_name),
        },
    )
    sys.stdout.flush()
    # DBOS's background threads (listener, queues) would keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
