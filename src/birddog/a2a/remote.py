"""``worker --a2a URL``: a remote A2A agent answers BirdDog mail, through a2a-sdk's client.

:func:`remote_agent` is a worker handler. For each job it sends the mail's content to the
remote agent (``SendMessage`` with ``returnImmediately``; the ``messageId`` is the mail's
key, so a job that runs again after a crash sends the same message; the ``contextId`` is
the session), then polls ``GetTask`` with backoff until the task ends, and settles the job
with the outcome:

- ``COMPLETED``: completed, with the task's text (its artifacts', else its status
  message's);
- ``FAILED`` / ``REJECTED`` (and ``INPUT_REQUIRED`` / ``AUTH_REQUIRED``, which a mail
  cannot answer): failed, the remote message as the diagnostic (bounded and masked);
- ``CANCELED``: cancelled.

When the handler is cut short (the handler timeout, a recorded cancellation, the worker
stopping), the remote task is cancelled with ``CancelTask``: kill what you spawn, across a
network. Remote text is untrusted: it is cut to a bound, and escaped wherever BirdDog
shows it (diagnostics are one masked line).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Final

import httpx
import structlog
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError

from birddog.core.errors import InvalidInput, WorkCancelled
from birddog.core.jobs import AgentJobPayload
from birddog.core.text import printable

log = structlog.get_logger("birddog.a2a.remote")

__all__ = ["RemoteTaskFailed", "remote_agent"]

POLL_FIRST_S: Final = 0.2
POLL_MOST_S: Final = 5.0
"""GetTask is polled after 200 ms, the pause doubling up to 5 s."""

REQUEST_TIMEOUT_S: Final = 30.0
"""One request to the remote agent (send, get, cancel) must answer in this."""

CANCEL_TIMEOUT_S: Final = 10.0
"""Cancelling the remote task when the handler is cut short waits at most this."""

MAX_TEXT_CHARS: Final = 200_000
"""The most characters of remote text taken as a reply (the rest is cut, visibly)."""

_FAILED: Final = frozenset(
    {
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_REJECTED,
        pb.TASK_STATE_INPUT_REQUIRED,
        pb.TASK_STATE_AUTH_REQUIRED,
    }
)
_ENDED: Final = frozenset({pb.TASK_STATE_COMPLETED, pb.TASK_STATE_CANCELED, *_FAILED})


class RemoteTaskFailed(Exception):
    """The remote agent's task ended FAILED or REJECTED (or asked for input or auth).

    Its message is the remote text, which the worker masks and bounds as the diagnostic.
    """


def remote_agent(
    url: str, *, token: str | None = None, binding: str | None = None
) -> Callable[[AgentJobPayload], Awaitable[str]]:
    """A worker handler that forwards each job's mail to the A2A agent at ``url``.

    Args:
        url: the remote agent's base URL (its card at ``.well-known/agent-card.json``).
        token: a bearer token for the remote agent (None: no ``Authorization``).
        binding: prefer this binding (``JSONRPC`` or ``HTTP+JSON``; None: the card's).

    Returns:
        The handler (see the module docstring).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    cards: list[pb.AgentCard] = []
    lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def connected() -> AsyncIterator[Client]:
        # One HTTP client per job, closed with it: nothing outlives the turn that made it.
        # The card is read once, at the first job, and kept.
        async with httpx.AsyncClient(headers=headers, timeout=REQUEST_TIMEOUT_S) as http:
            config = ClientConfig(
                streaming=False,
                polling=True,
                httpx_client=http,
                supported_protocol_bindings=[binding] if binding else [],
            )
            factory = ClientFactory(config)
            async with lock:
                if not cards:
                    cards.append(await A2ACardResolver(http, url).get_agent_card())
            client = factory.create(cards[0])
            try:
                yield client
            finally:
                await client.close()

    async def handle(payload: AgentJobPayload) -> str:
        mail = payload.mail
        if mail is None:
            raise InvalidInput("the job carries no mail to forward", field="mail")
        message = pb.Message(
            message_id=mail.key,
            context_id=payload.session_id,
            role=pb.ROLE_USER,
            parts=[pb.Part(text=mail.content)],
        )
        request = pb.SendMessageRequest(
            message=message, configuration=pb.SendMessageConfiguration(return_immediately=True)
        )
        async with connected() as client:
            task = await _sent_task(client, request)
            try:
                pause = POLL_FIRST_S
                while task.status.state not in _ENDED:
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, POLL_MOST_S)
                    task = await client.get_task(pb.GetTaskRequest(id=task.id, history_length=0))
            except asyncio.CancelledError:
                # The handler was cut short: the remote task must not run on unobserved.
                await _cancel_remote(client, task.id)
                raise
        return _outcome(task)

    return handle


async def _sent_task(client: Client, request: pb.SendMessageRequest) -> pb.Task:
    """Send, and return the task the agent made (a bare message is a completed task)."""
    async for answer in client.send_message(request):
        if answer.HasField("task"):
            return answer.task
        if answer.HasField("message"):
            done = pb.Task(id="", status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED))
            done.status.message.CopyFrom(answer.message)
            return done
    raise RemoteTaskFailed("the remote agent answered the message with neither task nor message")


async def _cancel_remote(client: Client, task_id: str) -> None:
    """Cancel the remote task, bounded; a failure is logged (the task is then the remote's)."""
    if not task_id:
        return
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT_S):
            await asyncio.shield(client.cancel_task(pb.CancelTaskRequest(id=task_id)))
        log.info("a2a_remote_task_cancelled", task_id=printable(task_id)[:128])
    except (TimeoutError, A2AError, A2AClientError, httpx.HTTPError) as exc:
        log.warning(
            "a2a_remote_cancel_failed", task_id=printable(task_id)[:128], error=type(exc).__name__
        )


def _outcome(task: pb.Task) -> str:
    """The reply for a task that ended, or the exception its outcome is."""
    state = task.status.state
    said = _text(task.status.message.parts)
    if state == pb.TASK_STATE_COMPLETED:
        texts = [_text(artifact.parts) for artifact in task.artifacts]
        return _bounded("\n".join(text for text in texts if text) or said)
    if state == pb.TASK_STATE_CANCELED:
        raise WorkCancelled(_bounded(said))
    name = pb.TaskState.Name(state).removeprefix("TASK_STATE_")
    raise RemoteTaskFailed(f"the remote agent's task ended {name}: {said or '(no message)'}")


def _text(parts: Iterable[pb.Part]) -> str:
    return "\n".join(part.text for part in parts if part.WhichOneof("content") == "text")


def _bounded(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + f"\n[cut by BirdDog: the remote text had {len(text)} characters]"
