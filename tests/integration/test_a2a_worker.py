"""``worker --a2a``: a remote agent built on a2a-sdk's own server answers BirdDog mail.

One database, one remote agent (the SDK's request handler over an executor of this
module, on 127.0.0.1) and one BirdDog worker whose handler is the remote agent (a2a-sdk's
client) serve the module. The remote agent answers ``done: <text>``, fails on ``fail``
and works on ``slow`` until it is cancelled; the worker's handler timeout is 3 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from a2a.helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette

from birddog import AgentAddress
from birddog.a2a.remote import remote_agent
from birddog.bootstrap import build_jobs_listener, build_worker, open_adapters
from birddog.http.server import listening_socket, serve_asgi, socket_url
from birddog.settings import Settings
from tests.support import eventually, http_get_ok, job_row

HANDLER_TIMEOUT_S = 3.0


@dataclass
class Remote(AgentExecutor):
    """The remote agent: answers, fails, or works until cancelled (and records that)."""

    cancelled: list[str] = field(default_factory=list)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer the message as its text says."""
        assert context.task_id is not None
        assert context.context_id is not None
        text = context.get_user_input()
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, pb.TASK_STATE_SUBMITTED)
        )
        await updater.start_work()
        if text == "slow":
            await asyncio.sleep(120)
        if text == "fail":
            await updater.failed(updater.new_agent_message([new_text_part("no such thing")]))
            return
        await updater.add_artifact([new_text_part(f"done: {text}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Record the cancellation and end the task CANCELED."""
        assert context.task_id is not None
        assert context.context_id is not None
        self.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _card(url: str) -> pb.AgentCard:
    return pb.AgentCard(
        name="remote",
        description="A remote agent on a2a-sdk's own server.",
        version="1",
        supported_interfaces=[
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=pb.AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="echo", name="echo", description="echo", tags=["test"])],
    )


@dataclass(frozen=True)
class Room:
    """The module's adapters, remote agent and worker."""

    adapters: Any
    remote: Remote


@pytest.fixture(scope="module")
async def room(database_factory: Any) -> AsyncIterator[Room]:
    """A remote A2A agent on 127.0.0.1 and a BirdDog worker forwarding every job to it."""
    dsn = await database_factory.take()
    settings = Settings(database_url=dsn, job_lease_s=1.5, handler_timeout_s=HANDLER_TIMEOUT_S)
    remote = Remote()
    sock = listening_socket()
    url = socket_url(sock) + "/"
    handler = DefaultRequestHandlerV2(remote, InMemoryTaskStore(), _card(url))
    app = Starlette(
        routes=[*create_agent_card_routes(_card(url)), *create_jsonrpc_routes(handler, "/")]
    )
    stop = asyncio.Event()
    async with open_adapters(settings, pool_size=4) as adapters:
        await adapters.routes.add("remote", kind="mailbox")
        listener = build_jobs_listener(adapters)
        async with listener:
            worker = build_worker(
                adapters, remote_agent(url), listener=listener, queues=None, stop=stop
            )
            tasks = [
                asyncio.create_task(serve_asgi(app, sock, stop=stop)),
                asyncio.create_task(worker.run()),
            ]
            try:
                await eventually(
                    lambda: http_get_ok(f"{url}.well-known/agent-card.json"),
                    "the remote agent answers",
                    within_s=30,
                )
                yield Room(adapters=adapters, remote=remote)
            finally:
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), 30)


async def settled(room: Room, content: str, session: str) -> dict[str, Any]:
    """Send ``content`` to the remote agent's session and return the settled job's row."""
    sent = await room.adapters.sender.send(
        to=AgentAddress(agent_id="remote", session_id=session),
        from_=AgentAddress(agent_id="asker", session_id="s-asker"),
        content=content,
        reply_to=[],
    )

    async def row() -> dict[str, Any]:
        return await job_row(room.adapters.pool, sent.job_id)

    return await eventually(
        row, "the job settles", until=lambda r: r["state"] == "settled", within_s=30
    )


async def test_a_completed_remote_task_completes_the_job(room: Room) -> None:
    """COMPLETED remotely: the job completes with the remote artifact's text."""
    row = await settled(room, "hello", "s-ok")
    assert (row["outcome"], row["result_content"]) == ("completed", "done: hello")


async def test_a_failed_remote_task_fails_the_job_with_its_message(room: Room) -> None:
    """FAILED remotely: the job fails, the remote message in its diagnostic."""
    row = await settled(room, "fail", "s-fail")
    assert row["outcome"] == "failed"
    assert "FAILED" in row["diagnostic"]
    assert "no such thing" in row["diagnostic"]


async def test_a_timed_out_job_cancels_the_remote_task(room: Room) -> None:
    """The handler timeout ends the job interrupted and cancels the remote task (CancelTask)."""
    row = await settled(room, "slow", "s-slow")
    assert row["outcome"] == "interrupted"
    assert len(room.remote.cancelled) == 1
