"""``birddog demo``: watch replies travel, retry, land as receipts, and die loudly.

Two sample agents (a planner and a researcher) with inboxes on 127.0.0.1, three jobs
from the planner to the researcher with different reply lists, a researcher inbox that
fails its first two posts, and a ghost recipient with no route. Everything runs in this
process with a fast retry schedule, in a database of its own (``birddog_demo``) on the
embedded server or ``DATABASE_URL``'s server, dropped at the end: the demo never writes
into the user's database and never races a daemon draining it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Callable

from aiohttp import web

from birddog.bootstrap import Adapters, open_demo_adapters
from birddog.clock import epoch_ms
from birddog.core.delivery import Receipt
from birddog.core.jobs import AgentJobPayload, AgentWork, agent_job, decode_agent_job
from birddog.core.mail import AgentAddress, Mail, Outcome, Reply
from birddog.http.inbox import Inbox, aiohttp_handler
from birddog.http.server import serve
from birddog.service.mailroom import has_pending_delivery
from birddog.settings import Settings

Echo = Callable[[str], None]

DEMO_DEADLINE_S = 50.0


class DemoInbox:
    """An agent's inbox on 127.0.0.1; ``flaky`` answers 500 to the first posts."""

    def __init__(self, name: str, *, echo: Echo, flaky: int = 0) -> None:
        self.name = name
        self.echo = echo
        self.flaky = flaky
        self.posts: Counter[str] = Counter()
        self.inbox: Inbox | None = None
        self.runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen and return the inbox URL."""
        app = web.Application()
        app.router.add_post("/inbox", self._view)
        self.runner, url = await serve(app)
        return f"{url}/inbox"

    async def _view(self, request: web.Request) -> web.StreamResponse:
        key = request.headers.get("webhook-id", "?")
        self.posts[key] += 1
        if self.posts[key] <= self.flaky:
            self.echo(f"  ✗ {self.name}'s inbox answers 500 to {key} (try {self.posts[key]})")
            return web.json_response({"error": "flaky inbox"}, status=500)
        assert self.inbox is not None  # noqa: S101 - set before the route exists

        async def on_reply(reply: Reply) -> None:
            self.echo(
                f"  ✓ {self.name} received {reply.key}: {reply.reply.outcome.value}, "
                f"{len(reply.content)} characters"
            )

        return await aiohttp_handler(self.inbox, on_reply)(request)

    async def stop(self) -> None:
        """Stop listening."""
        if self.runner is not None:
            await self.runner.cleanup()


async def run_demo(settings: Settings, *, echo: Echo) -> None:
    """Run the demo end to end in under a minute."""
    fast = settings.model_copy(
        update={
            "base_delay_s": 0.3,
            "max_delay_s": 1.0,
            "max_attempts": 5,
            "post_timeout_s": 2.0,
            "metrics_port": 0,
        }
    )
    async with open_demo_adapters(fast) as adapters:
        await _demo(adapters, echo)


async def _demo(adapters: Adapters, echo: Echo) -> None:
    started = time.monotonic()
    run = secrets.token_hex(3)
    planner = AgentAddress(agent_id=f"planner-{run}", session_id=f"planner-{run}-s1")
    researcher = AgentAddress(agent_id=f"researcher-{run}", session_id=f"researcher-{run}-s1")
    ghost = AgentAddress(agent_id=f"ghost-{run}", session_id=f"ghost-{run}-s1")
    inboxes = [DemoInbox("planner", echo=echo), DemoInbox("researcher", echo=echo, flaky=2)]
    try:
        for box, address in zip(inboxes, (planner, researcher), strict=True):
            route = await adapters.routes.add(address.agent_id, await box.start())
            box.inbox = Inbox(route.secret or "")
        echo(f"routes: {planner.agent_id} and {researcher.agent_id}; {ghost.agent_id} has none")
        asks = [
            ("Summarise the outage report.", [planner]),
            ("List open risks for the launch.", [planner, researcher]),
            ("Draft a reply to the ghost.", [planner, ghost]),
        ]
        jobs = [
            agent_job(
                AgentWork(
                    job_id=f"demo-{run}-job-{index}",
                    session_id=researcher.session_id,
                    command_fact_id=f"demo-{run}-cmd-{index}",
                ),
                Mail(
                    key=f"demo-{run}-{index}",
                    to=researcher,
                    from_=planner,
                    reply_to=reply_to,
                    content=text,
                    created_at=epoch_ms(adapters.clock.now()),
                ),
            )
            for index, (text, reply_to) in enumerate(asks)
        ]
        await adapters.enqueue(jobs)
        echo(f"enqueued {len(asks)} jobs for {researcher.agent_id} in one transaction")
        await _work(adapters, researcher, echo)
        await _drain(adapters, echo, started)
        await _summary(adapters, run, echo)
        echo(f"demo finished in {time.monotonic() - started:.1f} s")
    finally:
        for box in inboxes:
            await box.stop()


async def _work(adapters: Adapters, researcher: AgentAddress, echo: Echo) -> None:
    def handle(payload: AgentJobPayload) -> str:
        assert payload.mail is not None  # noqa: S101 - every demo job carries mail
        return f"Done: {payload.mail.content.lower().rstrip('.')}."

    while (claimed := await adapters.jobs.claim(queues=[researcher.session_id])) is not None:
        content = handle(decode_agent_job(claimed.job))
        keys = await adapters.jobs.settle(
            job_id=claimed.job.job_id,
            claim_token=claimed.claim_token,
            outcome=Outcome.COMPLETED,
            content=content,
        )
        echo(f"researcher settled {claimed.job.job_id}: {len(keys)} replies owed")


async def _drain(adapters: Adapters, echo: Echo, started: float) -> None:
    while await has_pending_delivery(adapters.outbox):
        if time.monotonic() - started > DEMO_DEADLINE_S:
            echo("the demo ran out of time; see `birddog pending`")
            return
        report = await adapters.room.drain_outbox()
        for key, reason in report.dead:
            echo(f"  ☠ dead letter {key}: {reason.value} (an alert would fire here)")
        if report.retried:
            echo(f"  … {len(report.retried)} replies will be retried")
        if not report.more:
            due = await adapters.room.next_wake_at()
            if due is not None:
                wait = (due - adapters.clock.now()).total_seconds()
                await asyncio.sleep(min(max(wait, 0.0), 1.0))


async def _summary(adapters: Adapters, run: str, echo: Echo) -> None:
    echo("")
    echo("receipts:")
    for index in range(3):
        for slot in range(2):
            key = f"outbox:demo-{run}-{index}:reply:{slot}"
            row = await adapters.outbox.get(key)
            if isinstance(row, Receipt):
                echo(f"  {key} -> {row.recipient.agent_id}, {row.attempts} attempt(s)")
    echo("dead letters:")
    for dead in await adapters.outbox.list_dead(limit=50):
        if f"demo-{run}-" in str(dead["key"]):
            echo(f"  {dead['key']} -> {dead['recipient_agent_id']}: {dead['dead_reason']}")
    echo("")
    echo("the demo's own database is dropped now; yours was not touched")
