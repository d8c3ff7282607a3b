"""HttpTransport against real servers on 127.0.0.1: every answer class of the delivery rules."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from birddog.bootstrap import open_adapters
from birddog.clock import SystemClock
from birddog.core.delivery import Accepted, DeadReason, Deferred, Failed, Rejected
from birddog.core.errors import InvalidInput, InvalidSecret, RouteNotFound
from birddog.core.mail import AgentAddress, Reply, ReplyFacts
from birddog.http import HttpTransport, StaticRoutes
from birddog.ports import Route
from birddog.settings import Settings
from birddog.testing import FrozenClock
from tests.support import free_port
from tests.support.inbox import posts_to

AGENT = "caller"
Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_reply(index: int = 0, *, agent_id: str = AGENT) -> Reply:
    return Reply(
        key=f"outbox:mail-1:reply:{index}",
        in_reply_to="mail-1",
        to=AgentAddress(agent_id=agent_id, session_id="session-a"),
        from_=AgentAddress(agent_id="worker", session_id="session-b"),
        content="the answer is 42",
        created_at=1_767_225_600_000,
        reply=ReplyFacts(command_id="command-1", outcome="completed"),
    )


async def accept(_: web.Request) -> web.StreamResponse:
    return web.json_response({"accepted": True})


@dataclass
class Seen:
    """One request the inbox received."""

    headers: dict[str, str]
    body: bytes


@dataclass
class InboxServer:
    """A real aiohttp inbox on 127.0.0.1 whose answer each test sets."""

    url: str = ""
    answer: Answer = accept
    requests: list[Seen] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Record the request, then answer as the test said."""
        self.requests.append(Seen({k.lower(): v for k, v in request.headers.items()}, b""))
        self.requests[-1].body = await request.read()
        return await self.answer(request)


@pytest.fixture
async def inbox() -> AsyncIterator[InboxServer]:
    server = InboxServer()
    # handler_cancellation: a handler is cancelled when its client goes away, so a test can
    # observe that a timed-out post really closed its connection.
    options = {"handler_cancellation": True, "shutdown_timeout": 1.0}
    async with posts_to(server.handle, "/inbox", **options) as server.url:
        yield server


@pytest.fixture
def routes(inbox: InboxServer) -> StaticRoutes:
    book = StaticRoutes()
    book.add(AGENT, inbox.url)
    return book


@pytest.fixture
async def transport(routes: StaticRoutes) -> AsyncIterator[HttpTransport]:
    async with HttpTransport(routes, timeout_s=5.0, clock=SystemClock()) as http:
        yield http


async def raw_server(
    on_connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/inbox"


# Accepted, signed, stable ids


async def test_explicit_acknowledgement_is_accepted_and_signed(
    transport: HttpTransport, routes: StaticRoutes, inbox: InboxServer
) -> None:
    """A {"accepted": true} answer is Accepted; the POST is camelCase JSON, signed and labelled."""
    reply = make_reply()
    assert await transport.post(reply) == Accepted()
    [seen] = inbox.requests
    secret = (await routes.route(AGENT)).secret  # type: ignore[union-attr]
    payload = Webhook(secret).verify(seen.body, seen.headers)
    assert payload == json.loads(reply.model_dump_json())
    assert payload["inReplyTo"] == "mail-1"
    assert payload["to"]["agentId"] == AGENT
    assert seen.headers["webhook-id"] == reply.key
    assert abs(int(seen.headers["webhook-timestamp"]) - time.time()) < 60
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["user-agent"].startswith("birddog/")


async def test_webhook_id_is_the_reply_key_across_retries(
    transport: HttpTransport, routes: StaticRoutes, inbox: InboxServer
) -> None:
    """Two posts of the same reply carry the same webhook-id, each with a valid signature."""
    inbox.answer = lambda _: _json(500, {"error": "try again"})
    reply = make_reply(3)
    assert isinstance(await transport.post(reply), Failed)
    inbox.answer = accept
    assert await transport.post(reply) == Accepted()
    secret = (await routes.route(AGENT)).secret  # type: ignore[union-attr]
    ids = [seen.headers["webhook-id"] for seen in inbox.requests]
    assert ids == [reply.key, reply.key]
    for seen in inbox.requests:
        Webhook(secret).verify(seen.body, seen.headers)


# 2xx that is not an acknowledgement


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(lambda: web.Response(status=200), "empty body", id="empty"),
        pytest.param(lambda: web.Response(status=204), "empty body", id="204"),
        pytest.param(lambda: web.Response(text="OK"), "non-JSON body", id="non-json"),
        pytest.param(
            lambda: web.json_response({"error": "quota exhausted, resets 17:00"}),
            "error body",
            id="error-shaped",
        ),
        pytest.param(
            lambda: web.json_response({"accepted": False}), '"accepted": true', id="not-accepted"
        ),
    ],
)
async def test_2xx_without_acknowledgement_fails(
    transport: HttpTransport,
    inbox: InboxServer,
    answer: Callable[[], web.Response],
    expected: str,
) -> None:
    """A 2xx that is empty, non-JSON, error-shaped or {"accepted": false} is a failure."""

    async def respond(_: web.Request) -> web.Response:
        return answer()

    inbox.answer = respond
    result = await transport.post(make_reply())
    assert isinstance(result, Failed)
    assert expected in result.reason


