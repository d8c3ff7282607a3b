"""Durable A2A push notifications: a push config is a reply address of its own kind.

A push config (in ``SendMessage``'s configuration, or set on the task later) becomes a
route of kind ``a2a`` (:func:`push_route`: the URL, checked against the egress policy
now, and the ``Authorization`` and token, sealed like every route secret) and an address
``a2a-push:<digest>:<contextId>`` on the mail's ``replyTo``. When the task ends, the
settling transaction writes its reply like every other (``birddog.settle`` derives them
from the stored mail), and the drain delivers it with BirdDog's retries, deferrals, dead
letters and receipts; the transport posts it as the A2A ``StreamResponse``
(:func:`push_body`) and takes any 2xx as accepted.

:class:`OutboxPushSender` is the SDK's ``PushNotificationSender`` for people who run an
A2A server of their own (on ``a2a-sdk``, over the same database): it writes each
notification into the outbox inside the caller's transaction (an
:class:`~birddog.ports.OutboxRows`, :class:`birddog.postgres.caller_outbox.CallerOutbox`
over the caller's connection) instead of posting once.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import structlog
from a2a.server.tasks.push_notification_config_store import PushNotificationConfigStore
from a2a.server.tasks.push_notification_sender import (
    PushNotificationEvent,
    PushNotificationSender,
)
from a2a.types import a2a_pb2 as pb
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToJson, Parse, ParseError

from birddog.a2a.tasks import TERMINAL, said, settled_state
from birddog.core.delivery import new_row
from birddog.core.egress import EgressPolicy
from birddog.core.errors import InvalidInput, InvalidSecret
from birddog.core.fanout import created_at_ms
from birddog.core.mail import AgentAddress, Outcome, Reply, ReplyFacts
from birddog.core.push import SIGNING_TOKEN_PREFIX, push_agent_id, push_secret
from birddog.core.text import printable
from birddog.http.egress import address_refusal
from birddog.http.signing import secret_key
from birddog.ports import Clock

if TYPE_CHECKING:
    from birddog.ports import OutboxRows, RouteEdits

log = structlog.get_logger("birddog.a2a.push")

__all__ = [
    "DEFAULT_CONFIG_ID",
    "EVENT_COMMAND",
    "OutboxPushSender",
    "PushRoute",
    "check_push_host",
    "push_body",
    "push_route",
]

EVENT_COMMAND: Final = "a2a-event"
"""The command id of a push :class:`OutboxPushSender` wrote: its content is the event."""

DEFAULT_CONFIG_ID: Final = "default"
"""The id of a push config given without one."""


class PushRoute:
    """A push config as BirdDog stores it: its route's agent id, URL and secret.

    Attributes:
        agent_id: the config's agent id (``a2a-push:<digest>``).
        url: where its notifications go.
        secret: its ``Authorization`` and token (:func:`birddog.core.push.push_secret`).
        config_id: the config's id.
    """

    __slots__ = ("agent_id", "config_id", "secret", "url")

    def __init__(self, agent_id: str, url: str, secret: str, config_id: str) -> None:
        self.agent_id = agent_id
        self.url = url
        self.secret = secret
        self.config_id = config_id

    def address(self, context_id: str) -> AgentAddress:
        """The reply address of this config for a task of context ``context_id``."""
        return AgentAddress(agent_id=self.agent_id, session_id=context_id)


def push_route(config: pb.TaskPushNotificationConfig, *, task_id: str) -> PushRoute:
    """The route a push config of task ``task_id`` becomes.

    Args:
        config: the config as the caller gave it (URL, id, token, authentication).
        task_id: the task it is for.

    Returns:
        Its agent id, URL and secret (store it with ``routes.add(..., kind="a2a")``, which
        checks the URL against the egress policy).

    Raises:
        InvalidInput: a header value the config gives cannot be sent.
    """
    config_id = config.id or DEFAULT_CONFIG_ID
    if config.token.startswith(SIGNING_TOKEN_PREFIX):
        try:
            secret_key(config.token)
        except InvalidSecret:
            raise InvalidInput(
                "token: a whsec_ token is a Standard Webhooks secret (whsec_<base64>) "
                "that signs each push; this one does not decode",
                field="token",
            ) from None
    secret = push_secret(
        config_id=config_id,
        scheme=config.authentication.scheme,
        credentials=config.authentication.credentials,
        token=config.token,
    )
    return PushRoute(
        push_agent_id(task_id=task_id, config_id=config_id), config.url, secret, config_id
    )


LOOKUP_TIMEOUT_S: Final = 5.0
"""How long the lookup of a push URL's host may take when the config is set."""


