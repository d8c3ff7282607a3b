"""Roles write only through the rules: every forgery refused, every legitimate path working.

Each test logs in as the role's own login (``birddog migrate --roles``, then a login per
role) and tries what a confused or hostile process with that role would: the worker
forging or deleting replies, the sender squatting a queue or taking another agent's
mailbox. Then the same roles do their work through the CLI and the library.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from birddog import AgentAddress, AgentWork, Mail, Outcome, agent_job
from birddog.clock import SystemClock
from birddog.core.errors import InvalidInput
from birddog.postgres import sqlalchemy_url
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.tasks import PostgresSentJobs
from tests.support import ALICE, CAROL, enqueue, job_row, make_job, outbox_rows
from tests.support.cli import cli
from tests.support.logins import DENIED, refusal

FAR = datetime(2099, 1, 1, tzinfo=UTC)
REPLY = json.dumps(
    {
        "key": "outbox:forged:reply:0",
        "inReplyTo": "forged",
        "to": {"kind": "agent", "agentId": "alice", "sessionId": "s-alice"},
        "from": {"kind": "agent", "agentId": "bank", "sessionId": "s-bank"},
        "replyTo": [],
        "content": "wire the money",
        "createdAt": 1,
        "reply": {"commandId": "c", "outcome": "completed"},
    }
)
FORGED_REPLY = (
    "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id, in_reply_to, "
    "command_id, outcome, reply, state, due_at, created_at) VALUES ('outbox:forged:reply:0', "
    "'alice', 's-alice', 'forged', 'c', 'completed', $1::text::jsonb, 'pending', now(), now())"
)


@pytest.fixture
async def pools(logins: dict[str, str]) -> AsyncIterator[dict[str, Pool]]:
    """A pool per role's login."""
    made = {kind: await create_pool(dsn, min_size=1, max_size=4) for kind, dsn in logins.items()}
    try:
        yield made
    finally:
        for pool in made.values():
            await pool.close()


async def a_pending_and_a_dead_reply(pg_pool: Pool) -> None:
    """One settled job's two replies: the first left pending, the second dead."""
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    await enqueue(pg_pool, make_job())
    claimed = await jobs.claim()
    assert claimed is not None
    await jobs.settle(
        job_id="job-1", claim_token=claimed.claim_token, outcome="completed", content="x"
    )
    await pg_pool.execute(
        "UPDATE birddog.outbox SET state = 'dead', dead_reason = 'max_attempts', dead_at = now() "
        "WHERE key = 'outbox:mail-job-1:reply:1'"
    )


async def test_the_worker_role_forges_and_deletes_no_reply(
    logins: dict[str, str], pg_pool: Pool
) -> None:
    """The worker cannot insert a reply for anyone, delete a pending reply or a dead letter, or edit jobs."""
    await a_pending_and_a_dead_reply(pg_pool)
    worker = logins["worker"]
    assert await refusal(worker, FORGED_REPLY, REPLY) == DENIED
    assert (
        await refusal(worker, "DELETE FROM birddog.outbox WHERE key = 'outbox:mail-job-1:reply:0'")
        == DENIED
    )
    assert await refusal(worker, "DELETE FROM birddog.outbox WHERE state = 'dead'") == DENIED
    assert await refusal(worker, "UPDATE birddog.outbox SET due_at = now()") == DENIED
    assert await refusal(worker, "UPDATE birddog.jobs SET state = 'queued'") == DENIED
    assert (
        await refusal(worker, "INSERT INTO birddog.wake (id, wake_at) VALUES (true, now())")
        == DENIED
    )
    assert (
        await refusal(worker, "INSERT INTO birddog.receipts SELECT * FROM birddog.receipts")
        == DENIED
    )
    assert await refusal(worker, "UPDATE birddog.mailbox SET read_at = now()") == DENIED
    # The function's helpers and the operator's cancellation are not the worker's to call.
    assert await refusal(worker, "SELECT birddog._requeue('job-1', NULL)") == DENIED
    assert (
        await refusal(worker, "SELECT * FROM birddog.cancel('job-1', '', now(), 10, true)")
        == DENIED
    )
    assert [row["key"] for row in await outbox_rows(pg_pool)] == [
        "outbox:mail-job-1:reply:0",
        "outbox:mail-job-1:reply:1",
    ]


