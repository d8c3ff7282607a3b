"""``birddog a2a`` driven by a2a-sdk's own client, over a real worker and PostgreSQL.

One database, one A2A server, one in-process worker and one drain daemon serve the whole
module. The roles are installed (``birddog migrate --roles``) and the A2A server runs
under a login of its own role, ``birddog_a2a``, as a deployment runs it; the worker and
the daemon under the database's owner. The worker's agent answers ``echo: <text>``, raises for ``fail`` (with a token in
its complaint, which the diagnostic masks) and sleeps for ``slow`` until it is cancelled.
Push receivers are aiohttp servers on 127.0.0.1 started by their tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryPushNotificationConfigStore
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError
from aiohttp import web
from google.protobuf.json_format import ParseDict

from birddog import AgentAddress
from birddog.a2a.app import a2a_app
from birddog.a2a.push import OutboxPushSender
from birddog.bootstrap import (
    a2a_services,
    build_daemon,
    build_jobs_listener,
    build_wake_listener,
    build_worker,
    open_adapters,
)
from birddog.cancels import CancelHints
from birddog.clock import SystemClock
from birddog.core.jobs import AgentJobPayload
from birddog.http import signing
from birddog.http.server import listening_socket, serve_asgi, socket_url
from birddog.postgres.caller_outbox import CallerOutbox
from birddog.postgres.roles import install_roles
from birddog.postgres.routes import PostgresRoutes
from birddog.settings import Settings
from tests.support import eventually, http_get_ok, job_row
from tests.support.cli import as_login, cli, token_of
from tests.support.inbox import posts_to

AGENT = "helper"
WAIT_S = 20.0


@dataclass(frozen=True)
class Served:
    """The module's A2A server: its base URL, a caller's token, and the database."""

    url: str
    token: str
    dsn: str
    pool: Any
    a2a_dsn: str

    @property
    def agent_url(self) -> str:
        """The helper agent's base URL."""
        return f"{self.url}/a2a/{AGENT}/"


async def _agent(payload: AgentJobPayload) -> str:
    """The helper agent: echoes, fails on ``fail``, sleeps on ``slow``."""
    assert payload.mail is not None
    text = payload.mail.content
    if text == "fail":
        raise RuntimeError("the model refused: Authorization: Bearer sk-live-123456")
    if text == "slow":
        await asyncio.sleep(120)
    return f"echo: {text}"


@pytest.fixture(scope="module")
async def served(database_factory: Any) -> AsyncIterator[Served]:
    """A database, a worker for every queue, and ``birddog a2a`` on a free port."""
    dsn = await database_factory.take()
    # A lease of a minute: a cancellation must reach the worker by its NOTIFY, not a beat.
    # The push receivers are on 127.0.0.1: the operator's setting opens that.
    settings = Settings(
        database_url=dsn,
        job_lease_s=60,
        max_attempts=3,
        base_delay_s=0.05,
        push_egress="internal",
    )
    stop = asyncio.Event()
    async with (
        a2a_login(dsn) as a2a_dsn,
        open_adapters(settings, pool_size=6) as adapters,
        open_adapters(settings.model_copy(update={"database_url": a2a_dsn}), pool_size=4) as a2a,
    ):
        await adapters.routes.add(AGENT, kind="mailbox")
        added = await adapters.agents.add(AgentAddress(agent_id="asker", session_id="s-asker"))
        hints = CancelHints()
        listener = build_jobs_listener(adapters, cancel_hints=hints)
        wakes = build_wake_listener(adapters)
        async with listener, wakes:
            worker = build_worker(
                adapters, _agent, listener=listener, queues=None, stop=stop, cancel_hints=hints
            )
            daemon = build_daemon(adapters, listener=wakes, alerts=None, stop=stop)
            sock = listening_socket()
            url = socket_url(sock)
            app = a2a_app(a2a_services(a2a, wait_s=WAIT_S), public_url=url, version="0")
            tasks = [
                asyncio.create_task(worker.run()),
                asyncio.create_task(daemon.run()),
                asyncio.create_task(serve_asgi(app, sock, stop=stop)),
            ]
            try:
                await eventually(
                    lambda: http_get_ok(f"{url}/a2a/{AGENT}/.well-known/agent-card.json"),
                    "the A2A server answers",
                    within_s=30,
                )
                yield Served(
                    url=url, token=added.issued.token, dsn=dsn, pool=adapters.pool, a2a_dsn=a2a_dsn
                )
            finally:
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), 30)


