"""Egress at connect time: real servers on 127.0.0.1, fake DNS answers through the resolver hook."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from birddog.clock import SystemClock
from birddog.core.delivery import Accepted, DeadReason, Failed, Rejected
from birddog.core.egress import EgressPolicy
from birddog.core.errors import InvalidInput
from birddog.core.mail import Reply
from birddog.http import HttpTransport, StaticRoutes
from birddog.http.server import serve
from birddog.ports import Route
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import make_reply

AGENT = "caller"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example secret
PUBLIC = EgressPolicy.parse("public")


def reply(index: int = 0) -> Reply:
    return make_reply(f"outbox:mail-1:reply:{index}", agent=AGENT)


@dataclass
class FakeDns(AbstractResolver):
    """Answers each name with the addresses a test sets, and counts the lookups."""

    answers: dict[str, list[str]] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The addresses set for ``host``; an unknown name fails like a real lookup."""
        self.lookups.append(host)
        if host not in self.answers:
            raise OSError(f"no such name {host}")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.answers[host]
        ]

    async def close(self) -> None:
        """Nothing to release."""


@dataclass
class Inbox:
    """A real inbox on 127.0.0.1 that accepts everything and records what it saw."""

    port: int = 0
    base: str = ""
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Record the request's URL and accept."""
        self.seen.append(str(request.url))
        return web.json_response({"accepted": True})


@pytest.fixture
async def inbox() -> AsyncIterator[Inbox]:
    server = Inbox()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner, url = await serve(app)
    server.base = url
    server.port = int(url.rsplit(":", 1)[1])
    yield server
    await runner.cleanup()


def transport_to(
    url: str, *, egress: EgressPolicy | None = None, dns: FakeDns | None = None, **options: Any
) -> HttpTransport:
    # The route is stored without a check, as a route written before the policy changed.
    routes = StaticRoutes()
    routes.routes[AGENT] = Route(agent_id=AGENT, url=url, secret=SECRET)
    return HttpTransport(
        routes, egress=egress, resolver=dns, timeout_s=5, clock=SystemClock(), **options
    )


async def test_a_name_that_resolves_to_metadata_is_a_dead_letter(inbox: Inbox) -> None:
    """A name answering 169.254.169.254 is refused at connect: egress_refused, nothing sent."""
    dns = FakeDns({"inbox.test": ["169.254.169.254"]})
    async with transport_to(f"http://inbox.test:{inbox.port}/hook", dns=dns) as transport:
        result = await transport.post(reply())
    assert isinstance(result, Rejected)
    assert result.dead_reason is DeadReason.EGRESS_REFUSED
    assert "169.254.169.254 is a link-local or cloud metadata address" in result.reason
    assert dns.lookups == ["inbox.test"]
    assert inbox.seen == []


async def test_a_rebinding_name_cannot_reach_a_refused_address(inbox: Inbox) -> None:
    """A name that answered a good address, then rebinds to a refused one, is refused."""
    dns = FakeDns({"inbox.test": ["127.0.0.1"]})
    url = f"http://inbox.test:{inbox.port}/hook"
    async with transport_to(url, dns=dns) as first:
        assert isinstance(await first.post(reply(0)), Accepted)
    dns.answers["inbox.test"] = ["::ffff:169.254.169.254"]
    async with transport_to(url, dns=dns) as second:
        result = await second.post(reply(1))
    assert isinstance(result, Rejected)
    assert result.dead_reason is DeadReason.EGRESS_REFUSED
    assert len(inbox.seen) == 1


async def test_refused_answers_are_dropped_and_allowed_ones_used(inbox: Inbox) -> None:
    """A mixed DNS answer connects only to the addresses the policy allows."""
    dns = FakeDns({"inbox.test": ["169.254.169.254", "fe80::1", "127.0.0.1"]})
    async with transport_to(f"http://inbox.test:{inbox.port}/hook", dns=dns) as transport:
        assert isinstance(await transport.post(reply()), Accepted)
    assert len(inbox.seen) == 1


async def test_public_mode_refuses_a_name_that_resolves_to_loopback(inbox: Inbox) -> None:
    """With public egress, a name answering 127.0.0.1 never connects."""
    dns = FakeDns({"inbox.test": ["127.0.0.1"]})
    url = f"http://inbox.test:{inbox.port}/hook"
    async with transport_to(url, egress=PUBLIC, dns=dns) as transport:
        result = await transport.post(reply())
    assert isinstance(result, Rejected)
    assert "not a public address" in result.reason
    assert inbox.seen == []


async def test_an_address_literal_is_checked_at_connect_too(inbox: Inbox) -> None:
    """A literal address in a stored route (no lookup at all) is still refused at connect."""
    async with transport_to(f"{inbox.base}/hook", egress=PUBLIC) as transport:
        result = await transport.post(reply())
    assert isinstance(result, Rejected)
    assert result.dead_reason is DeadReason.EGRESS_REFUSED
    assert inbox.seen == []


