"""A reply follows the job that produced it, and a refused enqueue tells nothing of others.

Tried from the least-privilege role logins (``birddog migrate --roles``): a sender's login
that enqueues a job of its own under alice's mail key neither reads nor acknowledges
alice's answer (the enqueue is refused: a mail key names one job), and the legitimate
ask still reads its own; an enqueue that meets a job id the caller cannot read answers a
conflict that names no field, no queue and no state.
"""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    Job,
    JobConflict,
    Mail,
    Outcome,
    Reply,
    ReplyFacts,
    agent_job,
)
from birddog.clock import SystemClock
from birddog.postgres.jobs import enqueue_accepted_job
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.pool import Pool, create_pool
from tests.support import deliver_to_mailbox
from tests.support.cli import cli

CLOCK = SystemClock()
ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
MALLORY = AgentAddress(agent_id="mallory", session_id="s-mallory")


def question(job_id: str, key: str, *, sender: AgentAddress, queue: str = "s-bob") -> Job:
    """Mail ``key`` from ``sender`` to bob, its reply going back to ``sender``."""
    to = BOB.model_copy(update={"session_id": queue})
    mail = Mail(key=key, to=to, from_=sender, reply_to=[sender], content="hi", created_at=1)
    return agent_job(AgentWork(job_id=job_id, session_id=queue, command_fact_id="c"), mail)


def answer(key: str, to: AgentAddress) -> Reply:
    """Bob's answer to mail ``key``, as its mailbox delivery stores it."""
    return Reply(
        key=f"outbox:{key}:reply:0",
        in_reply_to=key,
        to=to,
        from_=BOB,
        content="HELLO",
        created_at=1,
        reply=ReplyFacts(command_id="c", outcome=Outcome.COMPLETED),
    )


async def enqueue_as(url: str, job: Job) -> bool:
    """Enqueue ``job`` on a connection of the login ``url`` names."""
    conn = await asyncpg.connect(url)
    try:
        return await enqueue_accepted_job(conn, job)
    finally:
        await conn.close()


async def test_a_reused_mail_key_neither_reads_nor_acks_anothers_reply(
    pg_pool: Pool, logins: dict[str, str]
) -> None:
    """The issue's attack, both orders: the reuse is refused, alice's answer stays hers."""
    async with pg_pool.acquire() as conn:
        assert await enqueue_accepted_job(conn, question("by-alice", "q-1", sender=ALICE))
    with pytest.raises(JobConflict, match="mail key 'q-1' is carried by another job"):
        await enqueue_as(logins["sender"], question("attack", "q-1", sender=MALLORY))
    await deliver_to_mailbox(pg_pool, answer("q-1", ALICE), at=datetime.now(UTC))
    # Mallory's login also tries the key first, for a mail alice sends afterwards.
    assert await enqueue_as(logins["sender"], question("squat", "q-2", sender=MALLORY))
    async with pg_pool.acquire() as conn:
        with pytest.raises(JobConflict, match="mail key 'q-2' is carried by another job"):
            await enqueue_accepted_job(conn, question("alice-late", "q-2", sender=ALICE))
    sender = await create_pool(logins["sender"], min_size=1, max_size=1)
    try:
        mailbox = PostgresMailbox(sender, clock=CLOCK)
        assert await mailbox.answer("q-1") is None
        assert await mailbox.ack(["outbox:q-1:reply:0"]) == []
        assert await sender.fetchval("SELECT count(*) FROM birddog.mailbox") == 0
        assert (
            await sender.fetchval("SELECT count(*) FROM birddog.jobs WHERE job_id = 'attack'") == 0
        )
    finally:
        await sender.close()
    inbox = await cli(logins["sender"], "inbox", "alice", "--ack")
    assert (inbox.returncode, inbox.stdout) == (0, "")
    unread = "SELECT count(*) FROM birddog.mailbox WHERE agent_id = 'alice' AND read_at IS NULL"
    assert await pg_pool.fetchval(unread) == 1


async def test_the_legitimate_ask_still_reads_and_acks_its_answer(
    pg_pool: Pool, logins: dict[str, str]
) -> None:
    """The sender's own mail: enqueued, replayed, its answer read and acknowledged."""
    own = question("own", "q-own", sender=MALLORY)
    assert await enqueue_as(logins["sender"], own) is True
    assert await enqueue_as(logins["sender"], own) is False
    await deliver_to_mailbox(pg_pool, answer("q-own", MALLORY), at=datetime.now(UTC))
    sender = await create_pool(logins["sender"], min_size=1, max_size=1)
    try:
        mailbox = PostgresMailbox(sender, clock=CLOCK)
        found = await mailbox.answer("q-own")
        assert found is not None
        assert found.content == "HELLO"
        assert await mailbox.ack(["outbox:q-own:reply:0"]) == ["outbox:q-own:reply:0"]
    finally:
        await sender.close()


async def test_a_replay_of_an_invisible_job_reveals_nothing(
    pg_pool: Pool, logins: dict[str, str]
) -> None:
    """For a job id the caller cannot read, the conflict names no field and no queue."""
    secret = question("secret-job-77", "q-secret", sender=ALICE, queue="s-secret-queue")
    async with pg_pool.acquire() as conn:
        assert await enqueue_accepted_job(conn, secret)
    probes = [
        question("secret-job-77", "q-probe", sender=MALLORY, queue="s-guess"),
        question("secret-job-77", "q-probe", sender=MALLORY, queue="s-secret-queue"),
        secret.model_copy(update={"priority": 5}),
    ]
    for login in ("sender", "worker"):
        for probe in probes:
            with pytest.raises(JobConflict) as refused:
                await enqueue_as(logins[login], probe)
            message = str(refused.value)
            assert message == "job id 'secret-job-77' is taken; enqueue the job under another id"
    # The replay of a job the login can read still names what differs.
    own = question("mine", "q-mine", sender=MALLORY)
    assert await enqueue_as(logins["sender"], own)
    with pytest.raises(JobConflict, match="different priority"):
        await enqueue_as(logins["sender"], own.model_copy(update={"priority": 5}))