@contextlib.asynccontextmanager
async def a2a_login(dsn: str) -> AsyncIterator[str]:
    """The roles installed on ``dsn``'s database, and a login of ``birddog_a2a`` (its DSN)."""
    name, password = f"bdt_{secrets.token_hex(4)}_a2a", secrets.token_urlsafe(16)
    conn = await asyncpg.connect(dsn)
    try:
        await install_roles(conn)
        # Test-made names and passwords: letters, digits, '_' and '-' only.
        await conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE birddog_a2a")
        yield as_login(dsn, name, password)
    finally:
        await conn.execute(f"DROP ROLE IF EXISTS {name}")
        await conn.close()


@contextlib.asynccontextmanager
async def client(served: Served, binding: str = "JSONRPC") -> AsyncIterator[Client]:
    """An a2a-sdk client of the helper agent, over ``binding``, with the caller's token."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {served.token}"}, timeout=60)
    config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=[binding])
    made = await ClientFactory(config).create_from_url(served.agent_url)
    try:
        yield made
    finally:
        await made.close()
        await http.aclose()


def message(text: str, *, context_id: str = "", message_id: str | None = None) -> pb.Message:
    """A user message of one text part."""
    return pb.Message(
        message_id=message_id or uuid.uuid4().hex,
        context_id=context_id,
        role=pb.ROLE_USER,
        parts=[pb.Part(text=text)],
    )


async def send(a2a: Client, request: pb.SendMessageRequest) -> pb.Task:
    """Send and return the one task the answer carries."""
    answers = [answer async for answer in a2a.send_message(request)]
    assert len(answers) == 1, answers
    assert answers[0].HasField("task"), answers[0]
    return answers[0].task


def text(parts: Any) -> str:
    """The text of parts."""
    return "".join(part.text for part in parts)


async def test_the_server_runs_under_a_login_of_birddog_a2a_only(served: Served) -> None:
    """Its login is no superuser and a member of birddog_a2a, of no operator's role."""
    conn = await asyncpg.connect(served.a2a_dsn)
    try:
        row = await conn.fetchrow(
            "SELECT r.rolsuper, pg_has_role(current_user, 'birddog_a2a', 'MEMBER') AS a2a, "
            "pg_has_role(current_user, 'birddog_daemon', 'MEMBER') AS daemon, "
            "pg_has_role(current_user, 'birddog_sender', 'MEMBER') AS sender "
            "FROM pg_roles r WHERE r.rolname = current_user"
        )
    finally:
        await conn.close()
    assert row is not None
    assert (row["rolsuper"], row["a2a"], row["daemon"], row["sender"]) == (
        False,
        True,
        False,
        False,
    )


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_message_is_answered_with_the_reply_as_artifact(
    served: Served, binding: str
) -> None:
    """A blocking SendMessage returns the COMPLETED task, the reply as artifact and status."""
    async with client(served, binding) as a2a:
        task = await send(a2a, pb.SendMessageRequest(message=message("hello")))
    assert task.status.state == pb.TASK_STATE_COMPLETED, task
    assert [text(artifact.parts) for artifact in task.artifacts] == ["echo: hello"]
    assert text(task.status.message.parts) == "echo: hello"
    assert task.context_id.startswith("ctx-")
    row = await job_row(served.pool, "ask:" + task.id)
    assert row["queue"] == task.context_id


