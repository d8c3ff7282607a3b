"""Dead-letter alerts: coalesced per recipient, signed, without content, and never raising."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
import structlog
from aiohttp import web
from standardwebhooks import Webhook

from birddog.clock import SystemClock
from birddog.core.delivery import DeadReason, OutboxRow, RowState, UndecodableRow
from birddog.core.errors import InvalidInput
from birddog.core.mail import AgentAddress, Reply, ReplyFacts
from birddog.http import AlertCoalescer, AlertPoster, DeadLetterGroup, generate_secret
from tests.support import eventually, free_port
from tests.support.inbox import posts_to

CONTENT = "TOP-SECRET-MAIL-CONTENT"
DEAD_AT = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def dead_row(key: str = "outbox:mail-9:reply:1", agent: str = "caller") -> OutboxRow:
    reply = Reply(
        key=key,
        in_reply_to="mail-9",
        to=AgentAddress(agent_id=agent, session_id="session-a"),
        from_=AgentAddress(agent_id="worker", session_id="session-b"),
        content=CONTENT,
        created_at=1_767_225_600_000,
        reply=ReplyFacts(command_id="command-9", outcome="failed", diagnostic="boom"),
    )
    return OutboxRow(
        key=reply.key,
        reply=reply,
        state=RowState.DEAD,
        attempts=20,
        deferrals=2,
        due_at=DEAD_AT,
        created_at=DEAD_AT,
        last_error="HTTP 500 Internal Server Error: down",
        dead_reason=DeadReason.ATTEMPTS_EXHAUSTED,
    )


def one(row: OutboxRow | None = None) -> DeadLetterGroup:
    """A group of one dead letter (by default :func:`dead_row`) that died at DEAD_AT."""
    return DeadLetterGroup.of([row or dead_row()], dead_at=DEAD_AT)


@dataclass
class AlertSink:
    """A real aiohttp server that records alerts and answers with a set status."""

    url: str = ""
    status: int = 200
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        """Record the alert and answer with ``status``."""
        self.received.append((dict(request.headers), await request.read()))
        return web.Response(status=self.status, text="ok")


@pytest.fixture
async def sink() -> AsyncIterator[AlertSink]:
    server = AlertSink()
    async with posts_to(server.handle, "/alerts", shutdown_timeout=1.0) as server.url:
        yield server


async def test_alert_is_signed_and_carries_no_content(sink: AlertSink) -> None:
    """The alert is a signed JSON POST with the dead letters' facts and without content."""
    secret = generate_secret()
    buried = UndecodableRow(
        key="outbox:mail-7:reply:0",
        agent_id="caller",
        attempts=0,
        deferrals=0,
        due_at=DEAD_AT,
        error="stored reply cannot be read",
    )
    group = DeadLetterGroup.of([dead_row(), buried], dead_at=DEAD_AT)
    async with AlertPoster(sink.url, secret, clock=SystemClock()) as poster:
        assert await poster.alert(group) is True
    [(headers, body)] = sink.received
    payload = Webhook(secret).verify(body, headers)
    assert payload == {
        "type": "birddog.dead_letters",
        "recipient": {"agentId": "caller"},
        "count": 2,
        "keys": ["outbox:mail-9:reply:1", "outbox:mail-7:reply:0"],
        "deadReasons": {"attempts_exhausted": 1, "undecodable": 1},
        "lastError": "stored reply cannot be read",
        "firstDeadAt": "2026-11-29T12:00:00Z",
        "lastDeadAt": "2026-11-29T12:00:00Z",
    }
    assert CONTENT.encode() not in body
    assert b"content" not in body
    assert headers["webhook-id"].startswith("alert:")
    assert headers["webhook-id"].endswith(":1795953600000")
    assert headers["Content-Type"] == "application/json"


async def test_twenty_thousand_dead_letters_make_a_handful_of_posts(sink: AlertSink) -> None:
    """Dead letters of one recipient within the window go out as one POST: count, 100 keys."""
    poster = AlertPoster(sink.url, None, clock=SystemClock())
    alerts = AlertCoalescer(poster, window_s=0.2, clock=SystemClock())
    for index in range(20_000):
        alerts.dead_letter(dead_row(f"outbox:m{index:05d}:reply:0", agent=f"agent-{index % 4}"))
    await alerts.close(timeout_s=10)
    payloads = [json.loads(body) for _headers, body in sink.received]
    assert len(payloads) == 4
    assert sorted(p["recipient"]["agentId"] for p in payloads) == [f"agent-{i}" for i in range(4)]
    assert [p["count"] for p in payloads] == [5000] * 4
    assert all(len(p["keys"]) == 100 for p in payloads)
    assert all(p["deadReasons"] == {"attempts_exhausted": 5000} for p in payloads)


