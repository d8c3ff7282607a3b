"""A runnable sender: one mail from alice to bob, enqueued in a transaction of its own.

Run it next to the tour (``make run`` in another terminal)::

    .venv/bin/python examples/send.py
    .venv/bin/birddog worker --handler examples.handler:handle --once
    .venv/bin/birddog inbox alice:s-alice          # bob's answer, delivered by the daemon

(After the README's by-hand tour alice has an inbox URL route: the answer goes there, to
``birddog listen alice``, instead of her mailbox.)

It makes its own pool (``DATABASE_URL``, else the database ``birddog uri`` prints), checks
that the database was migrated, gives alice (the reply address) a mailbox route when she
has no route at all (a reply to an agent without one would die ``unknown_recipient``),
and enqueues the mail inside a transaction, where your own rows would be written too.
Running it again changes nothing: the same job is a replay.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from birddog import AgentAddress, AgentWork, BirdDogError, Mail, agent_job
from birddog.clock import SystemClock
from birddog.postgres import enqueue_accepted_job
from birddog.postgres.pool import check_schema, create_pool
from birddog.postgres.routes import PostgresRoutes

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")


def database_url() -> str:
    """``DATABASE_URL``, else what ``birddog uri`` prints (the embedded server's database)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    birddog = Path(sys.executable).parent / "birddog"
    printed = subprocess.run(  # noqa: S603 - the birddog of this interpreter's environment
        [str(birddog), "uri"], capture_output=True, text=True, check=True
    )
    return printed.stdout.strip()


async def send() -> bool:
    """Enqueue the mail; True when it was written now, False when it had been already."""
    pool = await create_pool(database_url(), min_size=1, max_size=2)
    try:
        await check_schema(pool)  # refuses an unmigrated database: run `birddog migrate`
        routes = PostgresRoutes(pool, clock=SystemClock())
        if await routes.missing([ALICE.agent_id]):
            await routes.add(ALICE.agent_id, kind="mailbox")  # or an inbox URL of hers
        mail = Mail(
            key="example-mail-1",
            to=BOB,
            from_=ALICE,
            reply_to=[ALICE],
            content="Anything due in the next 48 hours?",
            created_at=1767225600000,
        )
        job = agent_job(
            AgentWork(job_id="example-job-1", session_id=BOB.session_id, command_fact_id="cmd-1"),
            mail,
        )
        async with pool.acquire() as conn, conn.transaction():
            # Your own rows go here, in the same transaction: roll back, and nothing was sent.
            return await enqueue_accepted_job(conn, job)
    finally:
        await pool.close()


def main() -> int:
    """Send, and say what happened; a BirdDog error is one line and exit status 2."""
    try:
        written = asyncio.run(send())
    except BirdDogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("sent: example-job-1" if written else "already sent: example-job-1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