async def test_a_caller_whose_route_posts_to_a_url_gets_its_task_answered(
    served: Served,
) -> None:
    """A caller with an inbox URL route: COMPLETED as any caller; its reply copy is posted."""
    routes = PostgresRoutes(served.pool, cache_s=0, clock=SystemClock())
    await routes.add("poster", "http://127.0.0.1:9/inbox")
    added = await cli(served.dsn, "agent", "add", "poster:s-p")
    assert added.returncode == 0, added.stderr
    as_poster = dataclasses.replace(served, token=token_of(added.stdout))
    async with client(as_poster) as a2a:
        task = await send(a2a, pb.SendMessageRequest(message=message("from a url")))
    assert task.status.state == pb.TASK_STATE_COMPLETED, task
    assert text(task.status.message.parts) == "echo: from a url"
    # The reply to the caller follows its route: owed to its URL, not put in a mailbox.
    owed = await served.pool.fetchval(
        "SELECT count(*) FROM birddog.outbox WHERE in_reply_to = $1 AND recipient_agent_id = $2",
        task.id,
        "poster",
    )
    assert owed == 1
    route = await routes.route("poster")
    assert route is not None
    assert route.kind == "http"


async def test_a_failing_agent_is_a_failed_task_with_its_diagnostic(served: Served) -> None:
    """A handler that raises gives FAILED, the bounded (masked) diagnostic as the message."""
    async with client(served) as a2a:
        task = await send(a2a, pb.SendMessageRequest(message=message("fail")))
    assert task.status.state == pb.TASK_STATE_FAILED, task
    said = text(task.status.message.parts)
    assert "the model refused" in said
    assert "sk-live-123456" not in said
    assert list(task.artifacts) == []


async def test_return_immediately_then_get_task_until_completed(served: Served) -> None:
    """return_immediately answers at once with a live task; GetTask polls it to COMPLETED."""
    request = pb.SendMessageRequest(
        message=message("later", context_id="ctx-polling"),
        configuration=pb.SendMessageConfiguration(return_immediately=True),
    )
    async with client(served) as a2a:
        task = await send(a2a, request)
        assert task.context_id == "ctx-polling"
        assert task.status.state in (
            pb.TASK_STATE_SUBMITTED,
            pb.TASK_STATE_WORKING,
            pb.TASK_STATE_COMPLETED,
        )

        async def state() -> pb.Task:
            return await a2a.get_task(pb.GetTaskRequest(id=task.id))

        done = await eventually(
            state, "the task completes", until=lambda t: t.status.state == 3, within_s=20
        )
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert text(done.artifacts[0].parts) == "echo: later"
        listed = await a2a.list_tasks(pb.ListTasksRequest(context_id="ctx-polling"))
    assert [t.id for t in listed.tasks] == [task.id]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_running_task_is_cancelled(served: Served, binding: str) -> None:
    """CancelTask on a running task answers CANCELED within a second (the lease is 60 s)."""
    request = pb.SendMessageRequest(
        message=message("slow"),
        configuration=pb.SendMessageConfiguration(return_immediately=True),
    )
    async with client(served, binding) as a2a:
        task = await send(a2a, request)

        async def state() -> pb.Task:
            return await a2a.get_task(pb.GetTaskRequest(id=task.id))

        await eventually(
            state,
            "the slow task runs",
            until=lambda t: t.status.state == pb.TASK_STATE_WORKING,
            within_s=20,
        )
        asked = asyncio.get_running_loop().time()
        cancelled = await a2a.cancel_task(pb.CancelTaskRequest(id=task.id))
        took_s = asyncio.get_running_loop().time() - asked
        assert cancelled.status.state == pb.TASK_STATE_CANCELED, cancelled
        assert took_s < 1.0, f"CancelTask took {took_s:.2f} s"
        with pytest.raises(TaskNotCancelableError):
            await a2a.cancel_task(pb.CancelTaskRequest(id=task.id))
    row = await job_row(served.pool, "ask:" + task.id)
    assert (row["state"], row["outcome"]) == ("settled", "cancelled")


