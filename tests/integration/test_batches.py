"""Batched delivery on PostgreSQL and real HTTP: one signed POST, acknowledged per key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from birddog import Reply
from birddog.clock import SystemClock
from birddog.core.batch import NOT_IN_BATCH_ACK, batch_id
from birddog.core.delivery import new_row
from birddog.engine import DrainReport
from birddog.http import HttpTransport
from birddog.http.inbox import Inbox, MalformedReply, Received, aiohttp_handler
from birddog.http.server import serve
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import eventually, make_reply, outbox_rows
from tests.support.inbox import posts_to
from tests.support.stacks import QUICK, pg_room

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]
AGENT = "batcher"


@dataclass
class Recipient:
    """A real inbox on 127.0.0.1 that records each POST and answers as the test says."""

    url: str = ""
    answer: Answer | None = None
    posts: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Record the request, then answer."""
        body = await request.read()
        self.posts.append(({k.lower(): v for k, v in request.headers.items()}, body))
        assert self.answer is not None
        return await self.answer(request)


@pytest.fixture
async def recipient() -> AsyncIterator[Recipient]:
    server = Recipient()
    async with posts_to(server.handle, "/inbox") as server.url:
        yield server


async def route_for(pool: Pool, url: str, *, batch: int) -> str:
    """Add the batching route; its signing secret."""
    route = await PostgresRoutes(pool, clock=SystemClock()).add(AGENT, url, batch_size=batch)
    assert route.secret is not None
    return route.secret


async def seed(pool: Pool, count: int) -> list[str]:
    """``count`` rows due now to the batching recipient; their keys, in key order."""
    now = SystemClock().now()
    rows = [
        new_row(make_reply(f"outbox:m{index}:reply:0", agent=AGENT), now=now)
        for index in range(count)
    ]
    await PostgresOutbox(pool).add(rows)
    return [row.key for row in rows]


async def test_a_batch_is_one_signed_post_and_a_partial_acknowledgement_fails_the_rest(
    pg_pool: Pool, recipient: Recipient
) -> None:
    """Three replies go in one POST; the two keys acknowledged get receipts, the third retries."""
    secret = await route_for(pg_pool, recipient.url, batch=3)
    keys = await seed(pg_pool, 3)

    async def some(_: web.Request) -> web.StreamResponse:
        return web.json_response({"accepted": [keys[0], keys[2], "outbox:other:reply:0"]})

    recipient.answer = some
    async with HttpTransport(
        PostgresRoutes(pg_pool, clock=SystemClock()), clock=SystemClock()
    ) as transport:
        report = await pg_room(pg_pool, transport, config=QUICK).drain_outbox()
    [(headers, body)] = recipient.posts
    assert headers["webhook-id"] == batch_id(list(reversed(keys)))
    verified = Webhook(secret).verify(body, headers)
    assert [reply["key"] for reply in verified["replies"]] == keys
    assert Reply.model_validate(verified["replies"][1]).key == keys[1]
    assert sorted(report.delivered) == [keys[0], keys[2]], report
    assert report.retried == [keys[1]], report
    [left] = await pg_pool.fetch("SELECT key, attempts, last_error FROM birddog.outbox")
    assert (left["key"], left["attempts"], left["last_error"]) == (keys[1], 1, NOT_IN_BATCH_ACK)
    receipts = await pg_pool.fetch(
        'SELECT key, attempt_log FROM birddog.receipts ORDER BY key COLLATE "C"'
    )
    assert [r["key"] for r in receipts] == [keys[0], keys[2]]
    for record in receipts:
        assert [entry["result"] for entry in record["attempt_log"]] == ["accepted"]


async def test_retry_after_defers_the_whole_batch_without_a_strike(
    pg_pool: Pool, recipient: Recipient
) -> None:
    """A 429 with Retry-After moves every reply of the batch, each logging a deferral."""
    await route_for(pg_pool, recipient.url, batch=10)
    keys = await seed(pg_pool, 4)

    async def busy(_: web.Request) -> web.StreamResponse:
        return web.json_response({"accepted": False}, status=429, headers={"Retry-After": "120"})

    recipient.answer = busy
    async with HttpTransport(
        PostgresRoutes(pg_pool, clock=SystemClock()), clock=SystemClock()
    ) as transport:
        report = await pg_room(pg_pool, transport, config=QUICK).drain_outbox()
    assert len(recipient.posts) == 1
    assert sorted(report.deferred) == keys
    rows = await pg_pool.fetch("SELECT attempts, deferrals, attempt_log FROM birddog.outbox")
    assert [(r["attempts"], r["deferrals"]) for r in rows] == [(0, 1)] * 4
    assert [[e["result"] for e in r["attempt_log"]] for r in rows] == [["deferred"]] * 4


