"""An inbox in a process of its own, for hosts in network namespaces (the partition test).

``python -m tests.support.netns_inbox HOST PORT LOG DELAY_S`` accepts every POST to
``/inbox/<agent>`` after ``DELAY_S`` (a slow recipient, so a drain takes a while) and appends
each post's ``webhook-id`` (the reply key) to ``LOG``, one line per post, so duplicates
show as repeated lines. It runs inside the namespace whose address ``HOST`` is; the test
starts it with ``ip netns exec`` and stops it by its pid.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aiohttp import web


def make_app(log: Path, delay_s: float) -> web.Application:
    """The inbox application: slow, accepting, recording every post's webhook-id."""

    async def receive(request: web.Request) -> web.StreamResponse:
        await request.read()
        await asyncio.sleep(delay_s)  # a slow recipient, not synchronisation
        with log.open("a", encoding="utf-8") as out:
            out.write(request.headers.get("webhook-id", "?") + "\n")
        return web.json_response({"accepted": True})

    app = web.Application()
    app.router.add_post("/inbox/{agent}", receive)
    return app


def main() -> None:
    """Serve until killed."""
    host, port, log, delay_s = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
    web.run_app(make_app(log, delay_s), host=host, port=port, print=None)


if __name__ == "__main__":
    main()
