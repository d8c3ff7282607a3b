"""The recipient helper: verify, parse, check and deduplicate replies, alone and behind aiohttp."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from birddog.clock import SystemClock
from birddog.core.delivery import Accepted, Failed
from birddog.core.errors import BirdDogError
from birddog.core.mail import AgentAddress, Mail, Reply, ReplyFacts, reply_key
from birddog.http import HttpTransport, StaticRoutes, generate_secret
from birddog.http.inbox import (
    DEFAULT_MAX_BODY_BYTES,
    Inbox,
    InboxRefused,
    InvalidSignature,
    MalformedReply,
    Received,
    ReplyMismatch,
    StaleTimestamp,
    aiohttp_handler,
)
from birddog.http.server import serve
from birddog.testing import FrozenClock
from tests.support.inbox import posts_to

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
CALLER = AgentAddress(agent_id="caller", session_id="session-a")
AUDITOR = AgentAddress(agent_id="auditor", session_id="session-c")
WORKER = AgentAddress(agent_id="worker", session_id="session-b")
MAIL = Mail(
    key="mail-1",
    to=WORKER,
    from_=CALLER,
    reply_to=[CALLER, AUDITOR],
    content="what is the answer?",
    created_at=1_767_225_600_000,
)


def make_reply(index: int = 0, **changes: object) -> Reply:
    fields: dict[str, Any] = {
        "key": reply_key(MAIL.key, index),
        "in_reply_to": MAIL.key,
        "to": MAIL.reply_to[index],
        "from_": MAIL.to,
        "content": "42",
        "created_at": 1_767_225_700_000,
        "reply": ReplyFacts(command_id="command-1", outcome="completed"),
    }
    fields.update(changes)
    return Reply(**fields)


def signed(
    secret: str, reply: Reply, *, at: datetime = NOW, msg_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    """Headers and body as a Standard Webhooks sender (the reference library) makes them."""
    body = reply.model_dump_json().encode()
    msg_id = msg_id or reply.key
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body.decode()),
    }, body


@pytest.fixture
def secret() -> str:
    return generate_secret()


@pytest.fixture
def inbox(secret: str) -> Inbox:
    return Inbox(secret, clock=FrozenClock(NOW))


# receive: verification


def test_receive_accepts_a_reference_signed_reply(inbox: Inbox, secret: str) -> None:
    """A reply signed by the reference library is verified and parsed, and is not a duplicate."""
    reply = make_reply()
    headers, body = signed(secret, reply)
    assert inbox.receive(headers, body) == Received(reply=reply, duplicate=False)


def test_header_names_are_case_insensitive(inbox: Inbox, secret: str) -> None:
    """Header names are matched whatever their case, as HTTP requires."""
    headers, body = signed(secret, make_reply())
    shouted = {name.upper(): value for name, value in headers.items()}
    assert inbox.receive(shouted, body).reply.key == "outbox:mail-1:reply:0"


def test_any_of_several_signatures_verifies(inbox: Inbox, secret: str) -> None:
    """A space-separated signature list verifies when any v1 entry matches."""
    headers, body = signed(secret, make_reply())
    other, _ = signed(generate_secret(), make_reply())
    headers["webhook-signature"] = (
        f"v1a,xyz {other['webhook-signature']} {headers['webhook-signature']}"
    )
    assert inbox.receive(headers, body).reply == make_reply()


def test_rotating_inbox_accepts_old_and_new_secret(secret: str) -> None:
    """An inbox built with two secrets verifies replies signed with either."""
    new = generate_secret()
    inbox = Inbox([secret, new], clock=FrozenClock(NOW))
    for key in (secret, new):
        headers, body = signed(key, make_reply())
        assert inbox.receive(headers, body).reply == make_reply()


def test_forged_signature_is_refused(inbox: Inbox, secret: str) -> None:
    """A made-up signature raises InvalidSignature."""
    headers, body = signed(secret, make_reply())
    headers["webhook-signature"] = "v1,Zm9yZ2VkIHNpZ25hdHVyZSBmb3JnZWQgc2lnbmF0dXJlIQ=="
    with pytest.raises(InvalidSignature):
        inbox.receive(headers, body)


def test_tampered_body_is_refused(inbox: Inbox, secret: str) -> None:
    """A body changed after signing (here its content) raises InvalidSignature."""
    headers, body = signed(secret, make_reply())
    with pytest.raises(InvalidSignature):
        inbox.receive(headers, body.replace(b'"42"', b'"43"'))


def test_swapped_webhook_id_is_refused(inbox: Inbox, secret: str) -> None:
    """A webhook-id changed after signing raises InvalidSignature: the id is signed too."""
    headers, body = signed(secret, make_reply())
    headers["webhook-id"] = "outbox:mail-1:reply:1"
    with pytest.raises(InvalidSignature):
        inbox.receive(headers, body)


def test_wrong_secret_is_refused(inbox: Inbox) -> None:
    """A reply signed with another secret raises InvalidSignature."""
    headers, body = signed(generate_secret(), make_reply())
    with pytest.raises(InvalidSignature):
        inbox.receive(headers, body)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_is_refused(inbox: Inbox, secret: str, missing: str) -> None:
    """A delivery without one of the three Standard Webhooks headers raises InvalidSignature."""
    headers, body = signed(secret, make_reply())
    del headers[missing]
    with pytest.raises(InvalidSignature):
        inbox.receive(headers, body)


@pytest.mark.parametrize("stamp", ["yesterday", "-1", "1.5", "9" * 400])
def test_timestamp_that_is_not_unix_seconds_is_refused(
    inbox: Inbox, secret: str, stamp: str
) -> None:
    """A webhook-timestamp that is not Unix seconds raises InvalidSignature."""
    headers, body = signed(secret, make_reply())
    headers["webhook-timestamp"] = stamp
    with pytest.raises(InvalidSignature):
        inbox.receive(headers, body)


@pytest.mark.parametrize(
    ("offset_s", "refused"),
    [
        pytest.param(-301, True, id="replayed-too-old"),
        pytest.param(-3600 * 24, True, id="replayed-a-day-later"),
        pytest.param(301, True, id="too-new"),
        pytest.param(-299, False, id="old-within-tolerance"),
        pytest.param(299, False, id="new-within-tolerance"),
    ],
)
def test_timestamp_tolerance(inbox: Inbox, secret: str, offset_s: int, refused: bool) -> None:
    """A validly signed reply outside 300 s of now raises StaleTimestamp; inside, it passes."""
    headers, body = signed(secret, make_reply(), at=NOW + timedelta(seconds=offset_s))
    if refused:
        with pytest.raises(StaleTimestamp):
            inbox.receive(headers, body)
    else:
        assert inbox.receive(headers, body).reply == make_reply()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"key": "outbox:mail-1:reply:0"}', id="missing-fields"),
        pytest.param(b"[]", id="not-an-object"),
    ],
)
def test_malformed_body_is_refused(inbox: Inbox, secret: str, body: bytes) -> None:
    """A correctly signed body that is not a reply raises MalformedReply."""
    msg_id = "outbox:mail-1:reply:0"
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(NOW.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, NOW, body.decode()),
    }
    with pytest.raises(MalformedReply):
        inbox.receive(headers, body)


def test_typescript_reply_without_in_reply_to_is_accepted(inbox: Inbox, secret: str) -> None:
    """A reply in the TypeScript shape (no inReplyTo, unknown fields) is read and checks out."""
    data = make_reply().model_dump(mode="json")
    del data["inReplyTo"]
    data["traceId"] = "4bf92f3577b34da6a3ce929d0e0e4736"
    body = json.dumps(data).encode()
    msg_id = data["key"]
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(NOW.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, NOW, body.decode()),
    }
    received = inbox.receive(headers, body)
    assert received.reply == make_reply()
    inbox.check_against(received.reply, MAIL)


def test_webhook_id_must_be_the_reply_key(inbox: Inbox, secret: str) -> None:
    """A signed delivery whose webhook-id is not the reply's key raises MalformedReply."""
    headers, body = signed(secret, make_reply(), msg_id="something-else")
    with pytest.raises(MalformedReply):
        inbox.receive(headers, body)


