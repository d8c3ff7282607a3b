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
token``): the agent session it names is the mail's ``from`` and its ``replyTo``. A request
without a valid token is refused with 401 before the SDK sees it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    DEFAULT_LIST_TASKS_PAGE_SIZE,
    MAX_LIST_TASKS_PAGE_SIZE,
    PROTOCOL_VERSION_CURRENT,
    TransportProtocol,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from birddog.a2a.push import DEFAULT_CONFIG_ID, PushRoute, push_route
from birddog.a2a.tasks import (
    TERMINAL,
    context_of_key,
    job_id_of,
    task_key,
    task_of,
    task_state,
)
from birddog.core.ask import address_text
from birddog.core.errors import (
    BirdDogError,
    InvalidInput,
    JobConflict,
    JobNotFound,
    SpoolFailed,
    SpoolFull,
    StoreUnavailable,
)
from birddog.core.mail import AgentAddress
from birddog.core.push import is_push_agent, push_agent_id, push_config_id
from birddog.core.tasks import SentJob, spooled_job
from birddog.core.text import printable
from birddog.ports import TokenBook

if TYPE_CHECKING:
    from birddog.ports import JobCancels, RouteEdits, SentJobs
    from birddog.service.mail import MailService

log = structlog.get_logger("birddog.a2a")

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_WAIT_S",
    "A2AServices",
    "MailRoomRequestHandler",
    "a2a_app",
    "agent_card",
]

DEFAULT_PORT: Final = 9468
DEFAULT_WAIT_S: Final = 60.0
"""A blocking ``SendMessage`` waits this long for a terminal state, then returns the task."""

CANCEL_WAIT_S: Final = 10.0
"""``CancelTask`` of a running task waits this long for its worker to stop it."""

STEP_TIMEOUT_S: Final = 10.0
"""The longest any step waits for a database connection."""

POLL_FIRST_S: Final = 0.05
POLL_MOST_S: Final = 0.5
"""A waiting request reads its job again after 50 ms, doubling up to every 500 ms."""

_CALLER: Final = "birddog_caller"
_AGENT: Final = "birddog_agent"


@dataclass(frozen=True, slots=True)
class A2AServices:
    """What the A2A endpoint calls: the same services as the command line.

    Attributes:
        sender: the mail service: sends the mail of each ``SendMessage`` (spooling it
            when the database cannot take it now).
        sent: reads the ask jobs back (``GetTask``, ``ListTasks``).
        jobs: the job store (``CancelTask`` goes through its cancel-wins).
        routes: which agents exist (an agent with a route answers); push configs are
            routes of kind ``a2a``.
        tokens: who each bearer token is.
        wait_s: how long a blocking ``SendMessage`` waits for a terminal state.
    """

    sender: MailService
    sent: SentJobs
    jobs: JobCancels
    routes: RouteEdits
    tokens: TokenBook
    wait_s: float = DEFAULT_WAIT_S


class _Tasks:
    """The jobs behind a request's tasks: who asks, which jobs are theirs, each until it ends.

    Args:
        services: the adapters (the sent jobs, the routes).
    """

    def __init__(self, services: A2AServices) -> None:
        self.services = services

    async def who(self, context: ServerCallContext) -> tuple[AgentAddress, str]:
        """The caller (from its token) and the agent addressed (which must have a route)."""
        caller = context.state.get(_CALLER)
        agent_id = context.state.get(_AGENT)
        if not isinstance(caller, AgentAddress) or not isinstance(agent_id, str):
            # The middleware refuses such requests; this is its second line.
            raise InvalidParamsError("no caller: the request carries no valid bearer token")
        try:
            route = await self.services.routes.route(agent_id)
        except StoreUnavailable as exc:
            raise _unavailable(exc) from None
        if route is None:
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
                raise _unavailable(exc) from None
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        pause = POLL_FIRST_S
        while True:
            try:
                job = await self.services.sent.get(job_id, timeout_s=STEP_TIMEOUT_S)
            except StoreUnavailable as exc:
                raise _unavailable(exc) from None
            if job is None:
                raise TaskNotFoundError()
            left = deadline - loop.time()
            if task_state(job) in TERMINAL or left <= 0:
                return job
            await asyncio.sleep(min(pause, left))
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
            raise _unavailable(exc) from None
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