async def test_a_replayed_message_id_makes_one_job(served: Served) -> None:
    """The same messageId sent twice is one task and one job (the second send a replay)."""
    once = message("twice?", message_id="m-replayed")
    async with client(served) as a2a:
        first = await send(a2a, pb.SendMessageRequest(message=once))
        second = await send(a2a, pb.SendMessageRequest(message=once))
    assert first.id == second.id
    assert first.context_id == second.context_id
    count = await served.pool.fetchval(
        "SELECT count(*) FROM birddog.jobs WHERE payload #>> '{mail,key}' = $1", first.id
    )
    assert count == 1


async def test_requests_without_a_valid_token_are_refused(served: Served) -> None:
    """No token or a wrong one: 401 with a Bearer challenge, for both bindings."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "GetTask",
        "params": {"id": "a2a:0"},
    }
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer bd_not-a-token"}):
            rpc = await http.post(served.agent_url, json=body, headers=headers)
            rest = await http.get(f"{served.agent_url}tasks/a2a:0", headers=headers)
            for answer in (rpc, rest):
                assert answer.status_code == 401, answer.text
                assert answer.headers["www-authenticate"].startswith("Bearer")


async def test_the_agent_card_is_served_and_valid(served: Served) -> None:
    """The card parses as the SDK's AgentCard: both bindings at the agent's URL, bearer auth."""
    async with httpx.AsyncClient() as http:
        answer = await http.get(f"{served.agent_url}.well-known/agent-card.json")
        missing = await http.get(f"{served.url}/a2a/nobody/.well-known/agent-card.json")
    assert answer.status_code == 200
    card = ParseDict(answer.json(), pb.AgentCard(), ignore_unknown_fields=True)
    assert card.name == AGENT
    assert [(i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces] == [
        ("JSONRPC", "1.0", served.agent_url),
        ("HTTP+JSON", "1.0", served.agent_url),
        ("JSONRPC", "0.3", served.agent_url),
        ("HTTP+JSON", "0.3", served.agent_url),
    ]
    assert "bearer" in card.security_schemes
    # What an A2A 0.3 client reads: the url beside the interfaces.
    assert answer.json()["url"] == served.agent_url
    assert answer.json()["protocolVersion"] == "0.3"
    assert missing.status_code == 404


async def test_an_a2a_0_3_client_is_served(served: Served) -> None:
    """A 0.3 JSON-RPC message/send (the compatibility layer) is answered with its task."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "text", "text": "old client"}],
            }
        },
    }
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(
            served.agent_url, json=body, headers={"Authorization": f"Bearer {served.token}"}
        )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["kind"] == "task", result
    assert result["status"]["state"] == "completed", result
    assert result["artifacts"][0]["parts"][0]["text"] == "echo: old client"


PUSH_SIGNING_SECRET = "whsec_" + "c2lnbmluZy1zZWNyZXQtb2YtdGhlLXB1c2gtcmVjZWl2ZXI="


def push_config(
    url: str,
    *,
    config_id: str = "",
    token: str = "push-token-1",  # noqa: S107 - a test's
) -> pb.TaskPushNotificationConfig:
    """A push config with bearer credentials and a token."""
    return pb.TaskPushNotificationConfig(
        id=config_id,
        url=url,
        token=token,
        authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="push-secret-1"),
    )