def test_refusals_share_one_root() -> None:
    """Every inbox refusal is an InboxRefused and a BirdDogError."""
    for error in (InvalidSignature, StaleTimestamp, MalformedReply, ReplyMismatch):
        assert issubclass(error, InboxRefused)
        assert issubclass(error, BirdDogError)


# Duplicates


def test_duplicate_is_reported_only_after_remember(inbox: Inbox, secret: str) -> None:
    """An inbox reports a duplicate only once the reply was remembered as taken."""
    headers, body = signed(secret, make_reply())
    first = inbox.receive(headers, body)
    assert not first.duplicate
    assert not inbox.receive(headers, body).duplicate  # not taken yet: a retry is processed
    inbox.remember(first.webhook_id)
    assert inbox.seen(first.webhook_id)
    assert inbox.receive(headers, body).duplicate


def test_dedupe_memory_is_bounded_least_recent_first(secret: str) -> None:
    """Beyond dedupe_size the least recently seen ids are forgotten."""
    inbox = Inbox(secret, dedupe_size=2, clock=FrozenClock(NOW))
    inbox.remember("a")
    inbox.remember("b")
    assert inbox.seen("a")  # touching "a" makes "b" the least recent
    inbox.remember("c")
    assert inbox.seen("a")
    assert not inbox.seen("b")
    assert inbox.seen("c")


