"""The agent the ``ask`` benchmark asks: ``birddog worker --handler bench.ask_agent:answer``."""

from __future__ import annotations

from birddog import AgentJobPayload


async def answer(payload: AgentJobPayload) -> str:
    """Answer at once with the question's own text (what ``--command cat`` answers too)."""
    return payload.mail.content if payload.mail is not None else ""