@dataclass
class Receiver:
    """A push receiver: what it was sent, and how it answers the n-th post."""

    answer: Callable[[int], web.StreamResponse]
    posts: list[tuple[dict[str, str], dict[str, Any]]]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Record the post, then answer as told."""
        self.posts.append((dict(request.headers), await request.json()))
        return self.answer(len(self.posts))


async def test_a_push_survives_three_refusals_and_is_delivered_once(served: Served) -> None:
    """503 three times (deferred), then 200: one accepted post, one receipt, the auth as set."""

    def answer(n: int) -> web.StreamResponse:
        if n <= 3:
            return web.Response(status=503, headers={"Retry-After": "1"})
        return web.Response(status=200)

    receiver = Receiver(answer, [])
    async with posts_to(receiver.handle, "/push") as url, client(served) as a2a:
        request = pb.SendMessageRequest(
            message=message("hello push"),
            configuration=pb.SendMessageConfiguration(
                return_immediately=True, task_push_notification_config=push_config(url)
            ),
        )
        task = await send(a2a, request)
        key = f"outbox:{task.id}:reply:1"

        async def receipts() -> int:
            return int(
                await served.pool.fetchval(
                    "SELECT count(*) FROM birddog.receipts WHERE key = $1", key
                )
            )

        await eventually(receipts, "the push is receipted", within_s=30)
        configs = await a2a.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
    assert len(receiver.posts) == 4
    headers, body = receiver.posts[-1]
    assert headers["Authorization"] == "Bearer push-secret-1"
    assert headers["X-A2A-Notification-Token"] == "push-token-1"
    assert headers["webhook-id"] == key
    assert headers["Content-Type"] == "application/a2a+json"
    assert "webhook-signature" not in headers  # a token that is no whsec_ secret signs nothing
    update = ParseDict(body, pb.StreamResponse()).status_update
    assert (update.task_id, update.context_id) == (task.id, task.context_id)
    assert update.status.state == pb.TASK_STATE_COMPLETED
    assert text(update.status.message.parts) == "echo: hello push"
    assert await receipts() == 1
    assert (
        await served.pool.fetchval("SELECT count(*) FROM birddog.outbox WHERE key = $1", key) == 0
    )
    assert [(c.id, c.url) for c in configs.configs] == [("default", url)]


async def test_a_push_with_a_whsec_token_is_signed_and_the_token_not_sent(
    served: Served,
) -> None:
    """A whsec_ token signs each push (Standard Webhooks); it never travels in a header."""
    receiver = Receiver(lambda n: web.Response(status=200), [])
    raw: list[bytes] = []

    async def keep(request: web.Request) -> web.StreamResponse:
        raw.append(await request.read())
        return await receiver.handle(request)

    async with posts_to(keep, "/push") as url, client(served) as a2a:
        config = push_config(url, token=PUSH_SIGNING_SECRET)
        request = pb.SendMessageRequest(
            message=message("signed push"),
            configuration=pb.SendMessageConfiguration(
                return_immediately=True, task_push_notification_config=config
            ),
        )
        task = await send(a2a, request)
        await eventually(lambda: len(receiver.posts), "the push arrives", within_s=30)
    headers, _ = receiver.posts[0]
    assert "X-A2A-Notification-Token" not in headers
    assert headers["Content-Type"] == "application/a2a+json"
    msg_id, timestamp = headers["webhook-id"], headers["webhook-timestamp"]
    assert msg_id == f"outbox:{task.id}:reply:1"
    signature = headers["webhook-signature"]
    key = signing.secret_key(PUSH_SIGNING_SECRET)
    assert signing.verify(
        [key], msg_id=msg_id, timestamp=int(timestamp), body=raw[0], signatures=signature
    )


async def test_a_push_set_later_to_a_receiver_that_always_fails_dies_loudly(
    served: Served,
) -> None:
    """A config set after the message, its receiver always 500: a dead letter and its NOTIFY."""
    receiver = Receiver(lambda n: web.Response(status=500, text="down"), [])
    heard: asyncio.Queue[str] = asyncio.Queue()

    def dead_letter(*args: Any) -> None:
        heard.put_nowait(args[3])

    async with served.pool.acquire() as conn:
        await conn.add_listener("birddog_dead", dead_letter)
        try:
            async with posts_to(receiver.handle, "/push") as url, client(served) as a2a:
                request = pb.SendMessageRequest(
                    message=message("slow"),
                    configuration=pb.SendMessageConfiguration(return_immediately=True),
                )
                task = await send(a2a, request)
                config = push_config(url, config_id="later")
                config.task_id = task.id
                shown = await a2a.create_task_push_notification_config(config)
                assert (shown.id, shown.url, shown.HasField("authentication")) == (
                    "later",
                    url,
                    False,
                )
                cancelled = await a2a.cancel_task(pb.CancelTaskRequest(id=task.id))
                assert cancelled.status.state == pb.TASK_STATE_CANCELED
                key = f"outbox:{task.id}:reply:1"
                dead = await asyncio.wait_for(heard.get(), 30)
        finally:
            await conn.remove_listener("birddog_dead", dead_letter)
    assert dead == key
    row = await served.pool.fetchrow(
        "SELECT dead_reason, attempts FROM birddog.dead_letters WHERE key = $1", key
    )
    assert row is not None
    assert row["attempts"] == 3, row
    assert len(receiver.posts) == 3
    update = ParseDict(receiver.posts[0][1], pb.StreamResponse()).status_update
    assert update.status.state == pb.TASK_STATE_CANCELED


async def test_a_push_url_to_a_metadata_address_is_refused_when_set(served: Served) -> None:
    """A push config for 169.254.169.254 is refused at once, in SendMessage and set later."""
    metadata = "http://169.254.169.254/latest/meta-data/"
    async with client(served) as a2a:
        with pytest.raises(InvalidParamsError, match="pushNotificationConfig"):
            await send(
                a2a,
                pb.SendMessageRequest(
                    message=message("never sent"),
                    configuration=pb.SendMessageConfiguration(
                        return_immediately=True,
                        task_push_notification_config=push_config(metadata),
                    ),
                ),
            )
        task = await send(
            a2a,
            pb.SendMessageRequest(
                message=message("sent"),
                configuration=pb.SendMessageConfiguration(return_immediately=True),
            ),
        )
        config = push_config(metadata)
        config.task_id = task.id
        with pytest.raises(InvalidParamsError, match="pushNotificationConfig"):
            await a2a.create_task_push_notification_config(config)
    count = await served.pool.fetchval("SELECT count(*) FROM birddog.routes WHERE kind = 'a2a'")
    assert count <= 3  # the three receivers' configs above, never the metadata address
    assert not await served.pool.fetchval(
        "SELECT count(*) FROM birddog.routes WHERE url LIKE '%169.254%'"
    )


async def test_the_outbox_push_sender_writes_in_the_callers_transaction(served: Served) -> None:
    """OutboxPushSender: a rolled-back notification is never sent, a committed one is, once."""
    receiver = Receiver(lambda n: web.Response(status=204), [])
    store = InMemoryPushNotificationConfigStore()
    async with (
        posts_to(receiver.handle, "/own") as url,
        open_adapters(
            Settings(database_url=served.dsn, push_egress="internal"), pool_size=2
        ) as adapters,
    ):
        config = push_config(url)
        config.task_id = "own-task"
        await store.set_info("own-task", config, ServerCallContext())
        held: list[Any] = []
        sender = OutboxPushSender(
            store,
            outbox=CallerOutbox(lambda: held[0]),
            routes=adapters.routes,
            sender=AgentAddress(agent_id="own-server", session_id="s-own"),
            clock=adapters.clock,
        )

        def update(state: pb.TaskState, text: str) -> pb.TaskStatusUpdateEvent:
            status = pb.TaskStatus(state=state)
            status.message.CopyFrom(message(text))
            return pb.TaskStatusUpdateEvent(task_id="own-task", context_id="c", status=status)

        async with adapters.pool.acquire() as conn:
            held.append(conn)
            with contextlib.suppress(RuntimeError):
                async with conn.transaction():
                    await sender.send_notification(
                        "own-task", update(pb.TASK_STATE_COMPLETED, "rolled back")
                    )
                    raise RuntimeError("the caller's transaction fails")
            async with conn.transaction():
                await sender.send_notification(
                    "own-task", update(pb.TASK_STATE_WORKING, "working: not written")
                )
                await sender.send_notification(
                    "own-task", update(pb.TASK_STATE_COMPLETED, "the answer")
                )
        await eventually(lambda: receiver.posts, "the committed push arrives", within_s=30)
    [(headers, body)] = receiver.posts
    assert headers["Authorization"] == "Bearer push-secret-1"
    update_seen = ParseDict(body, pb.StreamResponse()).status_update
    assert text(update_seen.status.message.parts) == "the answer"
