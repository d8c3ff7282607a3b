"""Handlers the acceptance tests hand to ``birddog worker --handler``."""

from __future__ import annotations

import asyncio
import os
import time

from birddog import AgentJobPayload


async def echo(payload: AgentJobPayload) -> str:
    """Answer with the mail's content, so the test can follow it end to end."""
    assert payload.mail is not None
    return f"echo: {payload.mail.content}"


async def serving(payload: AgentJobPayload) -> str:
    """Answer naming the agent this worker was started for (``$SERVING_AGENT``)."""
    del payload
    return f"answered by {os.environ['SERVING_AGENT']}"


async def boom(payload: AgentJobPayload) -> str:
    """Fail with a credential in the message, which must never reach a reply."""
    raise RuntimeError("upstream said 401 Authorization: Bearer sk-test-123")


async def turn(payload: AgentJobPayload) -> str:
    """Take a moment, and record when this turn began and ended in ``$TURNS_LOG``."""
    began = time.time()
    await asyncio.sleep(0.3)  # the turn's work; long enough that overlapping turns would show
    ended = time.time()
    with open(os.environ["TURNS_LOG"], "a", encoding="utf-8") as log:  # noqa: ASYNC230
        log.write(f"{payload.session_id}\t{payload.command_fact_id}\t{began}\t{ended}\n")
    return "turn taken"


UNSTORABLE: dict[str, object] = {
    "cmd-nul": "nul \x00 inside",
    "cmd-surrogate": "lone \ud800",
    "cmd-huge": "x" * 5000,
    "cmd-number": 42,
}
"""What :func:`unstorable` returns, by the job's command id; anything else is text."""


async def unstorable(payload: AgentJobPayload) -> str:
    """Return a result that cannot be stored, chosen by the command id."""
    return UNSTORABLE.get(payload.command_fact_id, "fine")  # type: ignore[return-value]


async def instant(payload: AgentJobPayload) -> str:
    """Answer at once: the job's own work costs nothing, so the worker's loop is what is timed."""
    return "done"
