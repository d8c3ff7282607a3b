"""A tool's arguments, read one by one, and the refusal that names the field and the rule.

:class:`Arguments` checks what a client sent against the tool's declared arguments
(:data:`birddog.mcp.schemas.TOOLS`): an unknown or missing argument, or one of the wrong
type or out of its range, is a :class:`ToolRefused` whose one line starts with the
argument's name. Nothing is written before the arguments are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from birddog.core.errors import InvalidInput
from birddog.core.model import check_text
from birddog.core.text import printable
from birddog.mcp.schemas import MAX_WAIT_S, TOOLS

ERROR_CHARS: Final = 400
"""A tool error's line is cut to this many characters."""


class ToolRefused(Exception):
    """A tool call refused or failed; its line says why (and names the field, if one).

    Attributes:
        line: the one line for the caller, printable and bounded.
        details: facts the error's text carries after its line (an outcome, a key, the
            reply's content); never structured content (see :mod:`birddog.mcp.texts`).
    """

    def __init__(self, line: str, details: Mapping[str, Any] | None = None) -> None:
        self.line = one_line(line)
        self.details = dict(details or {})
        super().__init__(self.line)


def one_line(text: str) -> str:
    """``text`` as one printable line of at most :data:`ERROR_CHARS` characters."""
    one = " ".join(printable(text).split())
    return one if len(one) <= ERROR_CHARS else one[: ERROR_CHARS - 1] + "…"


class Arguments:
    """A tool's arguments, read one by one; each wrong one refused naming it and the rule."""

    def __init__(self, tool: str, given: Mapping[str, Any] | None) -> None:
        allowed = list(TOOLS[tool]["input"]["properties"])
        self.given = dict(given or {})
        unknown = sorted(set(self.given) - set(allowed))
        if unknown:
            names = ", ".join(allowed) or "none"
            raise ToolRefused(f"{unknown[0]}: not an argument of {tool} (it takes: {names})")
        for required in TOOLS[tool]["input"].get("required", []):
            if self.given.get(required) is None:
                raise ToolRefused(f"{required}: required")

    def text(self, name: str, *, default: str | None = None) -> str | None:
        """A string argument (text with no NUL and no lone surrogate)."""
        value = self.given.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ToolRefused(f"{name}: must be a string")
        try:
            check_text(value)
        except ValueError as exc:
            raise ToolRefused(f"{name}: {exc}") from None
        return value

    def required_text(self, name: str) -> str:
        """A required string argument."""
        value = self.text(name)
        if value is None:  # checked in __init__
            raise ToolRefused(f"{name}: required")
        return value

    def seconds(self, name: str, *, default: float) -> float:
        """A number of seconds between 0 and :data:`MAX_WAIT_S`."""
        value = self.given.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolRefused(f"{name}: must be a number of seconds")
        if not 0 <= value <= MAX_WAIT_S:
            raise ToolRefused(f"{name}: must be between 0 and {MAX_WAIT_S:g} seconds")
        return float(value)

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        """An integer between ``low`` and ``high``."""
        value = self.given.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolRefused(f"{name}: must be an integer")
        if not low <= value <= high:
            raise ToolRefused(f"{name}: must be between {low} and {high}")
        return value

    def flag(self, name: str, *, default: bool) -> bool:
        """A boolean argument."""
        value = self.given.get(name, default)
        if not isinstance(value, bool):
            raise ToolRefused(f"{name}: must be true or false")
        return value

    def texts(self, name: str, *, most: int = 1000) -> list[str] | None:
        """A list of strings (None when not given)."""
        value = self.given.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ToolRefused(f"{name}: must be a list of strings")
        if len(value) > most:
            raise ToolRefused(f"{name}: at most {most} items")
        for index, item in enumerate(value):
            try:
                check_text(item)
            except ValueError as exc:
                raise ToolRefused(f"{name}.{index}: {exc}") from None
        return list(value)


def refused(exc: InvalidInput) -> ToolRefused:
    """Bad input as a tool error: the field, then the rule."""
    where = exc.field.removeprefix("mail.").split(".")[0] if exc.field else "input"
    return ToolRefused(f"{where}: {exc}")