# check_against


@pytest.mark.parametrize("index", [0, 1])
def test_check_against_accepts_each_reply_of_the_mail(inbox: Inbox, index: int) -> None:
    """A reply to any replyTo entry of the mail passes the check."""
    inbox.check_against(make_reply(index), MAIL)


@pytest.mark.parametrize(
    ("reply", "field"),
    [
        pytest.param(make_reply(in_reply_to="mail-2"), "inReplyTo", id="other-mail"),
        pytest.param(make_reply(key="outbox:mail-2:reply:0"), "key", id="key-of-other-mail"),
        pytest.param(make_reply(key="mail-1:reply:0"), "key", id="key-without-prefix"),
        pytest.param(make_reply(key="outbox:mail-1:reply:2"), "key", id="index-out-of-range"),
        pytest.param(make_reply(key="outbox:mail-1:reply:01"), "key", id="index-leading-zero"),
        pytest.param(make_reply(key="outbox:mail-1:reply:x"), "key", id="index-not-a-number"),
        pytest.param(make_reply(key="outbox:mail-1:reply:"), "key", id="index-missing"),
        pytest.param(make_reply(0, to=AUDITOR), "to", id="to-other-entry"),
        pytest.param(
            make_reply(to=AgentAddress(agent_id="caller", session_id="other")),
            "to",
            id="to-other-session",
        ),
        pytest.param(make_reply(from_=CALLER), "from", id="from-not-the-recipient"),
    ],
)
def test_check_against_refuses_mismatches(inbox: Inbox, reply: Reply, field: str) -> None:
    """A reply that does not answer the mail raises ReplyMismatch naming the field."""
    with pytest.raises(ReplyMismatch) as caught:
        inbox.check_against(reply, MAIL)
    assert caught.value.field == field


# aiohttp_handler, behind a real server, fed by the real transport


class CountingInbox(Inbox):
    """An inbox that notes each delivery it verifies, for tests that need to know it arrived."""

    def __init__(self, secret: str) -> None:
        super().__init__(secret)
        self.arrivals: asyncio.Queue[str] = asyncio.Queue()

    def receive(self, headers: Mapping[str, str], body: bytes) -> Received:
        """Verify as usual, then note the arrival."""
        received = super().receive(headers, body)
        self.arrivals.put_nowait(received.webhook_id)
        return received


@dataclass
class Host:
    """A recipient host: an aiohttp app with the BirdDog handler, and what it handled."""

    secret: str
    inbox: CountingInbox
    url: str = ""
    handled: list[Reply] = field(default_factory=list)
    behaviour: Callable[[Reply], Awaitable[None]] | None = None

    async def on_reply(self, reply: Reply) -> None:
        """Check the reply against the mail, run the test's behaviour, then record it."""
        self.inbox.check_against(reply, MAIL)
        if self.behaviour is not None:
            await self.behaviour(reply)
        self.handled.append(reply)


