"""``birddog probe``: a canary round trip through the whole path, job to receipt.

The probe is its own sender, worker and recipient: it routes a one-off agent to an inbox
of its own on 127.0.0.1, enqueues a job with mail, settles it, and waits until a running
drain daemon (or, with ``drain``, the probe itself) has delivered the signed reply and
stored its receipt. Its job runs in a session under the reserved prefix
(``birddog:probe:<nonce>``), which a worker taking every queue never claims, so a running
worker cannot steal it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

import structlog
from aiohttp import web

from birddog.bootstrap import Adapters, Announce, open_adapters
from birddog.clock import epoch_ms
from birddog.core.delivery import Receipt
from birddog.core.errors import BirdDogError
from birddog.core.jobs import RESERVED_QUEUE_PREFIX, AgentWork, agent_job
from birddog.core.mail import AgentAddress, Mail, Outcome, Reply
from birddog.http.inbox import Inbox
from birddog.http.server import serve
from birddog.settings import Settings

log = structlog.get_logger("birddog.probe")


@dataclass(frozen=True)
class ProbeResult:
    """How a probe went.

    Attributes:
        ok: the reply came back with the nonce and became a receipt in time.
        message: one line for people.
        elapsed_s: how long the round trip took.
    """

    ok: bool
    message: str
    elapsed_s: float


async def probe_round_trip(
    settings: Settings, *, timeout_s: float, drain: bool = False, announce: Announce | None = None
) -> ProbeResult:
    """Open the adapters of ``settings`` and run :func:`run_probe` over them (``birddog probe``).

    Args:
        settings: which database.
        timeout_s: the deadline for the round trip.
        drain: deliver the reply here instead of a running daemon.
        announce: told about the embedded server.
    """
    async with open_adapters(settings, pool_size=2, announce=announce) as adapters:
        return await run_probe(adapters, timeout_s=timeout_s, drain=drain)


async def run_probe(adapters: Adapters, *, timeout_s: float, drain: bool = False) -> ProbeResult:
    """Post a canary through the whole path and wait for its receipt.

    A probe inbox listens on 127.0.0.1; a route for a one-off probe agent points at it;
    a job with mail is enqueued, claimed and settled here (the probe is its own worker),
    and the drain daemon (or, with ``drain``, this process) must deliver the reply. The
    probe succeeds when the inbox got a correctly signed reply echoing the nonce and the
    reply's key holds a receipt, all before the deadline.
    """
    started = time.monotonic()
    nonce = secrets.token_hex(8)
    agent = f"birddog-probe-{nonce}"
    address = AgentAddress(agent_id=agent, session_id=f"{RESERVED_QUEUE_PREFIX}probe:{nonce}")
    inbox = ProbeInbox()
    inbox_url = await inbox.start()
    key = f"probe:{nonce}"
    reply_key = f"outbox:{key}:reply:0"
    try:
        route = await adapters.routes.add(agent, inbox_url)
        inbox.inbox = Inbox(route.secret or "")
        mail = Mail(
            key=key,
            to=address,
            from_=address,
            reply_to=[address],
            content=f"probe {nonce}",
            created_at=epoch_ms(adapters.clock.now()),
        )
        job = agent_job(
            AgentWork(
                job_id=f"probe-{nonce}", session_id=address.session_id, command_fact_id=nonce
            ),
            mail,
        )
        await adapters.enqueue([job])
        claimed = await adapters.jobs.claim(queues=[address.session_id], lease_s=timeout_s)
        if claimed is None:
            return _probe_fail(started, "the probe job could not be claimed")
        await adapters.jobs.settle(
            job_id=job.job_id,
            claim_token=claimed.claim_token,
            outcome=Outcome.COMPLETED,
            content=f"echo {nonce}",
        )
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if drain:
                await adapters.room.drain_outbox()
            if inbox.got.done() and isinstance(await adapters.outbox.get(reply_key), Receipt):
                reply = inbox.got.result()
                if reply.content != f"echo {nonce}" or reply.in_reply_to != key:
                    return _probe_fail(started, "the probe reply did not echo the nonce")
                elapsed = time.monotonic() - started
                return ProbeResult(True, f"probe ok: round trip in {elapsed:.2f} s", elapsed)
            await asyncio.sleep(0.05)  # polling with a deadline, not synchronisation
        row = await adapters.outbox.get(reply_key)
        state = "receipt" if isinstance(row, Receipt) else getattr(row, "state", "missing")
        # The canary is the probe's own: once the probe has failed loudly, a leftover
        # reply would only turn into a second, misleading dead letter later.
        await adapters.outbox.discard_probe_reply(reply_key)
        return _probe_fail(
            started,
            f"no round trip within {timeout_s:g} s (reply {state}; is `birddog run` running?)",
        )
    finally:
        await inbox.stop()
        try:
            await adapters.routes.remove(agent)
        except Exception as exc:
            log.debug("probe_route_left", error=type(exc).__name__)


class ProbeInbox:
    """The probe's own inbox on 127.0.0.1: verifies the signature, keeps the first reply."""

    def __init__(self) -> None:
        self.inbox: Inbox | None = None
        self.got: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen on an ephemeral port of 127.0.0.1 and return the inbox URL."""
        app = web.Application()
        app.router.add_post("/probe", self._view)
        self._runner, url = await serve(app)
        return f"{url}/probe"

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _view(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.inbox is None:
            return web.json_response({"error": "not ready"}, status=503)
        try:
            received = self.inbox.receive(dict(request.headers), body)
        except BirdDogError:
            return web.json_response({"error": "refused"}, status=401)
        if not self.got.done():
            self.got.set_result(received.reply)
        return web.json_response({"accepted": True})


def _probe_fail(started: float, why: str) -> ProbeResult:
    return ProbeResult(False, f"probe FAILED: {why}", time.monotonic() - started)


__all__ = ["ProbeInbox", "ProbeResult", "run_probe"]
