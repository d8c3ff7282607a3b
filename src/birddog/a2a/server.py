"""``birddog a2a``: every agent with a route answers A2A, on ``a2a-sdk``'s server.

The SDK carries the protocol: its JSON-RPC and HTTP+JSON (REST) routes parse, validate
and answer every request, and call a :class:`~a2a.server.request_handlers.RequestHandler`.
BirdDog is behind that interface (:class:`MailRoomRequestHandler`), making the same calls
the command line makes: the mail service's ``send`` for ``SendMessage`` (a mail the
database cannot take now waits in the local spool, its task ``submitted``), the job
store's cancel for ``CancelTask``, and reads of the ask jobs for ``GetTask`` and
``ListTasks``.

Each agent ``AGENT`` with a route has its base URL ``/a2a/AGENT/`` (both bindings) and its
Agent Card at ``/a2a/AGENT/.well-known/agent-card.json``. The card is public; every other
request carries a per-agent bearer token (``birddog agent add`` / ``birddog agent
token``): the agent session it names is the mail's ``from`` and its ``replyTo``. The gate
(:mod:`birddog.a2a.gate`) refuses a request without a valid token, over its rate or with
a body over the cap before the SDK sees it; :mod:`birddog.a2a.app` mounts it all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import structlog
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import (
    DEFAULT_LIST_TASKS_PAGE_SIZE,
    MAX_LIST_TASKS_PAGE_SIZE,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from birddog.a2a.configs import PushConfigs, config_shown, unavailable
from birddog.a2a.gate import (
    CALLER_SCOPE_KEY,
)
from birddog.a2a.push import DEFAULT_CONFIG_ID
from birddog.a2a.tasks import (
    TERMINAL,
    context_of_key,
    job_id_of,
    task_key,
    task_of,
    task_state,
)
from birddog.core.ask import address_text
from birddog.core.egress import EgressPolicy
from birddog.core.errors import (
    InvalidInput,
    JobConflict,
    JobNotFound,
    SpoolFailed,
    SpoolFull,
    StoreUnavailable,
)
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.core.mail import AgentAddress
from birddog.core.push import is_push_agent, push_agent_id
from birddog.core.tasks import SentJob, spooled_job
from birddog.core.text import printable
from birddog.ports import TokenBook
from birddog.service.timeouts import Deadline

if TYPE_CHECKING:
    from birddog.ports import PushRoutes, SentJobs
    from birddog.service.mail import MailService

log = structlog.get_logger("birddog.a2a")

__all__ = [
    "AGENT_STATE_KEY",
    "DEFAULT_PORT",
    "DEFAULT_WAIT_S",
    "MAX_PARTS",
    "A2AServices",
    "MailRoomRequestHandler",
]

DEFAULT_PORT: Final = 9468
DEFAULT_WAIT_S: Final = 60.0
"""A blocking ``SendMessage`` waits this long for a terminal state, then returns the task."""

MAX_PARTS: Final = 64
"""The most parts a message may have (their text is joined into one mail)."""

CANCEL_WAIT_S: Final = 10.0
"""``CancelTask`` of a running task waits this long for its worker to stop it."""

STEP_TIMEOUT_S: Final = 10.0
"""The longest any step waits for a database connection."""

POLL_FIRST_S: Final = 0.05
POLL_MOST_S: Final = 0.5
"""A waiting request reads its job again after 50 ms, doubling up to every 500 ms."""

PUBLIC_EGRESS: Final = EgressPolicy().for_pushes()
"""The push egress policy when none is given: public addresses only."""

AGENT_STATE_KEY: Final = "birddog_agent"
"""Where the call context's state holds the agent addressed (the caller is under
:data:`~birddog.a2a.gate.CALLER_SCOPE_KEY`)."""


@dataclass(frozen=True, slots=True)
class A2AServices:
    """What the A2A endpoint calls: the same services as the command line.

    Attributes:
        sender: the mail service: sends the mail of each ``SendMessage`` (spooling it
            when the database cannot take it now).
        sent: reads the ask jobs back (``GetTask``, ``ListTasks``) and cancels a
            caller's own (``CancelTask``: the job store's cancel-wins).
        routes: which agents exist (an agent with a route answers), and the push
            configs' routes (kind ``a2a``): no other route's URL or secret.
        tokens: who each bearer token is.
        wait_s: how long a blocking ``SendMessage`` waits for a terminal state.
        max_content_bytes: the largest message text taken (``BIRDDOG_MAX_CONTENT_BYTES``).
        push_egress: where push URLs may point (``BIRDDOG_PUSH_EGRESS``; public only
            by default), checked on the names' addresses when a config is set.
    """

    sender: MailService
    sent: SentJobs
    routes: PushRoutes
    tokens: TokenBook
    wait_s: float = DEFAULT_WAIT_S
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    push_egress: EgressPolicy = PUBLIC_EGRESS


class _Tasks:
    """The jobs behind a request's tasks: who asks, which jobs are theirs, each until it ends.

    Args:
        services: the adapters (the sent jobs, the routes).
    """

    def __init__(self, services: A2AServices) -> None:
        self.services = services

    async def who(self, context: ServerCallContext) -> tuple[AgentAddress, str]:
        """The caller (from its token) and the agent addressed (which must have a route)."""
        caller = context.state.get(CALLER_SCOPE_KEY)
        agent_id = context.state.get(AGENT_STATE_KEY)
        if not isinstance(caller, AgentAddress) or not isinstance(agent_id, str):
            # The middleware refuses such requests; this is its second line.
            raise InvalidParamsError("no caller: the request carries no valid bearer token")
        try:
            known = await self.services.routes.known(agent_id)
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        if not known or is_push_agent(agent_id):
            raise TaskNotFoundError(f"no agent {printable(agent_id)[:64]!r} answers here")
        return caller, agent_id

    async def own_job(self, task_id: str, caller: AgentAddress, agent_id: str) -> SentJob:
        """The job of a task the caller sent to this agent (anyone else's is not found)."""
        job_id = job_id_of(task_id)
        if job_id is None:
            raise TaskNotFoundError()
        try:
            job = await self.services.sent.get(job_id, timeout_s=STEP_TIMEOUT_S)
        except StoreUnavailable as exc:
            job = await self.spooled(job_id, task_id)
            if job is None:
                raise unavailable(exc) from None
        job = job or await self.spooled(job_id, task_id)
        if (
            job is None
            or job.mail is None
            or job.mail.key != task_id
            or job.mail.from_.agent_id != caller.agent_id
            or job.mail.to.agent_id != agent_id
        ):
            raise TaskNotFoundError()
        return job

    async def spooled(self, job_id: str, key: str) -> SentJob | None:
        """The job of a mail still in the local spool, queued as its sender sees it; or None."""
        mail = await self.services.sender.spooled(key)
        return None if mail is None else spooled_job(job_id, mail)

    async def until_terminal(self, job_id: str, wait_s: float) -> SentJob:
        """The job once its task is terminal, or as it stands after ``wait_s``."""
        deadline = Deadline(wait_s)
        pause = POLL_FIRST_S
        while True:
            try:
                job = await self.services.sent.get(job_id, timeout_s=STEP_TIMEOUT_S)
            except StoreUnavailable as exc:
                raise unavailable(exc) from None
            if job is None:
                raise TaskNotFoundError()
            if task_state(job) in TERMINAL or deadline.passed:
                return job
            await asyncio.sleep(min(pause, deadline.left()))
            pause = min(pause * 2, POLL_MOST_S)

    async def replayed(
        self,
        key: str,
        to: AgentAddress,
        caller: AgentAddress,
        content: str,
        reply_to: list[AgentAddress],
    ) -> str:
        """The job of an earlier send of this message, or InvalidParams if it was another."""
        job_id = job_id_of(key)
        try:
            job = (
                None
                if job_id is None
                else await self.services.sent.get(job_id, timeout_s=STEP_TIMEOUT_S)
            )
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        mail = None if job is None else job.mail
        if (
            job is None
            or mail is None
            or (mail.to, mail.from_, mail.content) != (to, caller, content)
            or any(address not in mail.reply_to for address in reply_to)
        ):
            raise InvalidParamsError(
                "messageId was sent before with another message; use a new messageId"
            )
        return job.job_id


class MailRoomRequestHandler(RequestHandler):
    """The A2A methods as mail-room calls, for the caller and agent of each request.

    Args:
        services: the adapters it calls.
    """

    def __init__(self, services: A2AServices) -> None:
        self.services = services
        self._tasks = _Tasks(services)
        self._push = PushConfigs(services.routes, services.push_egress)

    # ---- messages -----------------------------------------------------------------

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task | pb.Message:
        """``SendMessage``: a mail to ``AGENT:<contextId>``, run as an ask job.

        Returns:
            The task at once with ``returnImmediately``, else once terminal or after
            :attr:`A2AServices.wait_s`, as it stands then.
        """
        caller, agent_id = await self._tasks.who(context)
        message = params.message
        if message.task_id:
            raise InvalidParamsError(
                "a task takes one message: send the next one as a new message in its context"
            )
        content = _text_or_refuse(message, self.services.max_content_bytes)
        key = task_key(caller, agent_id, message.message_id)
        context_id = message.context_id or context_of_key(key)
        try:
            to = AgentAddress(agent_id=agent_id, session_id=context_id)
        except InvalidInput as exc:
            raise InvalidParamsError(f"contextId: {printable(str(exc))[:200]}") from None
        reply_to = [caller]
        if params.configuration.HasField("task_push_notification_config"):
            push = await self._push.stored(params.configuration.task_push_notification_config, key)
            reply_to.append(push.address(context_id))
        spooled: SentJob | None = None
        try:
            sent = await self.services.sender.send(
                to=to,
                from_=caller,
                content=content,
                key=key,
                reply_to=reply_to,
                timeout_s=STEP_TIMEOUT_S,
            )
            job_id, replay = sent.job_id, sent.replay
            if sent.spooled:
                spooled = await self._tasks.spooled(job_id, key)
        except JobConflict:
            # A push config set since makes the stored replyTo longer: still the same mail.
            job_id, replay = await self._tasks.replayed(key, to, caller, content, reply_to), True
        except InvalidInput as exc:
            raise InvalidParamsError(printable(str(exc))[:300]) from None
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        except (SpoolFailed, SpoolFull) as exc:
            log.error("a2a_spool_failed", error=type(exc).__name__)  # noqa: TRY400 - said, not a bug
            raise InternalError(
                "the mail room's database is unavailable and its local spool cannot take "
                "the message; try again"
            ) from None
        log.info(
            "a2a_message_sent",
            agent_id=printable(agent_id),
            caller=address_text(caller),
            key=key,
            replay=replay,
            push=len(reply_to) > 1,
            spooled=spooled is not None,
        )
        if spooled is not None:
            # Nothing runs it before the spool is forwarded: the task stands submitted.
            task = task_of(spooled, key)
            task.status.message.CopyFrom(
                _agent_says(
                    task,
                    "The mail room's database is unreachable: the message is kept in "
                    "BirdDog's local spool and is sent when the database is back. "
                    "Ask again with GetTask.",
                )
            )
            return task
        blocking = not params.configuration.return_immediately
        job = await self._tasks.until_terminal(job_id, self.services.wait_s if blocking else 0.0)
        task = task_of(job, key)
        if blocking and task.status.state not in TERMINAL:
            task.status.message.CopyFrom(_still_open(task, agent_id, self.services.wait_s))
        return task

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Not offered (the card says ``streaming: false``): send, then get or push."""
        raise UnsupportedOperationError("streaming is not offered: use SendMessage and GetTask")
        yield  # an async generator, as the interface has it

    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Not offered (no streaming)."""
        raise UnsupportedOperationError("streaming is not offered: use GetTask")
        yield  # an async generator, as the interface has it

    # ---- tasks --------------------------------------------------------------------

    async def on_get_task(
        self, params: pb.GetTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        """``GetTask``: the job behind the task, as it stands."""
        caller, agent_id = await self._tasks.who(context)
        job = await self._tasks.own_job(params.id, caller, agent_id)
        history = not params.HasField("history_length") or params.history_length > 0
        return task_of(job, params.id, history=history)

    async def on_list_tasks(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        """``ListTasks``: the caller's tasks in one context, by task, a page at a time."""
        caller, agent_id = await self._tasks.who(context)
        if not params.context_id:
            raise InvalidParamsError("contextId: tasks are listed by context")
        size = params.page_size if params.HasField("page_size") else DEFAULT_LIST_TASKS_PAGE_SIZE
        if not 1 <= size <= MAX_LIST_TASKS_PAGE_SIZE:
            raise InvalidParamsError(f"pageSize: 1 to {MAX_LIST_TASKS_PAGE_SIZE}")
        try:
            jobs = await self.services.sent.of_context(
                queue=params.context_id,
                agent_id=agent_id,
                from_agent_id=caller.agent_id,
                after_job_id=params.page_token or None,
                limit=size + 1,
                timeout_s=STEP_TIMEOUT_S,
            )
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        page = [job for job in jobs[:size] if job.mail is not None]
        # TASK_STATE_UNSPECIFIED (0, the default) filters nothing.
        wanted = params.status or None
        history = not params.HasField("history_length") or params.history_length > 0
        tasks = [
            task_of(job, job.mail.key, history=history)
            for job in page
            if job.mail is not None and (wanted is None or task_state(job) == wanted)
        ]
        more = len(jobs) > size
        return pb.ListTasksResponse(
            tasks=tasks,
            next_page_token=jobs[size - 1].job_id if more else "",
            page_size=size,
            total_size=len(tasks),
        )

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        """``CancelTask``: cancel-wins on the job (a queued one never runs).

        Raises:
            TaskNotCancelableError: the task is terminal already.
        """
        caller, agent_id = await self._tasks.who(context)
        job = await self._tasks.own_job(params.id, caller, agent_id)
        if task_state(job) in TERMINAL:
            raise TaskNotCancelableError(f"task {params.id} is terminal already")
        try:
            await self.services.sent.cancel(
                job.job_id,
                caller=caller,
                content=f"Cancelled by {address_text(caller)} over A2A.",
                timeout_s=STEP_TIMEOUT_S,
            )
        except JobNotFound:
            raise TaskNotFoundError() from None
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        log.info("a2a_task_cancelled", agent_id=printable(agent_id), caller=address_text(caller))
        # Its worker hears the cancellation at once (birddog.cancels) and settles it
        # cancelled; a worker --a2a once its remote agent has answered CancelTask.
        return task_of(await self._tasks.until_terminal(job.job_id, CANCEL_WAIT_S), params.id)

    # ---- push notification configs: reply addresses of the task's mail -------------

    async def on_create_task_push_notification_config(
        self, params: pb.TaskPushNotificationConfig, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        """Set a push config on a task not yet ended: one more reply address of its mail.

        Raises:
            UnsupportedOperationError: the task has ended (its replies are written).
        """
        caller, agent_id = await self._tasks.who(context)
        job = await self._tasks.own_job(params.task_id, caller, agent_id)
        push = await self._push.stored(params, params.task_id)
        try:
            added = await self.services.sent.add_reply_to(
                job.job_id, push.address(job.queue), caller=caller, timeout_s=STEP_TIMEOUT_S
            )
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        if added == "missing":
            raise TaskNotFoundError()
        if added == "settled":
            raise UnsupportedOperationError(
                f"task {params.task_id} has ended: no notification would follow"
            )
        return config_shown(params.task_id, push.config_id, push.url)

    async def on_get_task_push_notification_config(
        self, params: pb.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        """One push config of a task (its URL and id; never its credentials)."""
        caller, agent_id = await self._tasks.who(context)
        job = await self._tasks.own_job(params.task_id, caller, agent_id)
        for config in await self._push.of_job(params.task_id, job):
            if config.id == (params.id or DEFAULT_CONFIG_ID):
                return config
        raise TaskNotFoundError(
            f"task {params.task_id} has no push config {printable(params.id)[:64]!r}"
        )

    async def on_list_task_push_notification_configs(
        self, params: pb.ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        """Every push config of a task (URLs and ids; never credentials)."""
        caller, agent_id = await self._tasks.who(context)
        job = await self._tasks.own_job(params.task_id, caller, agent_id)
        configs = await self._push.of_job(params.task_id, job)
        return pb.ListTaskPushNotificationConfigsResponse(configs=configs)

    async def on_delete_task_push_notification_config(
        self, params: pb.DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """Take a push config off a task not yet ended (a reply written already stays owed)."""
        caller, agent_id = await self._tasks.who(context)
        job = await self._tasks.own_job(params.task_id, caller, agent_id)
        address = AgentAddress(
            agent_id=push_agent_id(
                task_id=params.task_id, config_id=params.id or DEFAULT_CONFIG_ID
            ),
            session_id=job.queue,
        )
        try:
            await self.services.sent.remove_reply_to(
                job.job_id, address, caller=caller, timeout_s=STEP_TIMEOUT_S
            )
        except StoreUnavailable as exc:
            raise unavailable(exc) from None

    async def on_get_extended_agent_card(
        self, params: pb.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> pb.AgentCard:
        """Not offered: the public card says all there is."""
        raise ExtendedAgentCardNotConfiguredError()


def _still_open(task: pb.Task, agent_id: str, wait_s: float) -> pb.Message:
    """Why a blocking ``SendMessage`` returns before the task ended, as the agent's message."""
    name = printable(agent_id)[:64]
    if task.status.state == pb.TASK_STATE_SUBMITTED:
        why = (
            f"No worker of {name} took the task within {wait_s:g} s (is a worker serving "
            f"{name} running?): it stays queued and runs when one does."
        )
    else:
        why = f"{name} is still working after {wait_s:g} s: the task goes on."
    return _agent_says(
        task,
        f"{why} BirdDog returned it as it stands; ask again with GetTask, or set a push "
        "notification config to be told when it ends.",
    )


def _agent_says(task: pb.Task, text: str) -> pb.Message:
    """A status message of the agent's about a task still open."""
    return pb.Message(
        message_id=f"{task.id}:status",
        context_id=task.context_id,
        task_id=task.id,
        role=pb.ROLE_AGENT,
        parts=[pb.Part(text=text)],
    )


def _text_or_refuse(message: pb.Message, max_bytes: int) -> str:
    """The message's text parts joined; refused past :data:`MAX_PARTS` or ``max_bytes``."""
    if len(message.parts) > MAX_PARTS:
        raise InvalidParamsError(f"message.parts: at most {MAX_PARTS} parts")
    texts: list[str] = []
    for part in message.parts:
        if part.WhichOneof("content") != "text":
            raise ContentTypeNotSupportedError("only text parts are taken (text/plain)")
        texts.append(part.text)
    text = "\n".join(texts)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidParamsError(f"message: its text is {size} bytes; at most {max_bytes}")
    return text