class _PushConfigs:
    """Push configs as routes of kind ``a2a``: stored (the URL checked), read back per task.

    Args:
        routes: the route book.
    """

    def __init__(self, routes: RouteEdits) -> None:
        self.routes = routes

    async def stored(self, config: pb.TaskPushNotificationConfig, task_id: str) -> PushRoute:
        """Store a push config as its route, its URL checked against the egress policy now."""
        if not config.url:
            raise InvalidParamsError("pushNotificationConfig.url is required")
        try:
            push = push_route(config, task_id=task_id)
            known = await self.routes.route(push.agent_id)
            if known is None:
                await self.routes.add(push.agent_id, push.url, push.secret, kind="a2a")
            elif known.url != push.url or known.secret != push.secret:
                raise InvalidParamsError(
                    f"push config {printable(push.config_id)[:64]!r} was set before otherwise; "
                    "use another id"
                )
        except InvalidInput as exc:
            # An egress refusal (a metadata or private address) is one of these.
            raise InvalidParamsError(
                f"pushNotificationConfig: {printable(str(exc))[:300]}"
            ) from None
        except StoreUnavailable as exc:
            raise _unavailable(exc) from None
        log.info("a2a_push_config_set", agent_id=push.agent_id)
        return push

    async def of_job(self, task_id: str, job: SentJob) -> list[pb.TaskPushNotificationConfig]:
        """The push configs among the reply addresses of ``job``'s mail (never credentials)."""
        configs: list[pb.TaskPushNotificationConfig] = []
        for address in job.mail.reply_to if job.mail is not None else []:
            if not is_push_agent(address.agent_id):
                continue
            try:
                route = await self.routes.route(address.agent_id)
            except (StoreUnavailable, BirdDogError) as exc:
                log.warning("a2a_push_config_unreadable", error=type(exc).__name__)
                continue
            if route is not None and route.url is not None:
                config_id = push_config_id(route.secret or "") or DEFAULT_CONFIG_ID
                configs.append(_config_shown(task_id, config_id, route.url))
        return configs


class MailRoomRequestHandler(RequestHandler):
    """The A2A methods as mail-room calls, for the caller and agent of each request.

    Args:
        services: the adapters it calls.
    """

    def __init__(self, services: A2AServices) -> None:
        self.services = services
        self._tasks = _Tasks(services)
        self._push = _PushConfigs(services.routes)

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
        content = _text_or_refuse(message)
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
            raise _unavailable(exc) from None
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
            return task_of(spooled, key)
        wait_s = 0.0 if params.configuration.return_immediately else self.services.wait_s
        job = await self._tasks.until_terminal(job_id, wait_s)
        return task_of(job, key)

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
            raise _unavailable(exc) from None
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
            await self.services.jobs.cancel(
                job_id=job.job_id, content=f"Cancelled by {address_text(caller)} over A2A."
            )
        except JobNotFound:
            raise TaskNotFoundError() from None
        except StoreUnavailable as exc:
            raise _unavailable(exc) from None
        log.info("a2a_task_cancelled", agent_id=printable(agent_id), caller=address_text(caller))
        # A running job stops at its worker's next heartbeat; the cancellation wins then.
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
            raise _unavailable(exc) from None
        if added == "missing":
            raise TaskNotFoundError()
        if added == "settled":
            raise UnsupportedOperationError(
                f"task {params.task_id} has ended: no notification would follow"
            )
        return _config_shown(params.task_id, push.config_id, push.url)

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
            raise _unavailable(exc) from None

    async def on_get_extended_agent_card(
        self, params: pb.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> pb.AgentCard:
        """Not offered: the public card says all there is."""
        raise ExtendedAgentCardNotConfiguredError()


def _config_shown(task_id: str, config_id: str, url: str) -> pb.TaskPushNotificationConfig:
    """A push config as shown back: its id, task and URL (credentials stay sealed)."""
    return pb.TaskPushNotificationConfig(id=config_id, task_id=task_id, url=url)


def _text_or_refuse(message: pb.Message) -> str:
    texts: list[str] = []
    for part in message.parts:
        if part.WhichOneof("content") != "text":
            raise ContentTypeNotSupportedError("only text parts are taken (text/plain)")
        texts.append(part.text)
    return "\n".join(texts)


def _unavailable(exc: StoreUnavailable) -> A2AError:
    log.warning("a2a_database_unavailable", error=type(exc).__name__)
    return InternalError("the mail room's database is unavailable; try again")


# ---- the card -----------------------------------------------------------------------


def agent_card(agent_id: str, base_url: str, *, version: str) -> pb.AgentCard:
    """The Agent Card of one agent served at ``base_url`` (``.../a2a/AGENT/``).

    Args:
        agent_id: the agent.
        base_url: its base URL, for both bindings.
        version: BirdDog's version (the card's ``version``).

    Returns:
        The card: JSON-RPC and HTTP+JSON at ``base_url``, bearer tokens, text in and out,
        no streaming.
    """
    name = printable(agent_id)
    return pb.AgentCard(
        name=name,
        description=(
            f"The BirdDog agent {name}: each message is durable mail to one of its sessions "
            "(the contextId), answered when its work settles."
        ),
        supported_interfaces=[
            pb.AgentInterface(
                url=base_url,
                protocol_binding=binding,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            )
            for binding in (TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value)
        ],
        version=version,
        capabilities=pb.AgentCapabilities(streaming=False, push_notifications=True),
        security_schemes={
            "bearer": pb.SecurityScheme(
                http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="A per-agent token from `birddog agent add` or "
                    "`birddog agent token`.",
                )
            )
        },
        security_requirements=[pb.SecurityRequirement(schemes={"bearer": pb.StringList()})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(
                id="mail",
                name="Durable mail",
                description=f"Whatever {name} does, asked by mail and answered once settled.",
                tags=["birddog", "durable"],
            )
        ],
    )