async def test_an_allow_entry_opens_one_address_and_a_deny_entry_closes_it(inbox: Inbox) -> None:
    """BIRDDOG_EGRESS_ALLOW lets public mode reach 127.0.0.1; BIRDDOG_EGRESS_DENY refuses it."""
    allowed = EgressPolicy.parse("public", allow="127.0.0.1/32")
    async with transport_to(f"{inbox.base}/hook", egress=allowed) as transport:
        assert isinstance(await transport.post(reply()), Accepted)
    denied = EgressPolicy.parse("internal", deny="127.0.0.0/8")
    async with transport_to(f"{inbox.base}/hook", egress=denied) as transport:
        result = await transport.post(reply())
    assert isinstance(result, Rejected)
    assert "BIRDDOG_EGRESS_DENY" in result.reason
    assert len(inbox.seen) == 1


async def test_the_check_runs_per_connection_not_per_post(inbox: Inbox) -> None:
    """Twenty posts to one recipient resolve its name once: the check is not on the hot path."""
    dns = FakeDns({"inbox.test": ["127.0.0.1"]})
    async with transport_to(f"http://inbox.test:{inbox.port}/hook", dns=dns) as transport:
        for index in range(20):
            assert isinstance(await transport.post(reply(index)), Accepted)
    assert dns.lookups == ["inbox.test"]
    assert len(inbox.seen) == 20


async def test_a_stored_url_with_credentials_is_never_posted(inbox: Inbox) -> None:
    """A route URL carrying user:password (stored before the check) dies without a post."""
    url = f"http://user:pw@127.0.0.1:{inbox.port}/hook"
    async with transport_to(url) as transport:
        result = await transport.post(reply())
    assert isinstance(result, Rejected)
    assert result.dead_reason is DeadReason.EGRESS_REFUSED
    assert "pw" not in result.reason
    assert inbox.seen == []


async def test_posts_go_through_the_proxy(inbox: Inbox) -> None:
    """With BIRDDOG_HTTP_PROXY every post goes to the proxy, which resolves the name itself."""
    url = "http://inbox.invalid/hook"
    async with transport_to(url, egress=PUBLIC, proxy=inbox.base) as transport:
        assert isinstance(await transport.post(reply()), Accepted)
    assert inbox.seen == [url]


async def test_a_failure_reason_shows_no_query() -> None:
    """An answer aiohttp cannot parse fails without the route URL's query in the reason."""

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBad Header\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook?sig=abc123&plain=visible-value"
    try:
        async with transport_to(url) as transport:
            result = await transport.post(reply())
    finally:
        server.close()
        await server.wait_closed()
    assert isinstance(result, Failed)
    assert f"127.0.0.1:{port}/hook?[redacted]" in result.reason
    assert "visible-value" not in result.reason


async def test_route_writes_are_checked_against_the_policy(pg_pool: Pool) -> None:
    """Route writes refuse metadata hosts in every spelling, credentials, loopback when public."""
    routes = PostgresRoutes(pg_pool, clock=SystemClock())
    for bad, named in [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://0xa9fea9fe/", "169.254.169.254"),
        ("https://user:pw@inbox.example/hook", "credentials"),
        # The NAT64 and SIIT spellings, and ideographic full stops.
        ("http://[64:ff9b:1::a9fe:a9fe]/", "169.254.169.254"),
        ("http://[::ffff:0:a9fe:a9fe]/", "169.254.169.254"),
        ("http://169\u3002254\u3002169\u3002254/", "169.254.169.254"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            await routes.add(AGENT, bad)
        assert caught.value.field == "url"
        assert named in str(caught.value)
    await routes.add(AGENT, "http://127.0.0.1:9/hook")
    public = PostgresRoutes(pg_pool, egress=PUBLIC, clock=SystemClock())
    with pytest.raises(InvalidInput, match="not a public address"):
        await public.update(AGENT, url="http://[::1]:9/hook")
    with pytest.raises(InvalidInput, match="not a public address"):
        await public.add("other", "http://localhost:9/hook")
    assert (await routes.route(AGENT)) is not None
    assert (await routes.route("other")) is None


@pytest.mark.parametrize(
    "host", ["64:ff9b:1::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "64:ff9b::a9fe:a9fe"]
)
async def test_an_ipv6_spelling_of_the_metadata_address_is_never_connected_to(
    inbox: Inbox, host: str
) -> None:
    """Stored unchecked, or answered by DNS, a NAT64/SIIT metadata address is refused at connect."""
    async with transport_to(f"http://[{host}]:{inbox.port}/hook") as transport:
        literal = await transport.post(reply(0))
    dns = FakeDns({"inbox.test": [host]})
    async with transport_to(f"http://inbox.test:{inbox.port}/hook", dns=dns) as transport:
        resolved = await transport.post(reply(1))
    for result in (literal, resolved):
        assert isinstance(result, Rejected)
        assert result.dead_reason is DeadReason.EGRESS_REFUSED
        assert "carries 169.254.169.254" in result.reason
    assert inbox.seen == []
