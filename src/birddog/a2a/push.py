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
notification into the outbox inside the caller's transaction instead of posting once.
"""

from __future__ import annotations

from typing import Final

from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToJson

from birddog.a2a.tasks import said, settled_state
from birddog.core.mail import AgentAddress, Reply
from birddog.core.push import push_agent_id, push_secret

__all__ = ["DEFAULT_CONFIG_ID", "PushRoute", "push_body", "push_route"]

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
    secret = push_secret(
        config_id=config_id,
        scheme=config.authentication.scheme,
        credentials=config.authentication.credentials,
        token=config.token,
    )
    return PushRoute(
        push_agent_id(task_id=task_id, config_id=config_id), config.url, secret, config_id
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