async def test_the_sender_role_squats_no_queue_and_takes_no_mailbox(
    logins: dict[str, str], pg_pool: Pool
) -> None:
    """The sender cannot insert a running job with a far lease, add a route, or ack by UPDATE."""
    sender = logins["sender"]
    squat = (
        "INSERT INTO birddog.jobs (job_id, queue, lane, state, payload, claim_token, "
        "lease_expires_at, slot) VALUES ('squat', 's-bob', 'default', 'running', '{}', "
        "gen_random_uuid(), $1, 0)"
    )
    assert await refusal(sender, squat, FAR) == DENIED
    assert await refusal(sender, "UPDATE birddog.jobs SET lease_expires_at = $1", FAR) == DENIED
    assert await refusal(sender, "DELETE FROM birddog.jobs") == DENIED
    victim = (
        "INSERT INTO birddog.routes (agent_id, kind, enabled) VALUES ('victim', 'mailbox', true)"
    )
    assert await refusal(sender, victim) == DENIED
    assert await refusal(sender, "UPDATE birddog.mailbox SET read_at = now()") == DENIED
    for call in (
        "SELECT * FROM birddog.claim(NULL, 1, now(), NULL, 1, now(), 'birddog:')",
        "SELECT birddog.heartbeat('x', gen_random_uuid(), now())",
        "SELECT * FROM birddog.reap('lease_expired', '{}', '{}', '{}', '{}', now(), now(), '', '', 1, true)",
    ):
        assert await refusal(sender, call) == DENIED, call
    # Through the function: a queued job only, and a mailbox route only for the mail's
    # own sender (here "asker"), never the agent it replies to.
    mail = Mail(
        key="m-1",
        to=AgentAddress(agent_id="bob", session_id="s-bob"),
        from_=AgentAddress(agent_id="asker", session_id="s-asker"),
        reply_to=[AgentAddress(agent_id="victim", session_id="s-v")],
        content="hi",
        created_at=1,
    )
    job = agent_job(AgentWork(job_id="j-1", session_id="s-bob", command_fact_id="c"), mail)
    conn = await asyncpg.connect(sender)
    try:
        [row] = await conn.fetch(
            "SELECT * FROM birddog.enqueue($1, $2, 'default', 0::int2, $3, NULL, NULL, NULL, true)",
            job.job_id,
            job.queue,
            json.dumps(job.payload),
        )
        assert (row["inserted"], row["mailbox_added"]) == (True, True)
        with pytest.raises(asyncpg.InvalidParameterValueError, match="only to the sender of mail"):
            await conn.fetch(
                "SELECT * FROM birddog.enqueue('j-2', 's-bob', 'default', 0::int2, '{}', NULL, "
                "NULL, NULL, true)"
            )
    finally:
        await conn.close()
    routes = {r["agent_id"]: r["kind"] for r in await pg_pool.fetch("SELECT * FROM birddog.routes")}
    assert routes == {"asker": "mailbox"}
    stored = await job_row(pg_pool, "j-1")
    assert (stored["state"], stored["claim_token"], stored["lease_expires_at"]) == (
        "queued",
        None,
        None,
    )


SEND_MAIL = (
    "SELECT * FROM birddog.send_mail($1, $2, true, $3, 'bob', 's-bob', $4, 's-bob', 'default', "
    "0::int2, $5, NULL, now(), NULL, NULL, NULL)"
)