# Deferrals


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize(
    ("retry_after", "wait_s"),
    [
        pytest.param(lambda now: "17", 17, id="seconds"),
        pytest.param(
            lambda now: format_datetime(now + timedelta(seconds=120), True), 120, id="date"
        ),
        pytest.param(lambda now: "86400", 600, id="capped-seconds"),
        pytest.param(
            lambda now: format_datetime(now + timedelta(days=3), True), 600, id="capped-date"
        ),
    ],
)
async def test_retry_after_defers_capped(
    routes: StaticRoutes,
    inbox: InboxServer,
    status: int,
    retry_after: Callable[[datetime], str],
    wait_s: int,
) -> None:
    """429/503 with Retry-After (seconds or HTTP date) defer to that time, capped at the max."""
    clock = FrozenClock(datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC))
    inbox.answer = lambda _: _text(status, "busy", {"Retry-After": retry_after(clock.now())})
    async with HttpTransport(routes, max_deferral_s=600, clock=clock) as http:
        result = await http.post(make_reply())
    assert isinstance(result, Deferred)
    assert result.until == clock.now() + timedelta(seconds=wait_s)
    assert result.reason.startswith(f"HTTP {status}")


@pytest.mark.parametrize("status", [429, 503])
async def test_deferring_status_without_retry_after_fails(
    transport: HttpTransport, inbox: InboxServer, status: int
) -> None:
    """429/503 without Retry-After is an ordinary failure (a strike)."""
    inbox.answer = lambda _: _text(status, "busy")
    result = await transport.post(make_reply())
    assert isinstance(result, Failed)
    assert "without Retry-After" in result.reason


# Refusals and failures


async def test_410_gone_is_rejected(transport: HttpTransport, inbox: InboxServer) -> None:
    """410 Gone is Rejected with the ``gone`` dead reason: the reply dies at once."""
    inbox.answer = lambda _: _text(410, "this inbox was removed")
    result = await transport.post(make_reply())
    assert result == Rejected("HTTP 410 Gone: this inbox was removed", dead_reason=DeadReason.GONE)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(400, "HTTP 400 Bad Request: nope", id="400"),
        pytest.param(500, "HTTP 500 Internal Server Error: nope", id="500"),
    ],
)
async def test_other_errors_fail_with_status_and_snippet(
    transport: HttpTransport, inbox: InboxServer, status: int, expected: str
) -> None:
    """400 and 500 are failures whose reason names the status and the body."""
    inbox.answer = lambda _: _text(status, "nope")
    assert await transport.post(make_reply()) == Failed(expected)


async def test_error_body_secrets_are_redacted(
    transport: HttpTransport, inbox: InboxServer
) -> None:
    """A credential echoed in an error body does not reach the stored reason."""
    inbox.answer = lambda _: _text(500, "upstream said: Authorization: Bearer sk-live-abcdef")
    result = await transport.post(make_reply())
    assert isinstance(result, Failed)
    assert "sk-live-abcdef" not in result.reason
    assert "[redacted]" in result.reason