@pytest.fixture
async def host(secret: str) -> AsyncIterator[Host]:
    state = Host(secret=secret, inbox=CountingInbox(secret))
    handler = aiohttp_handler(state.inbox, state.on_reply)
    async with posts_to(handler, "/birddog", shutdown_timeout=1.0) as state.url:
        yield state


@pytest.fixture
async def transport(host: Host) -> AsyncIterator[HttpTransport]:
    routes = StaticRoutes()
    routes.add(CALLER.agent_id, host.url, secret=host.secret)
    routes.add(AUDITOR.agent_id, host.url, secret=generate_secret())  # not the host's secret
    async with HttpTransport(routes, timeout_s=5.0, clock=SystemClock()) as http:
        yield http


async def test_handler_accepts_a_delivered_reply(transport: HttpTransport, host: Host) -> None:
    """The transport's signed post is verified, handed to on_reply and acknowledged."""
    assert await transport.post(make_reply()) == Accepted()
    assert host.handled == [make_reply()]


async def test_handler_acknowledges_a_duplicate_without_handling_it_again(
    transport: HttpTransport, host: Host
) -> None:
    """A retried delivery is acknowledged again but on_reply runs only once."""
    assert await transport.post(make_reply()) == Accepted()
    assert await transport.post(make_reply()) == Accepted()
    assert host.handled == [make_reply()]


async def test_handler_answers_401_to_a_wrong_signature(
    transport: HttpTransport, host: Host
) -> None:
    """A reply signed with another secret gets 401, which the sender counts as a failure."""
    result = await transport.post(make_reply(1))
    assert isinstance(result, Failed)
    assert result.reason.startswith("HTTP 401 Unauthorized")
    assert host.handled == []


async def test_handler_answers_400_to_a_malformed_body(host: Host) -> None:
    """A correctly signed body that is not a reply gets 400 with accepted false."""
    body = b'{"hello": "world"}'
    headers = {
        "webhook-id": "outbox:mail-1:reply:0",
        "webhook-timestamp": str(int(datetime.now(UTC).timestamp())),
        "webhook-signature": Webhook(host.secret).sign(
            "outbox:mail-1:reply:0", datetime.now(UTC), body.decode()
        ),
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(host.url, data=body, headers=headers) as resp,
    ):
        assert resp.status == 400
        answer = await resp.json()
    assert answer["accepted"] is False
    assert "not a BirdDog reply" in answer["error"]
    assert host.handled == []


async def test_handler_answers_400_to_a_mismatched_reply(
    transport: HttpTransport, host: Host
) -> None:
    """A reply whose check_against fails in on_reply gets 400 and is not remembered."""
    result = await transport.post(make_reply(from_=CALLER))
    assert isinstance(result, Failed)
    assert result.reason.startswith("HTTP 400 Bad Request")
    assert not host.inbox.seen("outbox:mail-1:reply:0")


async def test_handler_failure_is_retried_not_taken_as_duplicate(
    transport: HttpTransport, host: Host
) -> None:
    """When on_reply fails the answer is 500, and the retry is handled, not deduplicated."""
    failures = [RuntimeError("disk full")]

    async def flaky(_: Reply) -> None:
        if failures:
            raise failures.pop()

    host.behaviour = flaky
    first = await transport.post(make_reply())
    assert isinstance(first, Failed)
    assert first.reason.startswith("HTTP 500")
    assert "disk full" not in first.reason  # the host's error text stays inside the host
    assert await transport.post(make_reply()) == Accepted()
    assert host.handled == [make_reply()]


