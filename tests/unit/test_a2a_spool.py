"""A2A's SendMessage spools like the CLI and MCP: on fakes, the database away for the send.

The request handler is driven directly (its caller and agent set as the bearer check sets
them); the mail service behind it is the one of the command line, over the fakes.
"""

from __future__ import annotations

import pytest
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb

from birddog import AgentAddress, MailService
from birddog.a2a.server import A2AServices, MailRoomRequestHandler
from birddog.testing import (
    FrozenClock,
    InMemoryAsks,
    InMemoryJobs,
    InMemoryMailbox,
    InMemoryOutbox,
    InMemoryRoutes,
    InMemorySentJobs,
    InMemorySpool,
    InMemoryTokenBook,
)
from tests.support import T0

CALLER = AgentAddress(agent_id="asker", session_id="s-ask")


@pytest.fixture
async def served() -> tuple[MailRoomRequestHandler, InMemoryAsks, MailService]:
    """A handler over the fakes; the agent ``helper`` has a route."""
    clock = FrozenClock(T0)
    outbox = InMemoryOutbox(clock=clock)
    jobs = InMemoryJobs(clock=clock, outbox=outbox)
    routes = InMemoryRoutes(clock=clock, outbox=outbox)
    await routes.add("helper", kind="mailbox")
    mailbox = InMemoryMailbox(clock=clock)
    asks = InMemoryAsks(jobs=jobs, routes=routes, mailbox=mailbox)
    sender = MailService(
        asks=asks, answers=mailbox, clock=clock, spool=InMemorySpool(clock=clock), poll_s=0.01
    )
    services = A2AServices(
        sender=sender,
        sent=InMemorySentJobs(jobs),
        routes=routes,
        tokens=InMemoryTokenBook(),
        wait_s=0.0,
    )
    return MailRoomRequestHandler(services), asks, sender


def context() -> ServerCallContext:
    """The call context the bearer check leaves: the caller and the agent addressed."""
    return ServerCallContext(state={"birddog_caller": CALLER, "birddog_agent": "helper"})


def request(text: str) -> pb.SendMessageRequest:
    """A SendMessage of one text part, in the context ``c-1``."""
    message = pb.Message(
        message_id="m-1", context_id="c-1", role=pb.ROLE_USER, parts=[pb.Part(text=text)]
    )
    return pb.SendMessageRequest(message=message)


async def test_a_message_the_database_cannot_take_is_a_submitted_task_from_the_spool(
    served: tuple[MailRoomRequestHandler, InMemoryAsks, MailService],
) -> None:
    """Database away: the task is SUBMITTED at once; GetTask finds it until it is forwarded."""
    handler, asks, sender = served
    asks.away = "connection refused"
    task = await handler.on_message_send(request("hello"), context())
    assert isinstance(task, pb.Task)
    assert task.status.state == pb.TASK_STATE_SUBMITTED
    assert sender.spool is not None
    assert await sender.spool.is_waiting(task.id)
    found = await handler.on_get_task(pb.GetTaskRequest(id=task.id), context())
    assert found is not None
    assert found.status.state == pb.TASK_STATE_SUBMITTED
    asks.away = None
    assert (await sender.forward()).forwarded == [task.id]
    after = await handler.on_get_task(pb.GetTaskRequest(id=task.id), context())
    assert after is not None
    assert after.status.state == pb.TASK_STATE_SUBMITTED
    assert not await sender.spool.is_waiting(task.id)
