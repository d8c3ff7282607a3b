"""BirdDog's jobs as A2A tasks: ids, states, messages and artifacts (pure, on SDK types).

One A2A task is one ask job. Its id is the mail's key, derived from the caller, the
agent and the ``messageId`` (:func:`task_key`), so a retried ``SendMessage`` finds the same
job (a replay); its context is the session addressed (``AGENT:<contextId>``).

=============================================  ===========================================
job                                            task
=============================================  ===========================================
queued                                         ``TASK_STATE_SUBMITTED``
running                                        ``TASK_STATE_WORKING``
completed                                      ``TASK_STATE_COMPLETED``; the reply content as
                                               the artifact ``reply`` and status message
failed, interrupted, outcome_unknown           ``TASK_STATE_FAILED``; the bounded diagnostic
                                               as the status message
cancelled                                      ``TASK_STATE_CANCELED``; the cancellation
                                               result as the status message
cancelled: no worker claimed it in time        ``TASK_STATE_REJECTED``; BirdDog's reason
=============================================  ===========================================
"""

from __future__ import annotations

import hashlib
from typing import Final

from a2a.types import a2a_pb2 as pb

from birddog.core.ask import ask_job_id
from birddog.core.fanout import empty_reply_text
from birddog.core.jobs import JobState
from birddog.core.mail import AgentAddress, Outcome
from birddog.core.tasks import SentJob, is_bounce

__all__ = [
    "TASK_PREFIX",
    "TERMINAL",
    "context_of_key",
    "job_id_of",
    "said",
    "settled_state",
    "task_key",
    "task_of",
    "task_state",
    "text_of",
]

TASK_PREFIX: Final = "a2a:"
"""Every A2A task id (a mail key) begins so; anything else names no A2A task."""

TERMINAL: Final = frozenset(
    {
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
    }
)
"""The task states that no longer change."""

_FAILED = frozenset({Outcome.FAILED, Outcome.INTERRUPTED, Outcome.OUTCOME_UNKNOWN})


def task_key(caller: AgentAddress, agent_id: str, message_id: str) -> str:
    """The mail key (and task id) of ``caller``'s message ``message_id`` to ``agent_id``.

    The same message from the same caller to the same agent always has the same key, so a
    retried send is a replay; the digest keeps any ``messageId`` within a key's length.

    Args:
        caller: who sends (the token's agent session).
        agent_id: the agent addressed.
        message_id: the A2A ``messageId``.

    Returns:
        ``a2a:<40 hex digits>``.
    """
    material = "\n".join((caller.agent_id, caller.session_id, agent_id, message_id))
    return TASK_PREFIX + hashlib.sha256(material.encode("utf-8")).hexdigest()[:40]


def context_of_key(key: str) -> str:
    """The context id given to a message that names none: derived, so a replay keeps it.

    Args:
        key: the task's key (:func:`task_key`).

    Returns:
        ``ctx-<24 hex digits>``.
    """
    return "ctx-" + hashlib.sha256(("context\n" + key).encode("utf-8")).hexdigest()[:24]


def job_id_of(task_id: str) -> str | None:
    """The job behind a task id (None: the id is no A2A task's)."""
    if not task_id.startswith(TASK_PREFIX):
        return None
    return ask_job_id(task_id)


def text_of(message: pb.Message) -> str | None:
    """The text of a message: its text parts joined by newlines (None: a part is not text)."""
    texts: list[str] = []
    for part in message.parts:
        if part.WhichOneof("content") != "text":
            return None
        texts.append(part.text)
    return "\n".join(texts)


def task_state(job: SentJob) -> pb.TaskState:
    """The A2A state of a job (the table in this module's docstring)."""
    if job.state is JobState.QUEUED:
        return pb.TASK_STATE_SUBMITTED
    if job.state is JobState.RUNNING or job.outcome is None:
        return pb.TASK_STATE_WORKING
    return settled_state(job.outcome, job.result)


def settled_state(outcome: Outcome, result: str | None) -> pb.TaskState:
    """The A2A state of a settlement (its outcome, and its result for a bounce)."""
    if outcome is Outcome.COMPLETED:
        return pb.TASK_STATE_COMPLETED
    if outcome in _FAILED:
        return pb.TASK_STATE_FAILED
    return pb.TASK_STATE_REJECTED if is_bounce(outcome, result) else pb.TASK_STATE_CANCELED


def said(state: pb.TaskState, outcome: Outcome, result: str | None, diagnostic: str | None) -> str:
    """What the agent said at the end: the reply, or why the work did not complete.

    Args:
        state: the task's terminal state.
        outcome: how the job settled.
        result: the settlement's content (a reply's content).
        diagnostic: the bounded diagnostic (masked at settlement: ``bounded_diagnostic``).
    """
    if state == pb.TASK_STATE_FAILED and diagnostic:
        return diagnostic
    return result or empty_reply_text(outcome)


def task_of(job: SentJob, task_id: str, *, history: bool = True) -> pb.Task:
    """The A2A task a job is now.

    Args:
        job: the job, as its sender reads it.
        task_id: the task id (the mail's key).
        history: include the caller's message as the task's history.

    Returns:
        The task: id, context, status (with the agent's message once terminal), the reply
        as the ``reply`` artifact once completed.
    """
    state = task_state(job)
    context_id = job.queue
    status = pb.TaskStatus(state=state)
    status.timestamp.FromDatetime(job.updated_at)
    task = pb.Task(id=task_id, context_id=context_id)
    text = (
        said(state, job.outcome, job.result, job.diagnostic)
        if state in TERMINAL and job.outcome is not None
        else None
    )
    if text is not None:
        status.message.CopyFrom(
            pb.Message(
                message_id=f"{task_id}:reply",
                context_id=context_id,
                task_id=task_id,
                role=pb.ROLE_AGENT,
                parts=[pb.Part(text=text)],
            )
        )
    task.status.CopyFrom(status)
    if state == pb.TASK_STATE_COMPLETED and text is not None:
        task.artifacts.append(
            pb.Artifact(artifact_id="reply", name="reply", parts=[pb.Part(text=text)])
        )
    if history and job.mail is not None:
        task.history.append(
            pb.Message(
                message_id=f"{task_id}:request",
                context_id=context_id,
                task_id=task_id,
                role=pb.ROLE_USER,
                parts=[pb.Part(text=job.mail.content)],
            )
        )
    return task