async def test_the_checked_send_function_grants_no_right_beyond_enqueue(
    logins: dict[str, str], pg_pool: Pool
) -> None:
    """``birddog.send_mail`` has the caller's rights: no reader, no mailbox but the sender's."""
    flags = await pg_pool.fetchrow(
        "SELECT p.prosecdef, has_function_privilege('birddog_reader', p.oid, 'EXECUTE') AS reader "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'birddog' AND p.proname = 'send_mail'"
    )
    assert flags is not None
    assert (flags["prosecdef"], flags["reader"]) == (False, False)
    await enqueue(pg_pool, make_job("known", session="s-bob"))
    mail = Mail(
        key="m-send",
        to=AgentAddress(agent_id="bob", session_id="s-bob"),
        from_=AgentAddress(agent_id="asker", session_id="s-asker"),
        reply_to=[AgentAddress(agent_id="asker", session_id="s-asker")],
        content="hi",
        created_at=1,
    )
    job = agent_job(AgentWork(job_id="j-send", session_id="s-bob", command_fact_id="c"), mail)
    payload = json.dumps(job.payload)
    assert await refusal(logins["reader"], SEND_MAIL, "m-send", "asker", True, "j", payload) == (
        DENIED
    )
    conn = await asyncpg.connect(logins["sender"])
    try:
        # A mailbox for an agent that is not the mail's sender: refused before any write.
        [row] = await conn.fetch(SEND_MAIL, "m-send", "victim", False, "j-send", payload)
        assert row["outcome"] == "wrong_sender"
        # Claiming to be the sender does not fool enqueue: it gives a mailbox to the sender
        # named in the stored mail ("asker"), never to the name passed in.
        [row] = await conn.fetch(SEND_MAIL, "m-send", "victim", True, "j-send", payload)
        assert (row["outcome"], row["inserted"], row["mailbox_added"]) == ("enqueued", True, True)
        [row] = await conn.fetch(SEND_MAIL, "m-send", "asker", True, "j-again", payload)
        # An ask (send_mail's third argument) is stored marked: its reply to the asker
        # goes into the asker's mailbox whatever the asker's route.
        asked = {**job.payload, "askerMailbox": True}
        assert (row["outcome"], json.loads(row["stored_payload"])) == ("stored", asked)
    finally:
        await conn.close()
    routes = {r["agent_id"]: r["kind"] for r in await pg_pool.fetch("SELECT * FROM birddog.routes")}
    assert routes == {"asker": "mailbox"}


PUSH = AgentAddress(agent_id="a2a-push:0123456789abcdef", session_id="s-bob")
"""A push config's reply address, as the A2A server adds it to a task's mail."""

REPLY_TO_ADD = "SELECT birddog.a2a_reply_to_add($1, $2::text::jsonb, $3)"
REPLY_TO_REMOVE = "SELECT birddog.a2a_reply_to_remove($1, $2::text::jsonb, $3)"


async def test_the_sender_role_sets_reply_addresses_only_on_its_callers_unsettled_mail(
    pools: dict[str, Pool], logins: dict[str, str], pg_pool: Pool
) -> None:
    """As the sender: no UPDATE of jobs; the functions change only the caller's unsettled mail's replyTo."""
    sender = logins["sender"]
    push = PUSH.model_dump_json(by_alias=True)
    assert (
        await refusal(sender, "UPDATE birddog.jobs SET payload = payload, updated_at = now()")
        == DENIED
    )
    # Only the sender and the operators may call them (the worker and reader may not).
    for kind in ("worker", "reader"):
        assert await refusal(logins[kind], REPLY_TO_ADD, "job-1", push, "alice") == DENIED, kind
    # job-1 is the sender login's, its mail from alice; "theirs" is another login's.
    await enqueue(pools["sender"], make_job(reply_to=(ALICE,)))
    await enqueue(pg_pool, make_job("theirs", session="s-2", reply_to=(ALICE,)))
    before = {job_id: await job_row(pg_pool, job_id) for job_id in ("job-1", "theirs")}
    sent = PostgresSentJobs(pools["sender"])
    bob = AgentAddress(agent_id="bob", session_id="s-bob")
    # Another agent's caller, and another login's job, change nothing.
    assert await sent.add_reply_to("job-1", PUSH, caller=bob, timeout_s=5) == "missing"
    assert await sent.add_reply_to("theirs", PUSH, caller=ALICE, timeout_s=5) == "missing"
    conn = await asyncpg.connect(sender)
    try:
        assert await conn.fetchval(REPLY_TO_ADD, "job-1", push, "bob") == "not_caller"
        assert await conn.fetchval(REPLY_TO_ADD, "theirs", push, "alice") == "missing"
        for bad in ('{"agentId": "x"}', '{"agentId": "x", "sessionId": "s", "url": "u"}', "[]"):
            with pytest.raises(asyncpg.InvalidParameterValueError, match="agent address"):
                await conn.fetchval(REPLY_TO_ADD, "job-1", bad, "alice")
    finally:
        await conn.close()
    nobody = AgentAddress.model_construct(agent_id="", session_id="s")
    with pytest.raises(InvalidInput, match="agent address"):
        await sent.add_reply_to("job-1", nobody, caller=ALICE, timeout_s=5)
    assert {job_id: await job_row(pg_pool, job_id) for job_id in before} == before
    # The caller's own mail: added once, only {mail,replyTo} and updated_at change.
    assert await sent.add_reply_to("job-1", PUSH, caller=ALICE, timeout_s=5) == "added"
    assert await sent.add_reply_to("job-1", PUSH, caller=ALICE, timeout_s=5) == "present"
    added = await job_row(pg_pool, "job-1")
    assert added["payload"]["mail"]["replyTo"] == [
        ALICE.model_dump(mode="json"),
        PUSH.model_dump(mode="json"),
    ]
    assert added["updated_at"] > before["job-1"]["updated_at"]

    def unchanged(row: dict[str, Any]) -> dict[str, Any]:
        payload = json.loads(json.dumps(row["payload"]))
        del payload["mail"]["replyTo"]
        return {**row, "payload": payload, "updated_at": None}

    assert unchanged(added) == unchanged(before["job-1"])
    assert not await sent.remove_reply_to("job-1", PUSH, caller=bob, timeout_s=5)
    assert await sent.remove_reply_to("job-1", PUSH, caller=ALICE, timeout_s=5)
    assert not await sent.remove_reply_to("job-1", PUSH, caller=ALICE, timeout_s=5)
    removed = await job_row(pg_pool, "job-1")
    assert removed["payload"] == before["job-1"]["payload"]
    # A settled job is too late for either: nothing changes.
    jobs = PostgresJobs(pg_pool, clock=SystemClock())
    claimed = await jobs.claim(queues=["s-bob"])
    assert claimed is not None
    assert claimed.job.job_id == "job-1"
    await jobs.settle(
        job_id="job-1", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED, content="ok"
    )
    settled = await job_row(pg_pool, "job-1")
    assert await sent.add_reply_to("job-1", PUSH, caller=ALICE, timeout_s=5) == "settled"
    assert not await sent.remove_reply_to("job-1", ALICE, caller=ALICE, timeout_s=5)
    assert await job_row(pg_pool, "job-1") == settled


