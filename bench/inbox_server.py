"""The benchmarks' recipients: one aiohttp server, in its own process, on 127.0.0.1.

Every agent's inbox is ``POST /inbox/<agent>``; each answers ``{"accepted": true}``
(after ``delay_s`` for the agents named slow). The server counts posts per agent, keeps
the first and last arrival time, and, when asked, the arrival time of each post by its
``webhook-id`` (the reply key), so the parent can compute latencies.

Times are ``CLOCK_MONOTONIC`` nanoseconds, one clock for every process on the machine
(Linux), so the parent can subtract its own readings from them.

Control (from the parent only):

- ``GET /stats`` counts (posts, distinct client connections), first/last arrival;
  ``?events=1`` adds ``[[key, t_ns], ...]``.
- ``POST /reset`` forgets everything counted.
- ``POST /config`` with ``{"slow": [agent, ...], "delay_s": 5.0, "events": true}``.

Run::

    .venv/bin/python -m bench.inbox_server      # prints the port, serves until SIGTERM
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter

from aiohttp import web

ACCEPTED = b'{"accepted": true}'


def now_ns() -> int:
    """``CLOCK_MONOTONIC`` in nanoseconds: comparable across processes on Linux."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Inbox:
    """The state of the recipients: counts, arrival times, slow agents."""

    def __init__(self) -> None:
        self.slow: frozenset[str] = frozenset()
        self.delay_s = 0.0
        self.keep_events = False
        self.reset()

    def reset(self) -> None:
        self.posts = 0
        self.by_agent: Counter[str] = Counter()
        self.last_by_agent: dict[str, int] = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.events: list[tuple[str, int]] = []
        self.peers: set[object] = set()

    async def post(self, request: web.Request) -> web.Response:
        arrived = now_ns()
        agent = request.match_info["agent"]
        await request.read()
        self.posts += 1
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        self.by_agent[agent] += 1
        if self.first_ns is None:
            self.first_ns = arrived
        self.last_ns = arrived
        self.last_by_agent[agent] = arrived
        if self.keep_events:
            self.events.append((request.headers.get("webhook-id", ""), arrived))
        if agent in self.slow:
            await asyncio.sleep(self.delay_s)
        return web.Response(body=ACCEPTED, content_type="application/json")

    async def stats(self, request: web.Request) -> web.Response:
        body: dict[str, object] = {
            "posts": self.posts,
            "connections": len(self.peers),
            "by_agent": dict(self.by_agent),
            "last_by_agent": self.last_by_agent,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
        }
        if request.query.get("events"):
            body["events"] = self.events
        return web.json_response(body)

    async def reset_view(self, _request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def config(self, request: web.Request) -> web.Response:
        wanted = json.loads(await request.read() or b"{}")
        self.slow = frozenset(wanted.get("slow", []))
        self.delay_s = float(wanted.get("delay_s", 0.0))
        self.keep_events = bool(wanted.get("events", False))
        return web.json_response({"ok": True})


async def serve(port: int = 0) -> None:
    """Serve until SIGTERM/SIGINT; print the bound port on stdout first."""
    inbox = Inbox()
    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/inbox/{agent}", inbox.post)
    app.router.add_get("/stats", inbox.stats)
    app.router.add_post("/reset", inbox.reset_view)
    app.router.add_post("/config", inbox.config)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(runner.addresses[0][1], flush=True)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
