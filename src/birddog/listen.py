"""``birddog listen``: a local inbox for one agent that prints each reply as it arrives.

The quickest recipient there is: it verifies every post with the route's signing secret
(:class:`birddog.http.inbox.Inbox`), acknowledges it with ``{"accepted": true}`` so it
becomes a receipt, and prints one line per new reply. A retry of a reply already taken
is acknowledged again without a second line. It serves every path, so the route's URL
may end in ``/inbox`` or anything else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from birddog.core.ask import address_text
from birddog.core.mail import Reply
from birddog.core.text import printable
from birddog.http.inbox import Inbox, aiohttp_handler
from birddog.http.server import serve

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Listening:
    """Where the inbox listens and for whom.

    Attributes:
        agent_id: the agent whose replies it takes.
        url: the base URL it serves (every path under it).
    """

    agent_id: str
    url: str


def reply_line(reply: Reply) -> str:
    """One line for a received reply: key, outcome, sender, then the content, all printable.

    Args:
        reply: the verified reply.

    Returns:
        E.g. ``outbox:mail-1:reply:0 completed from bob:s-bob: Done.``
    """
    sender = address_text(reply.from_)
    diagnostic = f" ({reply.reply.diagnostic})" if reply.reply.diagnostic else ""
    return printable(
        f"{reply.key} {reply.reply.outcome.value}{diagnostic} from {sender}: {reply.content}"
    )


async def listen(
    agent_id: str,
    secrets: list[str],
    *,
    host: str,
    port: int,
    stop: asyncio.Event,
    echo: Echo,
    on_listening: Callable[[Listening], None] | None = None,
    count: int | None = None,
) -> int:
    """Serve ``agent_id``'s inbox until ``stop`` is set or ``count`` replies arrived.

    Args:
        agent_id: whose replies these are (for the messages).
        secrets: the route's signing secrets (two during a rotation's overlap).
        host: the address to bind (127.0.0.1 unless told otherwise).
        port: the port to bind.
        stop: set to stop listening.
        echo: prints each reply's line.
        on_listening: told where the inbox listens, once it does.
        count: stop after this many new replies (None: until stopped).

    Returns:
        How many new replies arrived.

    Raises:
        OSError: the address could not be bound.
    """
    inbox = Inbox(secrets)
    received = 0

    async def on_reply(reply: Reply) -> None:
        nonlocal received
        echo(reply_line(reply))
        received += 1
        if count is not None and received >= count:
            # Answer this post first: the reply is acknowledged before the inbox closes.
            asyncio.get_running_loop().call_later(0.1, stop.set)

    app = web.Application()
    app.router.add_post("/{tail:.*}", aiohttp_handler(inbox, on_reply))
    runner, url = await serve(app, host=host, port=port, shutdown_timeout=1.0)
    try:
        if on_listening is not None:
            on_listening(Listening(agent_id=agent_id, url=url))
        await stop.wait()
    finally:
        await runner.cleanup()
    return received


__all__ = ["Listening", "listen", "reply_line"]
