"""Batched turns: every job queued for one session, run as one turn of its agent.

A turn of an agent (a process, a context, tokens, seconds) is the expensive unit; a mail
is not. A worker with ``--batch N`` claims up to ``N`` jobs of one session in one claim
and runs them as one :class:`MailTurn`:

- a Python turn handler (marked with :func:`birddog.turn_handler`) gets the whole turn and
  answers ``{job_id: content}`` (or ``{job_id: TurnAnswer}``); a one-mail handler is called
  once per mail inside the turn;
- a command agent gets the turn's mails on stdin as JSON lines (:func:`turn_input`) and
  answers with JSON lines (:func:`parse_answers`): ``job_id``, ``content``, optional
  ``outcome`` (``completed``, the default, or ``failed``) and ``diagnostic``.

Every job settles with its own answer; a mail left unanswered settles ``failed`` with
:data:`UNANSWERED`; output that is not such a line fails the turn's unanswered mail with a
diagnostic saying which line, never a guessed answer.

Pure: the standard library and the core's models only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from birddog.core.jobs import AgentJobPayload
from birddog.core.kinds import Kind
from birddog.core.mail import Outcome

__all__ = [
    "ANSWER_OUTCOMES",
    "UNANSWERED",
    "MailTurn",
    "MalformedAnswers",
    "TurnAnswer",
    "TurnMail",
    "answer_of",
    "parse_answers",
    "turn_input",
]

UNANSWERED: Final = "the turn ended without an answer for this mail"
"""The diagnostic of a mail a turn did not answer (it settles ``failed``)."""

ANSWER_OUTCOMES: Final = frozenset({Outcome.COMPLETED, Outcome.FAILED})
"""The outcomes an answer may give; the others are the worker's to decide."""


@dataclass(frozen=True, slots=True)
class TurnMail:
    """One job of a turn: its id and its decoded payload (the mail, its kind)."""

    job_id: str
    payload: AgentJobPayload

    @property
    def kind(self) -> Kind:
        """What the mail is for."""
        return self.payload.kind


@dataclass(frozen=True, slots=True)
class MailTurn:
    """The jobs of one session that one turn runs, in claim order (priority, then age).

    Attributes:
        session_id: the session (queue) the turn is for.
        mails: its jobs.
    """

    session_id: str
    mails: tuple[TurnMail, ...]

    @property
    def job_ids(self) -> list[str]:
        """The turn's job ids, in order."""
        return [mail.job_id for mail in self.mails]


@dataclass(frozen=True, slots=True)
class TurnAnswer:
    """What a turn answered for one of its jobs.

    Attributes:
        content: the reply's content.
        outcome: ``completed`` or ``failed``.
        diagnostic: why it failed (for ``failed``).
    """

    content: str
    outcome: Outcome = Outcome.COMPLETED
    diagnostic: str | None = None


class MalformedAnswers(ValueError):
    """A command's answer that is not JSON lines of ``job_id`` and ``content``.

    Attributes:
        answered: the answers read before the bad line (they stand).
    """

    def __init__(self, message: str, answered: Mapping[str, TurnAnswer]) -> None:
        super().__init__(message)
        self.answered = dict(answered)


def turn_input(turn: MailTurn) -> bytes:
    """The turn's mails as JSON lines: ``job_id``, ``key``, ``from``, ``kind``, ``content``.

    ``key`` and ``from`` (``AGENT:SESSION``) are null for a job without mail; its content
    is empty.
    """
    lines = []
    for mail in turn.mails:
        sent = mail.payload.mail
        sender = None if sent is None else f"{sent.from_.agent_id}:{sent.from_.session_id}"
        line = {
            "job_id": mail.job_id,
            "key": None if sent is None else sent.key,
            "from": sender,
            "kind": mail.kind.value,
            "content": "" if sent is None else sent.content,
        }
        lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def answer_of(value: object, *, job_id: str) -> TurnAnswer:
    """A turn handler's answer for one job: its content, or a :class:`TurnAnswer`.

    Raises:
        TypeError: neither a string nor a :class:`TurnAnswer`.
    """
    if isinstance(value, TurnAnswer):
        return value
    if isinstance(value, str):
        return TurnAnswer(value)
    raise TypeError(f"the answer for job {job_id!r} is a {type(value).__name__}, not a string")


def parse_answers(text: str, job_ids: Sequence[str]) -> dict[str, TurnAnswer]:
    """Read a command's answers: one JSON object a line; blank lines are skipped.

    Args:
        text: what the command wrote to stdout.
        job_ids: the turn's jobs; an answer for any other job is refused.

    Returns:
        The answer for each job answered (the first answer of a job counts; a second
        one is refused).

    Raises:
        MalformedAnswers: a line that is not a JSON object with a known ``job_id`` and a
            string ``content`` (``outcome`` ``completed`` or ``failed``, ``diagnostic`` a
            string), naming the line; the answers before it are kept on the error.
    """
    known = set(job_ids)
    answers: dict[str, TurnAnswer] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem, answer, job_id = _read_line(line, known, answers)
        if problem is not None:
            raise MalformedAnswers(f"answer line {number} {problem}", answers)
        if answer is not None and job_id is not None:  # what _read_line says of no problem
            answers[job_id] = answer
    return answers


def _read_line(
    line: str, known: set[str], answers: Mapping[str, TurnAnswer]
) -> tuple[str | None, TurnAnswer | None, str | None]:
    """``(problem, None, None)`` or ``(None, answer, job_id)`` for one line of answers."""
    try:
        data = json.loads(line)
    except ValueError:
        return "is not JSON", None, None
    if not isinstance(data, dict):
        return "is not a JSON object", None, None
    extra = set(data) - {"job_id", "content", "outcome", "diagnostic"}
    if extra:
        return f"has unknown fields ({', '.join(sorted(extra))[:80]})", None, None
    job_id, content = data.get("job_id"), data.get("content")
    if not isinstance(job_id, str) or job_id not in known:
        return "names no job of this turn", None, None
    if job_id in answers:
        return f"answers job {job_id!r} a second time", None, None
    if not isinstance(content, str):
        return "has no string content", None, None
    outcome = data.get("outcome", Outcome.COMPLETED.value)
    if outcome not in {str(o) for o in ANSWER_OUTCOMES}:
        return "has an outcome other than completed or failed", None, None
    diagnostic = data.get("diagnostic")
    if diagnostic is not None and not isinstance(diagnostic, str):
        return "has a diagnostic that is not a string", None, None
    return None, TurnAnswer(content, Outcome(outcome), diagnostic), job_id