async def test_redirect_is_not_followed(transport: HttpTransport, inbox: InboxServer) -> None:
    """A 307 fails without following it, so a signed reply never goes somewhere unconfigured."""
    hits: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPTemporaryRedirect(location="/elsewhere")

    inbox.answer = redirect
    result = await transport.post(make_reply())
    assert isinstance(result, Failed)
    assert "redirects are not followed (to /elsewhere)" in result.reason
    assert hits == ["/inbox"]


async def test_connection_refused_fails() -> None:
    """Nothing listening on the port is a failure, not an exception."""
    routes = StaticRoutes()
    routes.add(AGENT, f"http://127.0.0.1:{free_port()}/inbox")
    async with HttpTransport(routes, timeout_s=5.0, clock=SystemClock()) as http:
        result = await http.post(make_reply())
    assert isinstance(result, Failed)
    assert result.reason.startswith("connection failed:")


async def test_dns_error_fails() -> None:
    """A host name that does not resolve is a failure (a strike)."""
    routes = StaticRoutes()
    routes.add(AGENT, "http://birddog-no-such-host.invalid/inbox")
    async with HttpTransport(routes, timeout_s=10.0, clock=SystemClock()) as http:
        result = await http.post(make_reply())
    assert isinstance(result, Failed)
    assert result.reason.startswith(("DNS error:", "connection failed:"))


async def test_tls_error_fails(inbox: InboxServer) -> None:
    """Speaking TLS to a plain-HTTP server is a failure (a strike), not an exception."""
    routes = StaticRoutes()
    routes.add(AGENT, inbox.url.replace("http://", "https://"))
    async with HttpTransport(routes, timeout_s=5.0, clock=SystemClock()) as http:
        result = await http.post(make_reply())
    assert isinstance(result, Failed)
    assert result.reason.startswith(("TLS error:", "connection"))


@pytest.mark.parametrize("partial", [True, False], ids=["mid-body", "before-status"])
async def test_connection_reset_fails(partial: bool) -> None:
    """A server that resets the connection before finishing its answer gives a failure."""

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if partial:
            writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"accep')
            await writer.drain()
        writer.transport.abort()

    server, url = await raw_server(reset)
    routes = StaticRoutes()
    routes.add(AGENT, url)
    try:
        async with HttpTransport(routes, timeout_s=5.0, clock=SystemClock()) as http:
            result = await http.post(make_reply())
    finally:
        server.close()
        await server.wait_closed()
    assert isinstance(result, Failed)
    assert result.reason.startswith(("answer cut off", "connection"))


# Timeouts: the request is cancelled and its connection closed