async def test_a_python_inbox_takes_batches_with_one_flag(pg_pool: Pool) -> None:
    """aiohttp_handler(batches=True) verifies, hands each reply over once and acks its keys."""
    route = await PostgresRoutes(pg_pool, clock=SystemClock()).add(
        AGENT, "http://127.0.0.1:1/unset", batch_size=2
    )
    assert route.secret is not None
    taken: list[str] = []

    async def on_reply(reply: Reply) -> None:
        taken.append(reply.key)

    app = web.Application()
    app.router.add_post("/inbox", aiohttp_handler(Inbox(route.secret), on_reply, batches=True))
    runner, url = await serve(app)
    try:
        await PostgresRoutes(pg_pool, clock=SystemClock()).update(AGENT, url=f"{url}/inbox")
        keys = await seed(pg_pool, 5)
        reports: list[DrainReport] = []
        async with HttpTransport(
            PostgresRoutes(pg_pool, clock=SystemClock()), clock=SystemClock()
        ) as transport:
            engine = pg_room(pg_pool, transport, config=QUICK).engine()
            stop = asyncio.Event()
            serving = asyncio.create_task(
                engine.serve(stop=stop, listener=None, backstop_s=60, on_report=reports.append)
            )

            def delivered() -> set[str]:
                return {k for r in reports for k in r.delivered}

            await eventually(lambda: delivered() == set(keys), "every receipt")
            stop.set()
            await asyncio.wait_for(serving, 10)
            await engine.close(grace_s=1)
    finally:
        await runner.cleanup()
    assert sorted(taken) == keys
    assert await outbox_rows(pg_pool) == []


async def test_the_stored_json_is_the_body_of_a_single_post(
    pg_pool: Pool, recipient: Recipient
) -> None:
    """A claimed reply is posted as stored (a newer version's field kept), signed over it."""
    route = await PostgresRoutes(pg_pool, clock=SystemClock()).add(AGENT, recipient.url)
    assert route.secret is not None
    [key] = await seed(pg_pool, 1)
    await pg_pool.execute(
        "UPDATE birddog.outbox SET reply = reply || '{\"priority\": 3}' WHERE key = $1", key
    )
    stored = await pg_pool.fetchval("SELECT reply::text FROM birddog.outbox WHERE key = $1", key)

    async def ok(_: web.Request) -> web.StreamResponse:
        return web.json_response({"accepted": True})

    recipient.answer = ok
    async with HttpTransport(
        PostgresRoutes(pg_pool, clock=SystemClock()), clock=SystemClock()
    ) as transport:
        report = await pg_room(pg_pool, transport, config=QUICK).drain_outbox()
    assert report.delivered == [key]
    [(headers, body)] = recipient.posts
    assert body == stored.encode()
    assert headers["webhook-id"] == key
    verified: dict[str, Any] = Webhook(route.secret).verify(body, headers)
    assert verified["priority"] == 3
    assert Reply.model_validate({k: v for k, v in verified.items() if k != "priority"}).key == key
    assert json.loads(body)["key"] == key


def signed_batch(
    secret: str, entries: list[Any], *, msg_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    """A batch body and its Standard Webhooks headers, as the daemon sends them."""
    body = json.dumps({"replies": entries}).encode()
    msg_id = msg_id or batch_id([entry["key"] for entry in entries])
    now = SystemClock().now()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, body.decode()),
    }, body


def test_receive_batch_reads_each_reply_and_names_a_malformed_one() -> None:
    """A batch's good replies are read; a malformed one is an error of its own, in place."""
    secret = "whsec_" + "A" * 43 + "="
    good = make_reply("outbox:g:reply:0").model_dump(mode="json")
    bad = make_reply("outbox:b:reply:0").model_dump(mode="json") | {"content": 7}
    inbox = Inbox(secret)
    entries = inbox.receive_batch(*signed_batch(secret, [good, bad]))
    assert [type(entry).__name__ for entry in entries] == ["Received", "MalformedReply"]
    assert isinstance(entries[0], Received)
    assert entries[0].reply.key == "outbox:g:reply:0"


def test_receive_batch_refuses_an_id_that_is_not_the_keys() -> None:
    """A batch whose webhook-id is not the hash of its keys is refused whole."""
    secret = "whsec_" + "A" * 43 + "="
    good = make_reply("outbox:g:reply:0").model_dump(mode="json")
    with pytest.raises(MalformedReply):
        Inbox(secret).receive_batch(*signed_batch(secret, [good], msg_id="batch:" + "0" * 64))
