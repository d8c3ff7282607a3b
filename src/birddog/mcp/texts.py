"""How a tool's result reads: its text block and its structured content, one rule for all.

Many hosts hand the model only a result's content blocks, and the MCP specification
says a tool that returns structured content SHOULD also return it serialized in a text
block. So every result has exactly one text block, built the same way:

- its first line says what happened, for a person or a model skimming
  (``answered: KEY``, ``2 unread replies shown; 2 unread in all``, or for a tool error
  the reason, starting with the argument it concerns);
- then, after a blank line, the result's JSON: for a success the structured content
  itself, field for field (the answer's content, each reply listed, the task's sender
  and content, the mail's story); for an error the facts it carries, if any (a failed
  ask's outcome, diagnostic and reply). An error with no facts is its one line.

A success also carries the same JSON as ``structuredContent``, which always validates
against the tool's output schema (:data:`birddog.mcp.schemas.TOOLS`). A tool error
(``isError``) carries no ``structuredContent`` at all: a client that validates
structured content against the output schema (the TypeScript SDK does, errors
included) then has nothing to refuse, and the reason reaches the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call comes to.

    Attributes:
        structured: the structured content (the fields the tool promises); for a tool
            error, the facts its text carries (never sent as structured content).
        summary: the first line of the text block.
        is_error: True for a tool error (the caller must not read it as an answer).
    """

    structured: dict[str, Any]
    summary: str
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text block: the summary line, then (after a blank line) the JSON, if any."""
        return text_block(self.summary, self.structured)

    @property
    def structured_content(self) -> dict[str, Any] | None:
        """What goes out as ``structuredContent``: the fields of a success, nothing for an error."""
        return None if self.is_error else self.structured


def text_block(summary: str, facts: dict[str, Any] | None) -> str:
    """``summary``, then a blank line and ``facts`` as JSON (just ``summary`` when empty).

    Args:
        summary: one line.
        facts: the JSON object to carry (UTF-8 as is, not escaped to ASCII).

    Returns:
        The text block.
    """
    if not facts:
        return summary
    return f"{summary}\n\n{json.dumps(facts, ensure_ascii=False)}"


def plural(count: int, one: str, many: str) -> str:
    """``one`` for a count of one, else ``many``."""
    return one if count == 1 else many