async def test_a_recipients_next_window_is_a_new_alert(sink: AlertSink) -> None:
    """After a window's alert is posted, the next dead letter opens a new window."""
    alerts = AlertCoalescer(
        AlertPoster(sink.url, None, clock=SystemClock()), window_s=0.05, clock=SystemClock()
    )
    alerts.dead_letter(dead_row("outbox:a:reply:0"))
    alerts.dead_letter(dead_row("outbox:b:reply:0"))
    await eventually(lambda: sink.received, "the first window's alert", within_s=5)
    alerts.dead_letter(dead_row("outbox:c:reply:0"))
    await alerts.close(timeout_s=5)
    assert [json.loads(body)["keys"] for _headers, body in sink.received] == [
        ["outbox:a:reply:0", "outbox:b:reply:0"],
        ["outbox:c:reply:0"],
    ]


async def test_unsigned_alert_without_secret(sink: AlertSink) -> None:
    """Without a secret the alert is posted unsigned, still without content."""
    async with AlertPoster(sink.url, None, clock=SystemClock()) as poster:
        assert await poster.alert(one()) is True
    [(headers, body)] = sink.received
    assert "webhook-signature" not in {name.lower() for name in headers}
    assert json.loads(body)["deadReasons"] == {"attempts_exhausted": 1}


async def test_unreachable_alert_url_is_logged_not_raised() -> None:
    """An alert URL nobody listens on returns False and logs alert_failed, without raising."""
    port = free_port()
    secret = generate_secret()
    with structlog.testing.capture_logs() as logs:
        async with AlertPoster(
            f"http://127.0.0.1:{port}/hook?token=abc123", secret, clock=SystemClock()
        ) as poster:
            assert await poster.alert(one()) is False
    [event] = [log for log in logs if log["event"] == "alert_failed"]
    assert (event["agent_id"], event["first_key"]) == ("caller", "outbox:mail-9:reply:1")
    assert event["log_level"] == "error"
    text = repr(logs)
    assert "abc123" not in text
    assert secret not in text
    assert CONTENT not in text


async def test_alert_answered_with_an_error_is_logged(sink: AlertSink) -> None:
    """A non-2xx answer from the alert URL returns False and logs alert_failed with the status."""
    sink.status = 500
    with structlog.testing.capture_logs() as logs:
        async with AlertPoster(sink.url, None, clock=SystemClock()) as poster:
            assert await poster.alert(one()) is False
    [event] = [log for log in logs if log["event"] == "alert_failed"]
    assert event["reason"] == "HTTP 500"


async def test_hanging_alert_url_times_out_without_raising() -> None:
    """An alert URL that never answers is abandoned after timeout_s and does not raise."""
    accepted = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # until the poster closes the connection
        writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with structlog.testing.capture_logs() as logs:
            async with AlertPoster(
                f"http://127.0.0.1:{port}/", None, timeout_s=0.2, clock=SystemClock()
            ) as poster:
                assert await poster.alert(one()) is False
    finally:
        server.close()
        await server.wait_closed()
    assert accepted.is_set()
    [event] = [log for log in logs if log["event"] == "alert_failed"]
    assert event["reason"] == "no answer within 0.2 s"


def test_alert_url_and_secret_are_checked_up_front() -> None:
    """A non-http alert URL or a broken secret is refused when the poster is built."""
    with pytest.raises(InvalidInput):
        AlertPoster("ftp://example.test/", None, clock=SystemClock())
    with pytest.raises(InvalidInput):
        AlertPoster("https://example.test/", "whsec_???", clock=SystemClock())
    poster = AlertPoster(
        "https://hooks.example.test/services/T0/B0/tokenvalue", None, clock=SystemClock()
    )
    assert "tokenvalue" not in repr(poster)


async def test_a_failed_alert_post_is_counted_and_tried_again(sink: AlertSink) -> None:
    """An alert URL answering 500 gets the same alert again a second later; one failure counted."""
    failures: list[str] = []
    sink.status = 500
    alerts = AlertCoalescer(
        AlertPoster(sink.url, None, clock=SystemClock()),
        window_s=0.01,
        clock=SystemClock(),
        on_failure=failures.append,
    )

    async def until_received(count: int) -> None:
        await eventually(
            lambda: len(sink.received), f"alert {count}", until=lambda n: n >= count, within_s=10
        )

    with structlog.testing.capture_logs() as logs:
        alerts.dead_letter(dead_row())
        await until_received(1)
        sink.status = 200
        await until_received(2)
        await alerts.close(timeout_s=5)
    assert failures == ["alerts"]
    bodies = [json.loads(body) for _headers, body in sink.received]
    assert bodies[0] == bodies[1]
    assert [log["event"] for log in logs if log["event"].startswith("alert_")] == [
        "alert_failed",
        "alert_sent",
    ]