async def check_push_host(url: str, policy: EgressPolicy) -> None:
    """Refuse a push URL whose host resolves to an address the push egress policy refuses.

    The URL itself (an address literal, ``localhost``) was checked already
    (:func:`~birddog.core.egress.check_route_url`); this looks the name up now, so a name
    that means this machine or a private network (``/etc/hosts``, a rebinding zone) is
    refused when the config is set, and again at every connection when pushed.

    Args:
        url: the push URL.
        policy: the push egress policy.

    Raises:
        InvalidInput: (naming ``url``) the host does not resolve, or one of its
            addresses is refused.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        async with asyncio.timeout(LOOKUP_TIMEOUT_S):
            answers = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or 443, type=socket.SOCK_STREAM
            )
    except (OSError, TimeoutError, UnicodeError):
        raise InvalidInput(
            f"url's host {printable(host)[:200]!r} does not resolve", field="url"
        ) from None
    for *_, sockaddr in answers:
        reason = address_refusal(policy, str(sockaddr[0]))
        if reason is not None:
            raise InvalidInput(
                f"url is refused by the push egress policy: {printable(host)[:200]!r} "
                f"resolves to {reason} (BIRDDOG_PUSH_EGRESS=internal opens it)",
                field="url",
            )


def push_body(stored: bytes) -> bytes:
    """The A2A push of a stored reply: a ``StreamResponse`` with the task's final status.

    Args:
        stored: the reply's JSON as the outbox stores it (BirdDog's envelope).

    Returns:
        ``{"statusUpdate": {"taskId", "contextId", "status": {"state", "message",
        "timestamp"}}}`` as JSON: the final state and the reply as the status message.

    Raises:
        InvalidInput: the stored reply is not one.
    """
    reply = Reply.model_validate_json(stored)
    facts = reply.reply
    if facts.command_id == EVENT_COMMAND:
        # OutboxPushSender stored the SDK's own event: posted as it is, once it parses.
        try:
            Parse(reply.content, pb.StreamResponse())
        except ParseError:
            raise InvalidInput(
                "a stored A2A event is not a StreamResponse", field="content"
            ) from None
        return reply.content.encode("utf-8")
    state = settled_state(facts.outcome, reply.content)
    text = said(state, facts.outcome, reply.content, facts.diagnostic)
    task_id = reply.in_reply_to
    context_id = reply.to.session_id
    status = pb.TaskStatus(
        state=state,
        message=pb.Message(
            message_id=f"{task_id}:reply",
            context_id=context_id,
            task_id=task_id,
            role=pb.ROLE_AGENT,
            parts=[pb.Part(text=text)],
        ),
    )
    status.timestamp.FromMilliseconds(reply.created_at)
    event = pb.StreamResponse(
        status_update=pb.TaskStatusUpdateEvent(
            task_id=task_id, context_id=context_id, status=status
        )
    )
    return str(MessageToJson(event, indent=None)).encode("utf-8")


_OUTCOMES: Final = {
    pb.TASK_STATE_COMPLETED: Outcome.COMPLETED,
    pb.TASK_STATE_FAILED: Outcome.FAILED,
    pb.TASK_STATE_REJECTED: Outcome.FAILED,
    pb.TASK_STATE_CANCELED: Outcome.CANCELLED,
}


class OutboxPushSender(PushNotificationSender):
    """The SDK's push sender, durable: a task's final notification is an outbox row.

    For people who run an A2A server of their own on ``a2a-sdk`` over BirdDog's database.
    Where the SDK's ``BasePushNotificationSender`` posts once and forgets a failure, this
    writes the notification into BirdDog's outbox **inside the caller's transaction**
    (``outbox`` writes on the caller's connection, in its transaction): it commits with the
    task's final state or not at all, and the drain daemon delivers it with retries,
    deferrals, dead letters and receipts, each config's URL checked against the egress
    policy when its route is made and at connect time.

    Only events whose task state is terminal are written (the answer a receiver must not
    lose); interim updates go to ``interim`` (e.g. the SDK's own sender), or nowhere.

    Args:
        config_store: where the server keeps its push configs (the SDK's store).
        outbox: writes the rows in the caller's transaction
            (:class:`birddog.postgres.caller_outbox.CallerOutbox` over its connection).
        routes: BirdDog's route book (each config becomes a route of kind ``a2a``).
        sender: the address the notifications are from (the serving agent).
        clock: the time source.
        interim: what to do with non-terminal events (None: nothing).
    """

    def __init__(
        self,
        config_store: PushNotificationConfigStore,
        *,
        outbox: OutboxRows,
        routes: RouteEdits,
        sender: AgentAddress,
        clock: Clock,
        interim: PushNotificationSender | None = None,
    ) -> None:
        self.config_store = config_store
        self.outbox = outbox
        self.routes = routes
        self.sender = sender
        self.clock = clock
        self.interim = interim

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        """Write the event for every config of the task into the outbox (the caller's tx).

        Raises:
            InvalidInput: a config's URL is refused by the egress policy, or its headers
                cannot be sent (the caller's transaction should then roll back).
            StoreUnavailable: the database failed; nothing was written.
        """
        state = event.status.state if not isinstance(event, pb.TaskArtifactUpdateEvent) else None
        if state not in TERMINAL:
            if self.interim is not None:
                await self.interim.send_notification(task_id, event)
            return
        body = str(MessageToJson(to_stream_response(event), indent=None))
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]
        now = self.clock.now()
        rows = []
        for config in await self.config_store.get_info_for_dispatch(task_id):
            push = push_route(config, task_id=task_id)
            if await self.routes.route(push.agent_id) is None:
                await self.routes.add(push.agent_id, push.url, push.secret, kind="a2a")
            reply = Reply(
                key=f"a2a-event:{push.agent_id}:{digest}",
                in_reply_to=task_id,
                to=push.address(event.context_id or "default"),
                from_=self.sender,
                content=body,
                created_at=created_at_ms(now),
                reply=ReplyFacts(command_id=EVENT_COMMAND, outcome=_OUTCOMES[state]),
            )
            rows.append(new_row(reply, now=now))
        written = await self.outbox.add_rows(rows, wake_at=now)
        log.info("a2a_push_enqueued", count=len(written))
