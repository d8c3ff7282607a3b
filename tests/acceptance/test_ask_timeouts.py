"""``birddog ask`` timing out says where the ask stands: queued, running, settled and owed.

Each test asks with a key and a short timeout, moves the ask along (a worker takes it, a
daemon does or does not deliver its reply), and asks again with the same key (a replay:
the same job) to read what the timeout says now. Exit status 2 throughout.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from birddog import AgentAddress
from birddog.clock import SystemClock
from birddog.postgres.asks import PostgresAsks
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import eventually
from tests.support.cli import Daemon, cli

ASKER = "asker:s-ask"
ASKER_ADDRESS = AgentAddress(agent_id="asker", session_id="s-ask")
TARGET = "upper:s-upper"
OWED = "it is still owed and will land in the mailbox of asker:s-ask (birddog inbox asker:s-ask)"


@pytest.fixture
async def upper(pg_pool: Pool) -> None:
    """The asked agent is known: it has a route (a mailbox, as a command agent needs none)."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("upper", kind="mailbox")


async def ask(database_url: str, key: str) -> subprocess.CompletedProcess[str]:
    """``birddog ask`` with ``key`` and a one-second timeout; it must time out (exit 2)."""
    asked = await cli(
        database_url, "ask", "--to", TARGET, "--from", ASKER, "--key", key, "--timeout", "1", "hi"
    )
    assert asked.returncode == 2, (asked.stdout, asked.stderr)
    assert asked.stdout == ""
    return asked


async def job_state(pool: Pool) -> str | None:
    state: str | None = await pool.fetchval("SELECT state FROM birddog.jobs")
    return state


@pytest.mark.usefixtures("upper")
async def test_a_queued_ask_says_nobody_took_it_and_whether_a_worker_beat(
    database_url: str, pg_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """No worker: queued for the session, no worker beat; with one on another queue: it beat."""
    alone = await ask(database_url, "q-1")
    assert "nobody has taken it: its job has been queued for session s-upper for" in alone.stderr
    assert "no birddog worker beat in the last 1m 00s" in alone.stderr
    assert OWED in alone.stderr
    daemons("--command", "cat", "--queue", "s-elsewhere", command="worker")
    await eventually(
        lambda: pg_pool.fetchval(
            "SELECT count(*) FROM birddog.daemons WHERE kind = 'worker' AND stopped_at IS NULL"
        ),
        "the other worker's first beat",
        within_s=60,
    )
    elsewhere = await ask(database_url, "q-1")
    assert "1 worker beat in the last 1m 00s and none took it: is one serving s-upper?" in (
        elsewhere.stderr
    )
    assert await job_state(pg_pool) == "queued"


@pytest.mark.usefixtures("upper")
async def test_a_running_ask_says_for_how_long(
    database_url: str, pg_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """A worker busy with the job: the timeout says it has been running, in the session."""
    await ask(database_url, "r-1")
    daemons("--command", "sleep 120", command="worker")
    await eventually(
        lambda: job_state(pg_pool), "the worker to take the job", until="running".__eq__
    )
    running = await ask(database_url, "r-1")
    assert "a worker has been running its job (session s-upper) for" in running.stderr
    assert OWED in running.stderr


async def as_before_revision_0034(pg_pool: Pool, key: str) -> None:
    """Make the ask of ``key`` one sent before revision 0034: no ``askerMailbox`` mark.

    Every ask is marked now, and its reply to the asker goes into the asker's mailbox at
    the settlement whatever the asker's route; an ask queued before that revision has no
    mark, and its reply follows the route, so it can still be held, pending or dead: the
    states whose timeout messages these tests read.
    """
    changed = await pg_pool.execute(
        "UPDATE birddog.jobs SET payload = payload - 'askerMailbox' "
        "WHERE payload #>> '{mail,key}' = $1 AND payload ? 'askerMailbox'",
        key,
    )
    assert changed == "UPDATE 1", changed


async def hold_while_settling(database_url: str) -> None:
    """Run one worker turn with the asker's route held, so its reply stays owed in the outbox.

    A settlement delivers a reply to an enabled mailbox itself; held, the reply waits for a
    drain, which is the state these tests read. The route is released afterwards.
    """
    for args in (("route", "hold", "asker"), ("worker", "--command", "tr a-z A-Z", "--once")):
        done = await cli(database_url, *args)
        assert done.returncode == 0, done.stderr
    released = await cli(database_url, "route", "release", "asker")
    assert released.returncode == 0, released.stderr


@pytest.mark.usefixtures("upper")
async def test_a_settled_ask_whose_reply_is_not_delivered_says_pending_and_why(
    database_url: str, pg_pool: Pool
) -> None:
    """Settled, no daemon: pending, and no daemon beat; with the asker held: it says held."""
    await ask(database_url, "p-1")
    await as_before_revision_0034(pg_pool, "p-1")
    await hold_while_settling(database_url)
    pending = await ask(database_url, "p-1")
    assert "route is held" not in pending.stderr
    assert "its job settled completed; the reply is not delivered yet (pending)" in pending.stderr
    assert "no drain daemon beat in the last 1m 00s: start one (birddog run)" in pending.stderr
    assert OWED in pending.stderr
    held = await cli(database_url, "route", "hold", "asker")
    assert held.returncode == 0, held.stderr
    still = await ask(database_url, "p-1")
    assert "the asker's route is held (birddog route release)" in still.stderr


@pytest.mark.usefixtures("upper")
async def test_an_ask_whose_reply_died_says_why_and_how_to_replay_it(
    database_url: str, pg_pool: Pool
) -> None:
    """The asker's route removed before delivery: the reply died unknown_recipient; replay it."""
    await ask(database_url, "d-1")
    await as_before_revision_0034(pg_pool, "d-1")
    # Removed before the settlement, which would otherwise deliver into the mailbox.
    removed = await cli(database_url, "route", "remove", "asker")
    assert removed.returncode == 0, removed.stderr
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    drained = await cli(database_url, "run", "--once")
    assert drained.returncode == 0, drained.stderr
    dead = await ask(database_url, "d-1")
    assert "its job settled completed, but the reply died: unknown_recipient" in dead.stderr
    assert "birddog replay outbox:d-1:reply:0" in dead.stderr
    assert "still owed" not in dead.stderr


@pytest.mark.usefixtures("upper")
async def test_a_senders_login_reads_where_its_own_ask_stands_and_no_other(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """Under the sender role the timeout still says queued, then pending; another's reply stays unseen."""
    queued = await ask(logins["sender"], "s-1")
    assert "nobody has taken it: its job has been queued for session s-upper" in queued.stderr
    await as_before_revision_0034(pg_pool, "s-1")
    await hold_while_settling(database_url)
    pending = await ask(logins["sender"], "s-1")
    assert "its job settled completed; the reply is not delivered yet (pending)" in pending.stderr
    await ask(database_url, "o-1")  # the operator's own ask, settled too
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    sender = await create_pool(logins["sender"], min_size=1, max_size=1)
    try:
        theirs = await PostgresAsks(sender).facts("o-1", ASKER_ADDRESS, timeout_s=10)
        mine = await PostgresAsks(sender).facts("s-1", ASKER_ADDRESS, timeout_s=10)
    finally:
        await sender.close()
    assert (theirs.job_state, theirs.reply_state) == (None, None)
    assert (mine.job_state, mine.reply_state) == ("settled", "pending")