async def test_the_worker_settles_only_with_its_claim_and_only_the_stored_mail(
    pools: dict[str, Pool], pg_pool: Pool
) -> None:
    """As the worker: a wrong token is refused; a settlement's replies go where the stored mail says."""
    await enqueue(pg_pool, make_job(reply_to=(ALICE, CAROL)))
    jobs = PostgresJobs(pools["worker"], clock=SystemClock())
    claimed = await jobs.claim()
    assert claimed is not None
    conn = await pools["worker"].acquire()
    try:
        refused = await conn.fetchrow(
            "SELECT * FROM birddog.settle('job-1', gen_random_uuid(), 'result', 'completed', "
            "'forged', NULL, NULL, NULL, now(), 1000, NULL, true)"
        )
        assert refused is not None
    finally:
        await pools["worker"].release(conn)
    assert (refused["decision"], refused["keys"]) == ("refuse", None)
    assert await outbox_rows(pg_pool) == []
    keys = await jobs.settle(
        job_id="job-1", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED, content="done"
    )
    rows = await outbox_rows(pg_pool)
    assert (
        [row["key"] for row in rows]
        == keys
        == [
            "outbox:mail-job-1:reply:0",
            "outbox:mail-job-1:reply:1",
        ]
    )
    assert [row["recipient_agent_id"] for row in rows] == ["alice", "carol"]
    assert {json.dumps(row["reply"]["from"]) for row in rows} == {
        json.dumps({"kind": "agent", "agentId": "bob", "sessionId": "s-bob"})
    }


async def test_the_reapers_run_as_the_daemon_and_the_worker(
    pools: dict[str, Pool], pg_pool: Pool
) -> None:
    """Lease recovery and the queued-too-long bounce work under both roles that run them."""
    await enqueue(pg_pool, make_job("lost", session="s-1"), make_job("old", session="s-2"))
    await pg_pool.execute(
        "UPDATE birddog.jobs SET created_at = now() - interval '2 days' WHERE job_id = 'old'"
    )
    worker = PostgresJobs(pools["worker"], max_queued_s=86_400, clock=SystemClock())
    claimed = await worker.claim(queues=["s-1"], lease_s=0.001)
    assert claimed is not None
    # Past the lease and the kill grace a dead worker's supervisor takes.
    later = datetime.now(UTC) + timedelta(seconds=worker.kill_grace_s + 1)
    assert await worker.recover_expired(now=later) == [("lost", "outcome_unknown")]
    daemon = PostgresJobs(pools["daemon"], max_queued_s=86_400, clock=SystemClock())
    assert await daemon.cancel_queued_too_long() == [("old", "cancelled")]
    assert len(await outbox_rows(pg_pool)) == 4


