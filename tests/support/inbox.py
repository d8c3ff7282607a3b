"""Test inboxes on 127.0.0.1: one server for many agents at ``/inbox/<agent>``."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from birddog import Reply
from birddog.http.inbox import Inbox
from birddog.http.server import serve

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def posts_to(handler: Handler, path: str = "/inbox", **options: Any) -> AsyncIterator[str]:
    """Serve ``handler`` for POSTs to ``path`` on 127.0.0.1 until the block ends.

    Args:
        handler: answers each POST.
        path: the one path served.
        **options: for :func:`birddog.http.server.serve` (``shutdown_timeout``...).

    Yields:
        The URL to post to, ``http://127.0.0.1:<port><path>``.
    """
    app = web.Application()
    app.router.add_post(path, handler)
    runner, url = await serve(app, **options)
    try:
        yield f"{url}{path}"
    finally:
        await runner.cleanup()


class InboxServer:
    """Serves ``/inbox/<agent>`` on an ephemeral port of 127.0.0.1; subclasses answer posts.

    Attributes:
        url: the server's base URL once started.
    """

    url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen on an ephemeral port of 127.0.0.1."""
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
        raise NotImplementedError


Behaviour = Callable[[Reply, int], Awaitable[web.StreamResponse | None]]


class TestInbox(InboxServer):
    """Inboxes for many agents, verifying signatures and accepting every verified reply.

    Attributes:
        posts: posts received per webhook-id (duplicates show as counts above 1).
        replies: the verified replies, in arrival order.
        secrets: the verifying inbox of each routed agent.
        behaviour: optional per-post override; return a response to answer it.
    """

    __test__ = False

    def __init__(self) -> None:
        self.posts: Counter[str] = Counter()
        self.replies: list[Reply] = []
        self.secrets: dict[str, Inbox] = {}
        self.behaviour: Behaviour | None = None

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


@contextlib.asynccontextmanager
async def serving(box: TestInbox) -> AsyncIterator[TestInbox]:
    """``box`` started on 127.0.0.1 for the block, stopped after it."""
    await box.start()
    try:
        yield box
    finally:
        await box.stop()