def hanging(
    cancelled: asyncio.Event, *, entered: asyncio.Event | None = None
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An inbox handler that never answers: it sets ``entered``, and ``cancelled`` when cut."""

    async def hang(_: web.Request) -> web.StreamResponse:
        if entered is not None:
            entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    return hang


async def test_timeout_fails_and_cancels_the_request(
    routes: StaticRoutes, inbox: InboxServer
) -> None:
    """No answer within timeout_s is a failure, and the server sees its handler cancelled."""
    entered, cancelled = asyncio.Event(), asyncio.Event()
    inbox.answer = hanging(cancelled, entered=entered)
    async with HttpTransport(routes, timeout_s=0.3, clock=SystemClock()) as http:
        started = time.monotonic()
        result = await http.post(make_reply())
        elapsed = time.monotonic() - started
        assert result == Failed("no answer within 0.3 s; request cancelled")
        assert entered.is_set()
        assert elapsed < 3.0
        # The connection is closed while the transport is still open: not left running.
        await asyncio.wait_for(cancelled.wait(), timeout=5.0)


async def test_caller_cancellation_also_closes_the_connection(
    transport: HttpTransport, inbox: InboxServer
) -> None:
    """A post cancelled from outside (the drain's own timeout) closes its connection too."""
    cancelled = asyncio.Event()
    inbox.answer = hanging(cancelled)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(transport.post(make_reply()), timeout=0.3)
    await asyncio.wait_for(cancelled.wait(), timeout=5.0)


async def test_timeout_covers_a_slow_trickling_body(routes: StaticRoutes) -> None:
    """A server that sends headers then trickles its body forever still times out."""
    closed = asyncio.Event()

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def drip() -> None:
            with contextlib.suppress(ConnectionError):
                while True:  # one byte every 50 ms: pacing, not synchronisation
                    writer.write(b"1\r\n \r\n")
                    await writer.drain()
                    await asyncio.sleep(0.05)

        dripping = asyncio.create_task(drip())
        # EOF, or a reset when the client closes with the drip unread: either way, closed.
        with contextlib.suppress(ConnectionError):
            await reader.read()
        closed.set()
        dripping.cancel()
        writer.close()

    server, url = await raw_server(trickle)
    routes.add(AGENT, url)
    try:
        async with HttpTransport(routes, timeout_s=0.3, clock=SystemClock()) as http:
            result = await http.post(make_reply())
            await asyncio.wait_for(closed.wait(), timeout=5.0)
    finally:
        server.close()
        await server.wait_closed()
    assert result == Failed("no answer within 0.3 s; request cancelled")


# Bounded bodies


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_oversized_2xx_body_fails(
    transport: HttpTransport, inbox: InboxServer, chunked: bool
) -> None:
    """A 2xx body above max_body_bytes is a failure, even if it would say accepted."""
    big = json.dumps({"accepted": True, "pad": "x" * 70_000}).encode()

    async def respond(request: web.Request) -> web.StreamResponse:
        if not chunked:
            return web.Response(body=big, content_type="application/json")
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(big), 8192):
            await response.write(big[start : start + 8192])
        await response.write_eof()
        return response

    inbox.answer = respond
    result = await transport.post(make_reply())
    assert isinstance(result, Failed)
    assert "larger than 65536 bytes" in result.reason


async def test_body_just_under_the_bound_is_read(routes: StaticRoutes, inbox: InboxServer) -> None:
    """An acknowledgement that fits max_body_bytes exactly is accepted."""
    body = json.dumps({"accepted": True, "pad": "x" * 100}).encode()
    inbox.answer = lambda _: _bytes(200, body)
    async with HttpTransport(routes, max_body_bytes=len(body), clock=SystemClock()) as http:
        assert await http.post(make_reply()) == Accepted()


async def test_oversized_error_body_keeps_its_status(
    transport: HttpTransport, inbox: InboxServer
) -> None:
    """A huge 410 page is still Gone: only the head of a non-2xx body is needed."""
    inbox.answer = lambda _: _text(410, "gone " * 40_000)
    result = await transport.post(make_reply())
    assert isinstance(result, Rejected)
    assert result.dead_reason is DeadReason.GONE


# Routes


async def test_unknown_recipient_is_rejected_without_a_post(
    transport: HttpTransport, inbox: InboxServer
) -> None:
    """No route for the agent: Rejected as unknown_recipient, and nothing is sent anywhere."""
    result = await transport.post(make_reply(agent_id="nobody"))
    assert result == Rejected("no route for agent nobody", dead_reason=DeadReason.UNKNOWN_RECIPIENT)
    assert inbox.requests == []


async def test_held_recipient_is_deferred_without_a_post(
    routes: StaticRoutes, inbox: InboxServer
) -> None:
    """A held route defers the reply a minute, without a strike and without a post."""
    clock = FrozenClock()
    routes.hold(AGENT)
    async with HttpTransport(routes, clock=clock) as http:
        result = await http.post(make_reply())
    assert result == Deferred(until=clock.now() + timedelta(seconds=60), reason="recipient held")
    assert inbox.requests == []
    routes.release(AGENT)


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1/inbox", "file:///etc/passwd", "unix:///tmp/sock", "http:///no-host"],
)
async def test_route_url_that_is_not_http_is_rejected(url: str, inbox: InboxServer) -> None:
    """A route whose URL is not http(s) with a host is Rejected; nothing is sent."""
    routes = StaticRoutes()
    routes.routes[AGENT] = Route(agent_id=AGENT, url=url, secret="whsec_dGVzdA==")
    async with HttpTransport(routes, clock=SystemClock()) as http:
        result = await http.post(make_reply())
    assert isinstance(result, Rejected)
    assert result.dead_reason is DeadReason.REJECTED
    assert inbox.requests == []


