"""Live sessions: an agent session a running process serves now, offered its mail first.

A process acting as an agent session (an MCP server ``--as`` it, each authenticated
caller of an MCP HTTP server while its connection lives, ``birddog worker --live``)
announces it with a heartbeat every :data:`LIVE_BEAT_S`; each beat keeps it live for
:data:`LIVE_TTL_S` more (bounded by the database to :data:`LIVE_TTL_MIN_S` ..
:data:`LIVE_TTL_MAX_S`), so a process that dies stops counting within seconds, and a
clean exit leaves at once. While a session is live, a worker's claim leaves its queued
jobs to the live session until each has waited the grace of its agent's route
(``live_grace_s``, :data:`DEFAULT_LIVE_GRACE_S` by default); the live session's own
claims are never held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from birddog.core.errors import InvalidInput

__all__ = [
    "DEFAULT_LIVE_GRACE_S",
    "DIGEST_KINDS",
    "LIVE_BEAT_S",
    "LIVE_CLAIMERS",
    "LIVE_GRACE_MAX_S",
    "LIVE_TTL_MAX_S",
    "LIVE_TTL_MIN_S",
    "LIVE_TTL_S",
    "MAX_ID_CHARS",
    "LiveSession",
    "check_grace",
    "check_live_ids",
    "clamp_ttl",
    "turn_how",
    "turn_ran_by",
]

LIVE_TTL_S: Final = 5.0
"""How long one beat keeps a live session live."""

LIVE_BEAT_S: Final = 1.5
"""How often a live process beats (a few beats per TTL: one lost beat is no gap)."""

LIVE_TTL_MIN_S: Final = 1.0
"""The shortest TTL the database grants."""

LIVE_TTL_MAX_S: Final = 15.0
"""The longest TTL the database grants: a process that dies stops counting by then."""

DEFAULT_LIVE_GRACE_S: Final = 30.0
"""How long a job waits for its live session before a worker may take it (per route)."""

LIVE_GRACE_MAX_S: Final = 86400.0
"""The longest grace a route may give its live sessions."""

LIVE_CLAIMERS: Final = ("mcp:", "live:")
"""How the claimer ids of live sessions' processes begin: an MCP server's (its ``--as``
session, its HTTP callers'), a ``worker --live``'s. Their turns ran ``live``."""

DIGEST_KINDS: Final = frozenset({"report", "receipt"})
"""The kinds a worker takes only at their digest (``birddog.core.kinds``' informational)."""

MAX_ID_CHARS: Final = 256
"""The longest agent id, session id or holder a live session has (the contract's ids)."""


def clamp_ttl(ttl_s: float) -> float:
    """The TTL the database grants for ``ttl_s`` (what ``birddog.live_heartbeat`` does)."""
    return min(max(ttl_s, LIVE_TTL_MIN_S), LIVE_TTL_MAX_S)


def turn_ran_by(claimer: str, kind: str | None = None) -> str:
    """How a turn its claimer took ran: ``live``, ``digest`` or ``worker``.

    ``live`` for a live session's process; ``digest`` for any other claimer's turn whose
    first mail is informational (``report``, ``receipt``: a worker takes it only once its
    digest is due, :mod:`birddog.core.digests`); ``worker`` otherwise. ``birddog status``,
    the ``jobs_turns_since`` query and the worker's metrics all count a turn's ``how``
    this way.

    Args:
        claimer: the claimer id the turn's claim carried.
        kind: the kind of the turn's first mail (None: not known, a worker's).
    """
    return turn_how("live" if claimer.startswith(LIVE_CLAIMERS) else "worker", kind)


def turn_how(runner: str, kind: str | None) -> str:
    """How a turn ran, from how its runner runs (``live``, ``worker``) and its first mail's kind.

    A worker's turn of informational mail ran for its ``digest``; any other is the runner's.
    """
    return "digest" if runner == "worker" and kind in DIGEST_KINDS else runner


def check_grace(grace_s: float) -> float:
    """``grace_s`` if a route may have it as its ``live_grace_s``.

    Raises:
        InvalidInput: not a finite time from 0 to a day.
    """
    if not (math.isfinite(grace_s) and 0 <= grace_s <= LIVE_GRACE_MAX_S):
        raise InvalidInput("--live-grace must be a time from 0 to 24h", field="live_grace_s")
    return grace_s


def check_live_ids(agent_id: str, session: str, holder: str) -> None:
    """Refuse what no live session may be named: each id 1 to 256 characters.

    Raises:
        InvalidInput: naming the field.
    """
    for field, value in (("agentId", agent_id), ("sessionId", session), ("holder", holder)):
        if not 1 <= len(value) <= MAX_ID_CHARS:
            raise InvalidInput(
                f"a live session's {field} must be 1 to {MAX_ID_CHARS} characters", field=field
            )
    if "\x1f" in agent_id:
        raise InvalidInput("an agent id holds no unit separator (U+001F)", field="agentId")


@dataclass(frozen=True, slots=True)
class LiveSession:
    """One holder's live session of an agent session (a row of ``birddog.live_sessions``).

    Attributes:
        agent_id: the agent.
        session: the agent's session id (its jobs' queue).
        holder: who serves it: the claimer id its own claims carry.
        started_at: since when it is live (its first beat after none).
        expires_at: when it stops counting unless it beats again.
    """

    agent_id: str
    session: str
    holder: str
    started_at: datetime
    expires_at: datetime
