"""An example handler for ``birddog worker --handler examples.handler:handle``.

A real handler runs an agent turn; this one answers from the mail so the whole path can be
watched end to end.
"""

from __future__ import annotations

from birddog import AgentJobPayload


async def handle(payload: AgentJobPayload) -> str:
    """Answer the mail: the returned text becomes every reply's content."""
    if payload.mail is None:
        return ""
    return f"Received {len(payload.mail.content)} characters from {payload.mail.from_.agent_id}."
