"""Where an unanswered ask stands, in words: queued, running, settled and owed, or delivered.

An ask that times out is still owed, but "no reply yet" alone leaves its asker guessing.
The facts read about it (its job, the workers' and daemons' last beats, the reply's row)
say which of these holds, and :func:`waiting_message` says it one way for the CLI, the
library's :class:`~birddog.core.errors.AskTimedOut` and the MCP ``pending`` result:

- **queued**: no worker has taken the job; the session is named, and whether any worker
  beat recently;
- **running**: a worker has it, for so long;
- **pending** or **dead**: the job settled and its reply to the asker is not delivered yet
  (with its last error), or died (with its reason: replay it once fixed);
- **delivered**: the reply is in the asker's mailbox (then the ask is answered, not timed
  out).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from birddog.core.ages import format_age
from birddog.core.text import printable

__all__ = ["RECENT_BEAT_S", "AskFacts", "AskState", "waiting_message"]

RECENT_BEAT_S = 60.0
"""A worker or daemon that beat within this counts as running (its beats are far denser)."""


class AskState(StrEnum):
    """Where an ask stands."""

    UNKNOWN = "unknown"
    QUEUED = "queued"
    RUNNING = "running"
    PENDING = "pending"
    DEAD = "dead"
    DELIVERED = "delivered"


@dataclass(frozen=True, slots=True)
class AskFacts:
    """What the database says about an ask, read in one statement.

    Attributes:
        now: the database's time when read.
        job_state: ``queued``, ``running`` or ``settled`` (None: no job carries the key).
        queue: the job's queue (the session asked).
        job_created_at: when the job was queued.
        started_at: when its current run began.
        outcome: how it settled.
        workers_recent: running workers that beat within :data:`RECENT_BEAT_S`.
        daemons_recent: running drain daemons that beat within :data:`RECENT_BEAT_S`.
        reply_key: the key of the reply to the asker, once there is one.
        reply_state: ``pending`` or ``dead`` for the reply to the asker still in the outbox.
        reply_attempts: the reply's attempts so far.
        reply_due_at: when the pending reply is next due.
        last_error: the reply's last delivery error.
        dead_reason: why the reply died.
        route_held: the asker's route is held (its replies wait for a release).
        delivered_at: when the reply landed in the asker's mailbox.
    """

    now: datetime
    job_state: str | None = None
    queue: str | None = None
    job_created_at: datetime | None = None
    started_at: datetime | None = None
    outcome: str | None = None
    workers_recent: int = 0
    daemons_recent: int = 0
    reply_key: str | None = None
    reply_state: str | None = None
    reply_attempts: int = 0
    reply_due_at: datetime | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    route_held: bool = False
    delivered_at: datetime | None = None

    @property
    def state(self) -> AskState:
        """Which of the states holds (the reply's, once the job settled)."""
        if self.delivered_at is not None:
            return AskState.DELIVERED
        if self.job_state == "queued":
            return AskState.QUEUED
        if self.job_state == "running":
            return AskState.RUNNING
        if self.reply_state == "dead":
            return AskState.DEAD
        if self.job_state == "settled":
            return AskState.PENDING
        return AskState.UNKNOWN

    def ago(self, when: datetime | None) -> str:
        """How long before :attr:`now` ``when`` was, as people say it (``?`` for nothing)."""
        return format_age(max((self.now - when).total_seconds(), 0.0)) if when else "?"


def _workers(count: int) -> str:
    return f"{count} worker{'' if count == 1 else 's'}"


def _daemons(facts: AskFacts) -> str:
    if facts.daemons_recent:
        return ""
    return (
        f"; no drain daemon beat in the last {format_age(RECENT_BEAT_S)}: start one "
        "(birddog run) to deliver it"
    )


def _where(facts: AskFacts) -> str:
    """What is known, for an ask whose reply is not in the mailbox yet."""
    state = facts.state
    session = printable(facts.queue or "?")
    if state is AskState.QUEUED:
        workers = (
            f"no birddog worker beat in the last {format_age(RECENT_BEAT_S)}: start one for "
            f"it (birddog worker ... --queue {session}), or take it with the MCP tool next_task"
            if not facts.workers_recent
            else f"{_workers(facts.workers_recent)} beat in the last "
            f"{format_age(RECENT_BEAT_S)} and none took it: is one serving {session}?"
        )
        return (
            f"nobody has taken it: its job has been queued for session {session} for "
            f"{facts.ago(facts.job_created_at)}; {workers}"
        )
    if state is AskState.RUNNING:
        return (
            f"a worker has been running its job (session {session}) for "
            f"{facts.ago(facts.started_at)}"
        )
    if state is AskState.DEAD:
        error = f" ({printable(facts.last_error)})" if facts.last_error else ""
        return (
            f"its job settled {facts.outcome or '?'}, but the reply died: "
            f"{printable(facts.dead_reason or '?')}{error}; fix the cause, then replay it "
            f"(birddog replay {printable(facts.reply_key or 'KEY')})"
        )
    if state is AskState.PENDING:
        tries = (
            f" after {facts.reply_attempts} attempt{'' if facts.reply_attempts == 1 else 's'}"
            if facts.reply_attempts
            else ""
        )
        error = f", last error: {printable(facts.last_error)}" if facts.last_error else ""
        held = "; the asker's route is held (birddog route release)" if facts.route_held else ""
        return (
            f"its job settled {facts.outcome or '?'}; the reply is not delivered yet "
            f"(pending{tries}{error}){held}{_daemons(facts)}"
        )
    if state is AskState.DELIVERED:
        return f"the reply was delivered to the mailbox {facts.ago(facts.delivered_at)} ago"
    return "no job carries this key"


def waiting_message(facts: AskFacts | None, *, key: str, asker: str, timeout_s: float) -> str:
    """The message of an ask with no reply in time: what is known, and where it will land.

    Args:
        facts: what the database says (None: it could not be read).
        key: the ask's mail key.
        asker: ``AGENT:SESSION`` of the asker, whose mailbox the reply lands in.
        timeout_s: how long the ask waited.

    Returns:
        One line, printable.
    """
    asker = printable(asker)
    head = f"no reply to {printable(key)!r} within {timeout_s:g} s"
    where = "" if facts is None else f": {_where(facts)}"
    if facts is not None and facts.state is AskState.DEAD:
        return head + where
    if facts is not None and facts.state is AskState.DELIVERED:
        return f"{head}{where}; read it with: birddog inbox {asker}"
    return (
        f"{head}{where}; it is still owed and will land in the mailbox of {asker} "
        f"(birddog inbox {asker})"
    )
