"""``birddog a2a`` bounds every caller, on fakes: the URL form, the body cap, the rate, parts.

The gate is driven over httpx's ASGI transport (a real HTTP exchange, in memory), in front
of an application that records what reached it; the request handler is called directly,
with the caller and agent the gate leaves, over the command line's mail service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from starlette.responses import JSONResponse

from birddog import AgentAddress
from birddog.a2a.gate import Gate, TokenRate
from birddog.a2a.push import check_push_host
from birddog.a2a.server import MAX_PARTS, A2AServices, MailRoomRequestHandler
from birddog.core.egress import EgressPolicy
from birddog.core.errors import InvalidInput
from birddog.testing import FrozenClock, InMemoryRoutes, InMemorySentJobs, InMemoryTokenBook
from tests.support import T0
from tests.support.world import World

CALLER = AgentAddress(agent_id="asker", session_id="s-ask")
LIMIT = 1000


class Recorder:
    """The app behind the gate: records each body it read, answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Read the whole body, as the SDK does, and answer."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await JSONResponse({"ok": True})(scope, receive, send)


class Ticks:
    """A monotonic clock a test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        """The current time."""
        return self.now


@pytest.fixture
async def gated() -> AsyncIterator[tuple[httpx.AsyncClient, Recorder, str, Ticks]]:
    """A client of the gate over a recorder; one valid token; a rate of 2 at once, 1 a second."""
    tokens = InMemoryTokenBook()
    token = tokens.issue(CALLER)
    app = Recorder()
    ticks = Ticks()
    gate = Gate(app, tokens, max_body_bytes=LIMIT, rate=TokenRate(1.0, 2, clock=ticks))
    transport = httpx.ASGITransport(app=gate)
    async with httpx.AsyncClient(transport=transport, base_url="http://a2a.test") as http:
        yield http, app, token, ticks


async def test_a_base_url_without_its_slash_is_told_the_form(
    gated: tuple[httpx.AsyncClient, Recorder, str, Ticks],
) -> None:
    """/a2a/AGENT and the card resolved beside it are 404 naming /a2a/AGENT/, not 401."""
    http, app, _, _ = gated
    for path in ("/a2a/helper", "/a2a/.well-known/agent-card.json", "/elsewhere"):
        answer = await http.post(path, json={})
        assert answer.status_code == 404, (path, answer.text)
        assert "/a2a/AGENT/ (with the trailing /)" in answer.json()["error"]
    assert app.bodies == []


async def test_a_declared_body_over_the_cap_is_413_before_it_is_read(
    gated: tuple[httpx.AsyncClient, Recorder, str, Ticks],
) -> None:
    """Content-Length 60 MB: 413 at once, with or without a token; nothing reaches the SDK."""
    http, app, token, _ = gated

    async def never_sent() -> AsyncIterator[bytes]:
        raise AssertionError("the body must not be read")
        yield b""

    for headers in ({}, {"Authorization": f"Bearer {token}"}):
        answer = await http.post(
            "/a2a/helper/",
            content=never_sent(),
            headers={**headers, "Content-Length": str(60 * 1024 * 1024)},
        )
        assert answer.status_code == 413, answer.text
        assert f"larger than {LIMIT} bytes" in answer.json()["error"]
    assert app.bodies == []


async def test_a_chunked_body_over_the_cap_is_413_and_one_within_passes_whole(
    gated: tuple[httpx.AsyncClient, Recorder, str, Ticks],
) -> None:
    """Without Content-Length the gate reads up to the cap: past it 413, within it the body."""
    http, app, token, _ = gated
    auth = {"Authorization": f"Bearer {token}"}

    async def chunks(count: int) -> AsyncIterator[bytes]:
        for _ in range(count):
            yield b"x" * 300

    refused = await http.post("/a2a/helper/", content=chunks(4), headers=auth)
    taken = await http.post("/a2a/helper/", content=chunks(3), headers=auth)
    assert (refused.status_code, taken.status_code) == (413, 200)
    assert app.bodies == [b"x" * 900]


async def test_each_token_is_rate_limited_before_any_work(
    gated: tuple[httpx.AsyncClient, Recorder, str, Ticks],
) -> None:
    """Two at once, then 429 with Retry-After; a second later one more; guesses count too."""
    http, app, token, ticks = gated
    auth = {"Authorization": f"Bearer {token}"}
    statuses = [(await http.post("/a2a/helper/", json={}, headers=auth)).status_code]
    statuses.append((await http.post("/a2a/helper/", json={}, headers=auth)).status_code)
    limited = await http.post("/a2a/helper/", json={}, headers=auth)
    assert statuses == [200, 200]
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "1"
    ticks.now += 1.0
    assert (await http.post("/a2a/helper/", json={}, headers=auth)).status_code == 200
    guess = {"Authorization": "Bearer bd_guess"}
    guessed = [(await http.post("/a2a/helper/", headers=guess)).status_code for _ in range(3)]
    assert guessed == [401, 401, 429]
    assert len(app.bodies) == 3


async def test_the_card_is_public_and_everything_else_needs_a_token(
    gated: tuple[httpx.AsyncClient, Recorder, str, Ticks],
) -> None:
    """The card path passes without a token; any other path is 401 with a Bearer challenge."""
    http, _, _, _ = gated
    card = await http.get("/a2a/helper/.well-known/agent-card.json")
    refused = await http.post("/a2a/helper/", json={})
    assert card.status_code == 200
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")


# ---- the request handler ---------------------------------------------------------------


@pytest.fixture
async def handler() -> MailRoomRequestHandler:
    """A handler over the fakes: ``helper`` has a route, nobody serves it, no wait."""
    world = World(clock=FrozenClock(T0), spooling=False)
    await world.routes.add("helper", kind="mailbox")
    services = A2AServices(
        sender=world.mail,
        sent=InMemorySentJobs(world.jobs),
        routes=world.routes,
        tokens=InMemoryTokenBook(),
        wait_s=0.05,
        max_content_bytes=LIMIT,
    )
    return MailRoomRequestHandler(services)


def context() -> ServerCallContext:
    """The call context the gate leaves: the caller and the agent addressed."""
    return ServerCallContext(state={"birddog_caller": CALLER, "birddog_agent": "helper"})


def send_request(*texts: str, message_id: str = "m-1") -> pb.SendMessageRequest:
    """A blocking SendMessage of these text parts."""
    parts = [pb.Part(text=text) for text in texts]
    message = pb.Message(message_id=message_id, context_id="c-1", role=pb.ROLE_USER, parts=parts)
    return pb.SendMessageRequest(message=message)


async def test_a_message_of_too_many_parts_or_bytes_is_refused(
    handler: MailRoomRequestHandler,
) -> None:
    """Past MAX_PARTS parts, or past the content limit, InvalidParams naming the bound."""
    with pytest.raises(InvalidParamsError, match=f"at most {MAX_PARTS} parts"):
        await handler.on_message_send(send_request(*["a"] * (MAX_PARTS + 1)), context())
    with pytest.raises(InvalidParamsError, match=f"1002 bytes; at most {LIMIT}"):
        await handler.on_message_send(send_request("é" * 500, "x"), context())


async def test_a_blocking_send_that_returns_early_says_why(
    handler: MailRoomRequestHandler,
) -> None:
    """Nobody serves the agent: SUBMITTED after the wait, its status message saying why."""
    task = await handler.on_message_send(send_request("hello"), context())
    assert isinstance(task, pb.Task)
    assert task.status.state == pb.TASK_STATE_SUBMITTED
    said = "".join(part.text for part in task.status.message.parts)
    assert "No worker of helper took the task within 0.05 s" in said
    assert "GetTask" in said
    assert task.status.message.role == pb.ROLE_AGENT


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/hook",
        "http://127.0.0.1/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/hook",
    ],
)
async def test_push_urls_to_private_or_loopback_addresses_are_refused_by_default(
    url: str,
) -> None:
    """The push egress policy is public only by default: each such URL is refused when set."""
    routes = InMemoryRoutes(clock=FrozenClock(T0))
    with pytest.raises(InvalidInput, match="egress policy"):
        await routes.add("a2a-push:x", url, "{}", kind="a2a")


async def test_a_push_host_that_resolves_to_loopback_is_refused_when_set() -> None:
    """A name from /etc/hosts (this machine's own) that means 127.0.0.1: refused by lookup."""
    import socket  # noqa: PLC0415 - only this test looks a name up

    name = socket.gethostname()
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(name, 80)}
    except OSError:
        pytest.skip(f"this machine's name {name!r} does not resolve")
    if not any(address.startswith(("127.", "10.", "192.168.")) for address in addresses):
        pytest.skip(f"{name!r} resolves to {addresses}, no private or loopback address")
    with pytest.raises(InvalidInput, match="push egress policy"):
        await check_push_host(f"http://{name}:8080/hook", EgressPolicy(mode="public"))
    await check_push_host(f"http://{name}:8080/hook", EgressPolicy(mode="internal"))