# ---- the application ----------------------------------------------------------------


class _Context(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller and the addressed agent in its state."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[_CALLER] = request.scope.get(_CALLER)
        context.state[_AGENT] = request.path_params.get("agent")
        # The SDK reads the headers (A2A-Version); the bearer token stays out of its state.
        headers = context.state.get("headers")
        if isinstance(headers, dict):
            headers.pop("authorization", None)
        return context


ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class _Bearer:
    """Refuses, with 401, every request but an Agent Card's that has no valid bearer token.

    Args:
        app: the application behind it.
        tokens: who each token is.
    """

    def __init__(self, app: ASGIApp, tokens: TokenBook) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or str(scope.get("path", "")).endswith(
            AGENT_CARD_WELL_KNOWN_PATH
        ):
            await self.app(scope, receive, send)
            return
        answer = await self._caller(scope)
        if isinstance(answer, Response):
            await answer(scope, receive, send)
            return
        scope[_CALLER] = answer
        await self.app(scope, receive, send)

    async def _caller(self, scope: MutableMapping[str, Any]) -> AgentAddress | Response:
        header = ""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            try:
                caller = await self.tokens.authenticate(token.strip())
            except StoreUnavailable as exc:
                log.warning("a2a_token_check_failed", error=type(exc).__name__)
                return JSONResponse(
                    {"error": "the mail room's database is unavailable; try again"},
                    status_code=503,
                    headers={"Retry-After": "5"},
                )
            if caller is not None:
                return caller
        return JSONResponse(
            {"error": "a valid bearer token is needed (birddog agent add / agent token)"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="birddog"'},
        )


def a2a_app(services: A2AServices, *, public_url: str, version: str) -> ASGIApp:
    """The Starlette application serving every agent with a route under ``/a2a/AGENT/``.

    Args:
        services: the adapters the requests call.
        public_url: where callers reach this server (``http://127.0.0.1:9468``), for the
            cards' URLs.
        version: BirdDog's version, for the cards.

    Returns:
        The ASGI application, bearer check included.
    """
    handler = MailRoomRequestHandler(services)
    context = _Context()

    async def card(request: Request) -> Response:
        agent_id = request.path_params["agent"]
        try:
            route = await services.routes.route(agent_id)
        except StoreUnavailable as exc:
            log.warning("a2a_database_unavailable", error=type(exc).__name__)
            return JSONResponse({"error": "database unavailable"}, status_code=503)
        if route is None:
            return JSONResponse({"error": "no such agent"}, status_code=404)
        base = f"{public_url.rstrip('/')}/a2a/{agent_id}/"
        body = json.dumps(agent_card_to_dict(agent_card(agent_id, base, version=version)))
        return Response(body, media_type="application/json")

    per_agent: list[BaseRoute] = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]),
        *create_jsonrpc_routes(handler, "/", context_builder=context),
        *create_rest_routes(handler, context_builder=context),
    ]
    app = Starlette(routes=[Mount("/a2a/{agent}", routes=per_agent)])
    return _Bearer(app, services.tokens)
