"""One OpenTelemetry trace from enqueue to the reply's POST, over real PostgreSQL and HTTP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

from birddog import AgentJobPayload, MailRoom, tracing
from birddog.clock import SystemClock
from birddog.http import generate_secret
from birddog.http.inbox import Inbox
from birddog.http.server import serve
from birddog.http.transport import HttpTransport
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.testing import ManualListener
from birddog.worker import Handler, Worker
from tests.support import ALICE, enqueue, make_job
from tests.support.stacks import pg_room


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """BirdDog's spans go to an SDK provider with an in-memory exporter, for this test only.

    The process's global provider stays untouched, so no other test is traced.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield provider, exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


class RecordingInbox:
    """An inbox on 127.0.0.1 that verifies each reply and keeps its headers (lower-cased)."""

    def __init__(self, secret: str) -> None:
        self.inbox = Inbox(secret)
        self.headers: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        """Verify the signed reply (or batch), keep its headers, acknowledge it."""
        body = await request.read()
        if request.headers["webhook-id"].startswith("batch:"):
            self.inbox.receive_batch(request.headers, body)
        else:
            self.inbox.receive(request.headers, body)
        self.headers.append({name.lower(): value for name, value in request.headers.items()})
        return web.json_response({"accepted": True})


@asynccontextmanager
async def mail_room(
    pool: Pool, *, batch_size: int = 1
) -> AsyncIterator[tuple[MailRoom, RecordingInbox]]:
    """Alice's route points at a recording inbox; a mail room posts to it."""
    secret = generate_secret()
    recording = RecordingInbox(secret)
    app = web.Application()
    app.router.add_post("/inbox", recording.handle)
    runner, url = await serve(app)
    routes = PostgresRoutes(pool, clock=SystemClock())
    await routes.add(ALICE.agent_id, f"{url}/inbox", secret=secret, batch_size=batch_size)
    transport = HttpTransport(routes, timeout_s=5, clock=SystemClock())
    room = pg_room(pool, transport)
    try:
        yield room, recording
    finally:
        await transport.close()
        await runner.cleanup()


@pytest.fixture
async def delivered(pg_pool: Pool) -> AsyncIterator[tuple[MailRoom, RecordingInbox]]:
    """A mail room posting alice's replies, one per POST, to a recording inbox."""
    async with mail_room(pg_pool) as delivering:
        yield delivering


def agent(provider: TracerProvider) -> Handler:
    """A handler that answers inside a span of the agent's own (under the current span)."""

    async def answer(payload: AgentJobPayload) -> str:
        with provider.get_tracer("agent").start_as_current_span("agent.turn"):
            await asyncio.sleep(0)
        return "done"

    return answer


async def plain(payload: AgentJobPayload) -> str:
    """Answer, with no span of its own."""
    return "done"


async def send_in_a_span(pool: Pool, provider: TracerProvider, job_id: str) -> Span:
    """Enqueue a job whose mail asks alice for a reply, inside the sender's own span."""
    with provider.get_tracer("sender").start_as_current_span("send") as span:
        await enqueue(pool, make_job(job_id, reply_to=[ALICE]))
    return span


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


async def test_one_trace_runs_from_the_senders_span_to_the_reply_post(
    pg_pool: Pool,
    traced: tuple[TracerProvider, InMemorySpanExporter],
    delivered: tuple[MailRoom, RecordingInbox],
) -> None:
    """Enqueue, claim, handler, settle and post are one trace, and the inbox sees the post's context."""
    (provider, exporter), (room, inbox) = traced, delivered
    send = await send_in_a_span(pg_pool, provider, "traced")
    stored = await pg_pool.fetchval("SELECT traceparent FROM birddog.jobs")
    assert stored is not None

    worker = Worker(
        jobs=PostgresJobs(pg_pool, clock=SystemClock()),
        handler=agent(provider),
        listener=ManualListener(max_wait_s=0.05),
        lease_s=5,
    )
    await worker.run(once=True)
    assert worker.summary() == {"completed": 1}
    report = await room.drain_outbox()
    assert len(report.delivered) == 1

    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {
        "send",
        "birddog.enqueue",
        "birddog.claim",
        "birddog.handler",
        "agent.turn",
        "birddog.settle",
        "birddog.post",
    }
    trace_id = send.get_span_context().trace_id
    assert {span.context.trace_id for span in spans.values()} == {trace_id}

    def parent(name: str) -> str:
        parent = spans[name].parent
        assert parent is not None, name
        [found] = [s.name for s in spans.values() if s.context.span_id == parent.span_id]
        return found

    assert parent("birddog.enqueue") == "send"
    for name in ("birddog.claim", "birddog.handler", "birddog.settle"):
        assert parent(name) == "birddog.enqueue"
    assert parent("agent.turn") == "birddog.handler"
    assert parent("birddog.post") == "birddog.settle"
    enqueue_span, post = spans["birddog.enqueue"], spans["birddog.post"]
    assert enqueue_span.kind is trace.SpanKind.PRODUCER
    assert post.kind is trace.SpanKind.CLIENT
    assert enqueue_span.attributes == {"birddog.job_id": "traced", "birddog.queue": "s-bob"}
    assert spans["birddog.settle"].attributes == {
        "birddog.job_id": "traced",
        "birddog.outcome": "completed",
    }
    assert post.attributes is not None
    assert post.attributes["birddog.result"] == "accepted"

    # What was stored is each span's own context: the job's is the enqueue's, the
    # reply row's the settlement's, and the header the post's.
    def traceparent(span: ReadableSpan) -> str:
        context = span.context
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"

    assert stored == traceparent(enqueue_span)
    [header] = [headers.get("traceparent") for headers in inbox.headers]
    assert header == traceparent(post)
    receipt = await pg_pool.fetchval("SELECT key FROM birddog.receipts")
    assert receipt == report.delivered[0]