async def test_route_with_a_broken_secret_fails_without_leaking_it(inbox: InboxServer) -> None:
    """A route secret that is not base64 is a failure (fixable), and the reason hides it."""
    routes = StaticRoutes()
    routes.routes[AGENT] = Route(agent_id=AGENT, url=inbox.url, secret="whsec_!!hunter2!!")
    async with HttpTransport(routes, clock=SystemClock()) as http:
        result = await http.post(make_reply())
    assert result == Failed(f"route secret for agent {AGENT} is invalid")
    assert inbox.requests == []


# The pooled session


async def test_session_is_pooled_and_reopens_after_close(
    routes: StaticRoutes, inbox: InboxServer
) -> None:
    """Posts share one session; after close() a post opens a fresh one."""
    ports: set[str] = set()

    async def record_peer(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        ports.add(str(peer))
        return web.json_response({"accepted": True})

    inbox.answer = record_peer
    http = HttpTransport(routes, clock=SystemClock())
    for index in range(3):
        assert await http.post(make_reply(index)) == Accepted()
    assert len(ports) == 1  # one kept-alive connection
    await http.close()
    assert await http.post(make_reply(4)) == Accepted()
    assert len(ports) == 2
    await http.close()


async def test_concurrent_posts_all_land(routes: StaticRoutes, inbox: InboxServer) -> None:
    """A page's worth of concurrent posts (64) are all accepted, each with its own id."""
    async with HttpTransport(routes, clock=SystemClock()) as http:
        results = await asyncio.gather(*(http.post(make_reply(i)) for i in range(64)))
    assert results == [Accepted()] * 64
    assert len({seen.headers["webhook-id"] for seen in inbox.requests}) == 64


async def _json(status: int, data: object) -> web.Response:
    return web.json_response(data, status=status)


async def _text(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text, headers=headers)


async def _bytes(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


# StaticRoutes


def test_static_routes_generate_secrets_and_validate_urls() -> None:
    """``add`` generates a whsec_ secret when none is given and refuses non-http URLs."""
    routes = StaticRoutes()
    route = routes.add("a", "https://example.test/inbox")
    assert route.secret.startswith("whsec_")
    assert routes.add("b", "http://example.test/", secret=route.secret).secret == route.secret
    with pytest.raises(InvalidInput):
        routes.add("c", "ftp://example.test/")
    with pytest.raises(InvalidSecret):
        routes.add("c", "http://example.test/", secret="whsec_???")
    assert "c" not in routes.routes
    assert route.secret not in repr(route)


async def test_static_routes_hold_release_remove() -> None:
    """Hold and release flip ``enabled``; remove forgets the agent; unknown agents raise."""
    routes = StaticRoutes([Route(agent_id="a", url="http://example.test/", secret="whsec_dGVzdA")])
    assert routes.hold("a").enabled is False
    assert (await routes.route("a")).enabled is False  # type: ignore[union-attr]
    assert routes.release("a").enabled is True
    assert routes.remove("a") is True
    assert await routes.route("a") is None
    assert routes.remove("a") is False
    with pytest.raises(RouteNotFound):
        routes.hold("a")


async def test_the_status_travels_with_the_result(
    transport: HttpTransport, inbox: InboxServer
) -> None:
    """Every answer's HTTP status comes back with its result, for the attempt log."""
    assert (await transport.post(make_reply())).status == 200
    inbox.answer = lambda _: _text(500, "nope")
    assert (await transport.post(make_reply())).status == 500
    inbox.answer = lambda _: _text(410, "gone")
    assert (await transport.post(make_reply())).status == 410


async def test_the_daemons_transport_has_a_connection_for_every_post_of_its_window(
    database_url: str,
) -> None:
    """No post of the window waits inside aiohttp for a connection (its timeout running)."""
    settings = Settings(database_url=database_url, window_size=300, fresh_rows=20)
    async with open_adapters(settings, pool_size=1) as adapters:
        assert adapters.transport.connector_limit == 320