async def test_concurrent_copies_are_handled_once(transport: HttpTransport, host: Host) -> None:
    """Two copies of one reply in flight at once: on_reply runs once and both are acknowledged."""
    entered, gate = asyncio.Event(), asyncio.Event()

    async def slow(_: Reply) -> None:
        entered.set()
        await gate.wait()

    host.behaviour = slow
    first = asyncio.create_task(transport.post(make_reply()))
    await asyncio.wait_for(entered.wait(), timeout=5.0)
    second = asyncio.create_task(transport.post(make_reply()))
    for _ in range(2):
        await asyncio.wait_for(host.inbox.arrivals.get(), timeout=5.0)
    # Both copies are inside the server; the second waits for the first to be handled.
    assert not second.done()
    gate.set()
    results = await asyncio.wait_for(asyncio.gather(first, second), timeout=5.0)
    assert list(results) == [Accepted(), Accepted()]
    assert host.handled == [make_reply()]


async def test_handler_reads_at_most_1_mib_by_default(transport: HttpTransport, host: Host) -> None:
    """With the default bound a body above 1 MiB gets 413 and is never handled."""
    assert DEFAULT_MAX_BODY_BYTES == 1024 * 1024
    big = make_reply(content="x" * DEFAULT_MAX_BODY_BYTES)
    result = await transport.post(big)
    assert isinstance(result, Failed)
    assert result.reason.startswith("HTTP 413")
    assert host.handled == []


async def test_a_raised_bound_takes_a_maximal_reply(secret: str) -> None:
    """A host that raises max_body_bytes takes a reply of 1 MiB of escaped content."""
    handled: list[Reply] = []

    async def on_reply(reply: Reply) -> None:
        handled.append(reply)

    app = web.Application()
    handler = aiohttp_handler(Inbox(secret), on_reply, max_body_bytes=8 * 1024 * 1024)
    app.router.add_post("/birddog", handler)
    runner, url = await serve(app, shutdown_timeout=1.0)
    routes = StaticRoutes()
    routes.add(CALLER.agent_id, f"{url}/birddog", secret=secret)
    big = make_reply(content="\u0001" * 1_048_576)  # escapes to six bytes a character
    try:
        async with HttpTransport(routes, timeout_s=30.0, clock=SystemClock()) as http:
            assert await http.post(big) == Accepted()
    finally:
        await runner.cleanup()
    assert handled == [big]


@pytest.mark.parametrize("stale", [True, False])
async def test_headers_and_timestamp_are_checked_before_the_body_is_read(
    host: Host, stale: bool
) -> None:
    """A stale or unsigned request announcing a body is refused 401 without reading a byte."""
    stamp = int(datetime.now(UTC).timestamp()) - (3600 if stale else 0)
    headers = (
        f"webhook-id: k\r\nwebhook-timestamp: {stamp}\r\nwebhook-signature: v1,AAAA\r\n"
        if stale
        else ""
    )
    path_and_host = host.url.removeprefix("http://")
    where, _, path = path_and_host.partition("/")
    address, _, port = where.partition(":")
    reader, writer = await asyncio.open_connection(address, int(port))
    try:
        writer.write(
            f"POST /{path} HTTP/1.1\r\nHost: {where}\r\n{headers}"
            f"Content-Type: application/json\r\nContent-Length: {512 * 1024}\r\n\r\n".encode()
        )
        await writer.drain()
        # No body is sent: a handler that waited for it would never answer.
        status = await asyncio.wait_for(reader.readline(), timeout=5.0)
    finally:
        writer.close()
    assert status.startswith(b"HTTP/1.1 401")
    assert host.handled == []


async def test_handler_refuses_a_body_above_its_bound(secret: str) -> None:
    """A body above max_body_bytes gets 413 without being verified or handled."""
    handled: list[Reply] = []

    async def on_reply(reply: Reply) -> None:
        handled.append(reply)

    app = web.Application()
    app.router.add_post("/birddog", aiohttp_handler(Inbox(secret), on_reply, max_body_bytes=100))
    runner, url = await serve(app, shutdown_timeout=1.0)
    routes = StaticRoutes()
    routes.add(CALLER.agent_id, f"{url}/birddog", secret=secret)
    try:
        async with HttpTransport(routes, clock=SystemClock()) as http:
            result = await http.post(make_reply())
    finally:
        await runner.cleanup()
    assert isinstance(result, Failed)
    assert result.reason.startswith("HTTP 413")
    assert handled == []
