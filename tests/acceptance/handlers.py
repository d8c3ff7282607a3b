"""Handlers the acceptance tests hand to ``birddog worker --handler``."""

from __future__ import annotations

from birddog import AgentJobPayload


async def echo(payload: AgentJobPayload) -> str:
    """Answer with the mail's content, so the test can follow it end to end."""
    assert payload.mail is not None
    return f"echo: {payload.mail.content}"


async def boom(payload: AgentJobPayload) -> str:
    """Fail with a credential in the message, which must never reach a reply."""
    raise RuntimeError("upstream said 401 Authorization: Bearer sk-test-123")
