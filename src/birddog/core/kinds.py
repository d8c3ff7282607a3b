"""What a mail is for: its kind, which decides how urgently it needs a turn of its target.

The bus this project follows routes by kind (``spec/agent-bus.txt``, "The drain"):

- ``task`` (the default) and ``escalation`` are interactive: someone waits for the answer;
- ``report`` and ``receipt`` are informational: they tell, and can wait for a batched turn.

The kind lives in the job beside the mail, never in the mail's JSON, so a mail stays
byte-compatible with the TypeScript BirdDog (whose mail, without a kind, is a ``task``).
A job of kind ``task`` carries no kind in its payload at all (its payload is what it was
before kinds existed); any other kind is the payload's ``kind`` key, and the job store keeps
it in the ``birddog.jobs.kind`` column.

Pure: the standard library only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from birddog.core.errors import InvalidInput

__all__ = [
    "DEFAULT_KIND",
    "INFORMATIONAL_KINDS",
    "INTERACTIVE_KINDS",
    "KIND_NAMES",
    "Kind",
    "check_interactive",
    "parse_kind",
]


class Kind(StrEnum):
    """The four kinds of mail."""

    TASK = "task"
    ESCALATION = "escalation"
    REPORT = "report"
    RECEIPT = "receipt"

    @property
    def interactive(self) -> bool:
        """True for ``task`` and ``escalation``: someone waits for the answer."""
        return self in INTERACTIVE_KINDS


DEFAULT_KIND: Final = Kind.TASK
"""A mail sent without a kind (and every mail of the TypeScript BirdDog) is a task."""

INTERACTIVE_KINDS: Final = frozenset({Kind.TASK, Kind.ESCALATION})
"""Kinds that want a turn soon: a live session first, else a worker's batched turn."""

INFORMATIONAL_KINDS: Final = frozenset({Kind.REPORT, Kind.RECEIPT})
"""Kinds that tell and can wait (for a live session, or a batched turn)."""

KIND_NAMES: Final = ", ".join(kind.value for kind in Kind)
"""The kinds as an error message lists them: ``task, escalation, report, receipt``."""


def parse_kind(value: object, *, field: str = "kind") -> Kind:
    """The kind ``value`` names, or a one-line error listing the four.

    Args:
        value: a kind's name (``task``, ``escalation``, ``report``, ``receipt``), or a
            :class:`Kind`; ``None`` is the default kind.
        field: the field to name in the error.

    Returns:
        The kind.

    Raises:
        InvalidInput: ``value`` names no kind.
    """
    if value is None:
        return DEFAULT_KIND
    if isinstance(value, Kind):
        return value
    if isinstance(value, str):
        try:
            return Kind(value)
        except ValueError:
            pass
    shown = repr(value)[:40] if isinstance(value, str) else type(value).__name__
    raise InvalidInput(f"{field} must be one of {KIND_NAMES}, not {shown}", field=field)


def check_interactive(kind: Kind, *, field: str = "kind") -> Kind:
    """Refuse an informational kind where an answer is awaited (``ask``).

    Args:
        kind: the kind asked for.
        field: the field to name in the error.

    Returns:
        ``kind``, when it is interactive.

    Raises:
        InvalidInput: ``kind`` is ``report`` or ``receipt``.
    """
    if not kind.interactive:
        raise InvalidInput(
            f"an ask waits for an answer, so its kind is task or escalation, not {kind.value}",
            field=field,
        )
    return kind
