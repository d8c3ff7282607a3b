"""A transcript of MCP calls, as docs/agents.md writes one, played against real servers.

The transcript is a ``text`` block of lines like these (``…`` marks text left out)::

    alice initialize → instructions: You are alice:s-alice on BirdDog, …
    alice → ask {"to": "bob:s-bob", "content": "Can you review PR 42 today?", "wait_s": 30}
      ← progress 0/30: asking bob:s-bob as key ask-20261201T210206Z-207b2b9d: …
    bob   → next_task {"wait_s": 30}
      ← task ask:ask-20261201T210206Z-207b2b9d taken: from alice:s-alice, …
    alice ← answered: ask-20261201T210206Z-207b2b9d (completed)

A call's arguments are JSON (wrapped over lines as needed). The ``←`` under it is the
result's text block (``(is_error)`` first for a tool error, ``JSON-RPC error CODE:`` for a
protocol error); one that shows the first progress notification leaves the call running,
and ``WHO ←`` later gives its result; a line indented eight spaces in parentheses is
a stage note (``(waiting...)``). :func:`play` makes each call and holds each result
to the transcript: whitespace counts as one space, ``…`` stands for any text, and each key
the transcript names (``ask-…``, ``mail-…``) stands for the one the server made in its
place, the same one wherever it appears again.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tests.support.mcp import checked
from tests.support.waiting import eventually

__all__ = ["Step", "play", "steps_of"]

KEY = re.compile(r"(?:ask|mail)-\d{8}T\d{6}Z-[0-9a-f]{8}")
"""A fresh key as the server makes one."""

_CALL = re.compile(r"^(\w+)\s+→\s+(\w+)\s+(\{.*)$")
_INITIALIZE = re.compile(r"^(\w+) initialize → instructions: (.*)$")
_LATER = re.compile(r"^(\w+)\s+← (.*)$")
_RESULT = re.compile(r"^\s+← (.*)$")
_ERROR = "(is_error) "
_PROTOCOL = "JSON-RPC error "
_PROGRESS = "progress "
_NOTE = " " * 8 + "("


@dataclass
class Step:
    """One line of the transcript that the player acts on.

    Attributes:
        who: the agent whose session acts.
        tool: the tool called; ``initialize`` for the instructions, ``result`` for the
            result of ``who``'s running call.
        args: the call's arguments (with the transcript's keys).
        expected: the result's text block as written (lines joined by newlines).
    """

    who: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    expected: list[str] = field(default_factory=list)


def steps_of(block: str) -> list[Step]:
    """The steps of a transcript block, in order."""
    steps: list[Step] = []
    lines = block.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if (found := _INITIALIZE.match(line)) is not None:
            steps.append(Step(found.group(1), "initialize", expected=[found.group(2)]))
        elif (found := _CALL.match(line)) is not None:
            text = found.group(3)
            while not _parses(text):
                text += " " + lines[index].strip()
                index += 1
            steps.append(Step(found.group(1), found.group(2), json.loads(text)))
        elif (found := _LATER.match(line)) is not None:
            steps.append(Step(found.group(1), "result", expected=[found.group(2)]))
        elif (found := _RESULT.match(line)) is not None:
            steps[-1].expected.append(found.group(1))
        elif _continues(line) and steps and steps[-1].expected:
            steps[-1].expected.append(line.strip())
    return steps


def _continues(line: str) -> bool:
    """Whether ``line`` goes on the result above it (indented or blank, not a stage note).

    A stage note (``(waiting...)``, what happens meanwhile) is indented eight spaces and
    in parentheses.
    """
    indented = line.startswith((" ", "\t")) or not line.strip()
    return indented and not line.startswith(_NOTE)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class _Keys:
    """The transcript's keys and the server's keys in their place."""

    def __init__(self) -> None:
        self.real: dict[str, str] = {}

    def into(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` with every bound transcript key replaced by the server's."""
        text = json.dumps(args)
        for written, real in self.real.items():
            text = text.replace(written, real)
        loaded: dict[str, Any] = json.loads(text)
        return loaded

    def match(self, expected: str, seen: str, what: str) -> None:
        """Hold ``seen`` to ``expected`` (spaces, ``…`` and keys as the module says)."""
        pattern, unbound = self._pattern(_collapsed(expected))
        found = re.fullmatch(pattern, _collapsed(seen), re.DOTALL)
        assert found is not None, f"{what}:\n  written: {expected}\n  seen:    {seen}"
        for group, written in unbound.items():
            self.real[written] = found.group(group)

    def _pattern(self, expected: str) -> tuple[str, dict[str, str]]:
        unbound: dict[str, str] = {}
        parts: list[str] = []
        at = 0
        for found in KEY.finditer(expected):
            parts.append(_literal(expected[at : found.start()]))
            written = found.group(0)
            if written in self.real:
                parts.append(re.escape(self.real[written]))
            elif written in unbound.values():
                group = next(name for name, key in unbound.items() if key == written)
                parts.append(f"(?P={group})")
            else:
                group = f"k{len(unbound)}"
                unbound[group] = written
                parts.append(f"(?P<{group}>{KEY.pattern})")
            at = found.end()
        parts.append(_literal(expected[at:]))
        return "".join(parts), unbound


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def _literal(text: str) -> str:
    """``text`` as a pattern: itself, with ``…`` for any text."""
    return ".*?".join(re.escape(part) for part in text.split("…"))


@dataclass
class _Running:
    """A call left running (its first progress shown): its task and what it heard."""

    task: asyncio.Task[str]
    heard: list[str]


async def play(sessions: Mapping[str, ClientSession], steps: list[Step]) -> None:
    """Make every call of ``steps`` and hold every result to the transcript.

    Args:
        sessions: each agent's initialized client session, by the transcript's name.
        steps: the transcript's steps (:func:`steps_of`).
    """
    keys = _Keys()
    running: dict[str, _Running] = {}
    for number, step in enumerate(steps):
        what = f"step {number}: {step.who} {step.tool}"
        expected = "\n".join(step.expected).strip()
        session = sessions[step.who]
        if step.tool == "initialize":
            keys.match(expected, session.instructions or "", what)
        elif step.tool == "result":
            keys.match(expected, await running.pop(step.who).task, what)
        elif expected.startswith(_PROGRESS):
            heard: list[str] = []
            task = asyncio.create_task(_result(session, step.tool, keys.into(step.args), heard))
            running[step.who] = _Running(task, heard)
            first = await eventually(_first_of(heard), f"{what}: its first progress")
            keys.match(expected, first[0], what)
        else:
            keys.match(expected, await _result(session, step.tool, keys.into(step.args)), what)
    assert not running, f"calls left running: {sorted(running)}"


def _first_of(heard: list[str]) -> Callable[[], list[str]]:
    """A probe of the first progress notification a running call heard."""
    return lambda: heard[:1]


async def _result(
    session: ClientSession, tool: str, args: dict[str, Any], heard: list[str] | None = None
) -> str:
    """The text a call comes to, as the transcript writes it."""

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        if heard is not None:
            heard.append(f"progress {progress:g}/{total or 0:g}: {message}")

    try:
        result = await session.call_tool(tool, args, progress_callback=progressed)
    except MCPError as error:
        return f"{_PROTOCOL}{error.code}: {error.message}"
    _facts, text, is_error = checked(tool, result)
    return _ERROR + text if is_error else text