async def test_a_job_cancelled_while_queued_hands_its_own_context_to_the_post(
    pg_pool: Pool,
    traced: tuple[TracerProvider, InMemorySpanExporter],
    delivered: tuple[MailRoom, RecordingInbox],
) -> None:
    """A job settled without a worker (no settle span) still puts its reply's post in its trace."""
    (provider, exporter), (room, inbox) = traced, delivered
    await send_in_a_span(pg_pool, provider, "cancelled")
    await PostgresJobs(pg_pool, clock=SystemClock()).cancel(
        job_id="cancelled", content="not needed"
    )
    await room.drain_outbox()
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"send", "birddog.enqueue", "birddog.post"}
    post = spans["birddog.post"]
    assert post.parent is not None
    assert post.parent.span_id == spans["birddog.enqueue"].context.span_id
    [header] = [headers.get("traceparent") for headers in inbox.headers]
    assert header is not None
    assert header.split("-")[2] == f"{post.context.span_id:016x}"


async def test_a_batch_is_one_post_span_linked_to_each_reply_it_carries(
    pg_pool: Pool, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Two traced replies in one batched POST: one post span, a child of one, linked to the other."""
    provider, exporter = traced
    first = await send_in_a_span(pg_pool, provider, "batch-1")
    second = await send_in_a_span(pg_pool, provider, "batch-2")
    worker = Worker(
        jobs=PostgresJobs(pg_pool, clock=SystemClock()),
        handler=plain,
        listener=ManualListener(max_wait_s=0.05),
        lease_s=5,
    )
    await worker.run(once=True)
    async with mail_room(pg_pool, batch_size=10) as (room, inbox):
        report = await room.drain_outbox()
    assert len(report.delivered) == 2
    [headers] = inbox.headers
    assert headers["webhook-id"].startswith("batch:")
    spans = exporter.get_finished_spans()
    [post] = [span for span in spans if span.name == "birddog.post"]
    settles = {
        span.context.trace_id: span.context.span_id
        for span in spans
        if span.name == "birddog.settle"
    }
    traces = {first.get_span_context().trace_id, second.get_span_context().trace_id}
    assert set(settles) == traces
    assert post.parent is not None
    [link] = post.links
    assert {post.parent.span_id, link.context.span_id} == set(settles.values())
    assert post.attributes is not None
    assert post.attributes["birddog.replies"] == 2
    assert headers["traceparent"].split("-")[2] == f"{post.context.span_id:016x}"


async def test_without_a_configured_sdk_nothing_is_stored_or_sent(
    pg_pool: Pool, delivered: tuple[MailRoom, RecordingInbox]
) -> None:
    """With the API alone (no SDK provider), jobs and rows keep no traceparent and posts send none."""
    room, inbox = delivered
    await enqueue(pg_pool, make_job("plain", reply_to=[ALICE]))
    worker = Worker(
        jobs=PostgresJobs(pg_pool, clock=SystemClock()),
        handler=plain,
        listener=ManualListener(max_wait_s=0.05),
        lease_s=5,
    )
    await worker.run(once=True)
    assert await pg_pool.fetchval("SELECT traceparent FROM birddog.outbox") is None
    await room.drain_outbox()
    assert await pg_pool.fetchval("SELECT traceparent FROM birddog.jobs") is None
    [headers] = inbox.headers
    assert "traceparent" not in headers
    assert "webhook-signature" in headers


def test_without_the_extra_tracing_is_off_and_imports_nothing() -> None:
    """With OpenTelemetry absent, birddog.tracing records nothing and never fails."""
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import birddog
from birddog import tracing
assert not tracing.available()
with tracing.span("enqueue", parent=None, root=True) as span:
    assert span.traceparent is None
with tracing.span("post", parent="00-" + "1" * 32 + "-" + "2" * 16 + "-01", kind="client"):
    assert tracing.outgoing() is None
tracing.record("claim", parent="x", since_s=1.0)
print("off")
"""
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "off"), done.stderr