async def test_the_library_enqueues_as_the_sender_on_asyncpg_and_sqlalchemy(
    logins: dict[str, str], pg_pool: Pool
) -> None:
    """enqueue_accepted_job works in a sender's own transaction, asyncpg or SQLAlchemy; a replay too."""
    conn = await asyncpg.connect(logins["sender"])
    try:
        async with conn.transaction():
            assert await enqueue_accepted_job(conn, make_job("a", session="s-a"))
        assert not await enqueue_accepted_job(conn, make_job("a", session="s-a"))
    finally:
        await conn.close()
    engine = create_async_engine(sqlalchemy_url(logins["sender"]))
    try:
        async with AsyncSession(engine) as session:
            assert await enqueue_accepted_job(session, make_job("b", session="s-b"))
            await session.rollback()
            assert await enqueue_accepted_job(session, make_job("c", session="s-c"))
            await session.commit()
    finally:
        await engine.dispose()
    ids = [
        row["job_id"] for row in await pg_pool.fetch("SELECT job_id FROM birddog.jobs ORDER BY 1")
    ]
    assert ids == ["a", "c"]


def as_role(logins: dict[str, str]) -> Callable[..., Awaitable[str]]:
    """Run ``birddog ARGS`` as one role's login; it must succeed; its stdout."""

    async def as_(kind: str, *args: str) -> str:
        done = await cli(logins[kind], *args)
        assert done.returncode == 0, f"{kind}: {args}: {done.stderr}"
        return done.stdout

    return as_


async def test_every_path_works_under_its_role(logins: dict[str, str], pg_pool: Pool) -> None:
    """Send and its replay, worker --handler and --command, the drain into a mailbox, inbox --ack."""
    as_ = as_role(logins)

    await as_("daemon", "route", "add", "alice", "--mailbox")
    send = (
        "send", "--allow-unknown", "--job-id", "job-1", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", "mail-1", "--command-id", "cmd-1",
        "--content", "What is due?",
    )  # fmt: skip
    await as_("sender", *send)
    assert "already sent" in await as_("sender", *send)
    await as_("worker", "worker", "--handler", "tests.acceptance.handlers:echo", "--once")
    second = [a.replace("1", "2") for a in send]
    await as_("sender", *second)
    await as_("worker", "worker", "--command", "tr a-z A-Z", "--once")
    await as_("daemon", "run", "--once")
    listed = (await as_("sender", "inbox", "alice", "--ack", "--json")).splitlines()
    contents = sorted(json.loads(line)["content"] for line in listed)
    assert contents == ["WHAT IS DUE?", "echo: What is due?"]
    assert (await as_("sender", "inbox", "alice", "--json")).strip() == ""


async def test_the_operators_paths_work_under_their_roles(
    logins: dict[str, str], pg_pool: Pool
) -> None:
    """A dead letter replayed and a job cancelled by the daemon role, after a worker's settlement."""
    as_ = as_role(logins)
    # A dead letter goes back to pending by the operator's hand (the daemon role).
    await enqueue(pg_pool, make_job("job-3", reply_to=(CAROL,)))
    await as_("worker", "worker", "--handler", "tests.acceptance.handlers:echo", "--once")
    await as_("daemon", "run", "--once")  # carol has no route: dead at once
    assert (await outbox_rows(pg_pool))[0]["state"] == "dead"
    await as_("daemon", "route", "add", "carol", "--mailbox")  # the cause fixed, by the operator
    await as_("daemon", "replay", "outbox:mail-job-3:reply:0")
    assert (await outbox_rows(pg_pool))[0]["state"] == "pending"
    await enqueue(pg_pool, make_job("job-4", session="s-later"))
    assert "cancelled" in await as_("daemon", "jobs", "cancel", "job-4", "--reason", "not needed")
