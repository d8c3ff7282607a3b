"""The database restarts under a running daemon: it reconnects, re-LISTENs and delivers."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from birddog.postgres import migrate
from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.pool import create_pool
from tests.support import eventually
from tests.support.cli import Daemon
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness, fan_out


@pytest.fixture
def own_server() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of this test's own, so it can be restarted."""
    with tempfile.TemporaryDirectory(prefix="birddog-restart-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        server.start()
        try:
            yield server
        finally:
            server.stop(mode="immediate")


@pytest.fixture
async def own_harness(own_server: EmbeddedPostgres, inbox: TestInbox) -> AsyncIterator[Harness]:
    """Adapters over the restartable server."""
    dsn = own_server.dsn()
    await migrate(dsn)
    pool = await create_pool(dsn)
    yield Harness(pool, inbox)
    await pool.close()


async def retrying(action: Callable[[], object]) -> None:
    """Run a database action, retrying while the server comes back."""
    await eventually(
        action,
        "the database to come back",
        until=lambda _: True,
        within_s=10,
        every_s=0.1,
        ignoring=(OSError, asyncpg.PostgresError, asyncpg.InterfaceError),
    )


async def test_daemon_survives_a_database_restart(
    own_server: EmbeddedPostgres, own_harness: Harness, inbox: TestInbox
) -> None:
    """After pg_ctl restart -m immediate the daemon keeps running and delivers new replies."""
    await own_harness.add_agent("alice")
    daemon = Daemon(own_server.dsn(), BIRDDOG_BACKSTOP_S="60")
    try:
        before = await fan_out(own_harness, 5, ["alice"], prefix="before")
        await eventually(lambda: _receipts(own_harness, 5), "first receipts", within_s=30)
        await asyncio.to_thread(own_server.restart, "immediate")
        await retrying(lambda: own_harness.pool.fetchval("SELECT 1"))
        after: list[str] = []

        async def add() -> None:
            after.extend(await fan_out(own_harness, 5, ["alice"], prefix="after"))

        await retrying(add)
        await eventually(
            lambda: _receipts(own_harness, 10), "receipts after the restart", within_s=30
        )
        assert daemon.proc.poll() is None, "the daemon died with the database"
        assert set(inbox.posts) == set(before + after)
    finally:
        code, log = await asyncio.to_thread(daemon.terminate)
    assert code == 0, log[-2000:]
    assert "database_unavailable" in log or "listener" in log


async def _receipts(harness: Harness, expected: int) -> bool:
    try:
        return await harness.receipts() >= expected
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False


async def test_a_daemon_started_before_its_database_waits_for_it(
    own_server: EmbeddedPostgres, own_harness: Harness, inbox: TestInbox
) -> None:
    """A daemon whose database is down at start waits, then delivers once it is up."""
    await own_harness.add_agent("alice")
    dsn = own_server.dsn()
    await own_harness.pool.close()
    await asyncio.to_thread(own_server.stop)
    daemon = Daemon(dsn)
    try:

        async def waiting() -> bool:
            return "database_unavailable" in daemon.log()

        await eventually(waiting, "the daemon to wait for its database", within_s=30)
        await asyncio.to_thread(own_server.start)
        fresh = Harness(await create_pool(dsn), inbox)
        try:
            keys = await fan_out(fresh, 3, ["alice"], prefix="late")
            await eventually(lambda: _receipts(fresh, 3), "receipts", within_s=30)
        finally:
            await fresh.pool.close()
        assert set(inbox.posts) == set(keys)
    finally:
        code, log = await asyncio.to_thread(daemon.terminate)
    assert code == 0, log[-2000:]
    assert "database_unavailable" in log


REFUSAL = "refused-by-a-trigger-7f3a"
"""The text of the server's refusal: it quotes whatever the trigger says, so never logged."""


async def test_a_statement_the_database_refuses_never_ends_the_daemon(
    daemons: Callable[..., Daemon], harness: Harness, inbox: TestInbox
) -> None:
    """A statement the database refuses leaves the daemon running and retrying.

    A refused claim (a trigger here; a deadlock, a statement timeout or a revoked
    privilege alike): once the cause is gone the waiting replies are delivered, and the
    log names the error's class, never its text.
    """
    await harness.add_agent("alice")
    daemon = daemons(BIRDDOG_BACKSTOP_S="1")
    first = await fan_out(harness, 3, ["alice"], prefix="before")
    await eventually(lambda: _receipts(harness, 3), "first receipts", within_s=30)
    await harness.pool.execute(
        f"""
        CREATE FUNCTION birddog.refuse() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$;
        CREATE TRIGGER refuse BEFORE UPDATE ON birddog.outbox
        FOR EACH ROW EXECUTE FUNCTION birddog.refuse();
        """
    )
    later = await fan_out(harness, 3, ["alice"], prefix="after")

    async def refused() -> bool:
        return "SQLSTATE P0001" in daemon.log()

    await eventually(refused, "the daemon to meet the refusal", within_s=30)
    assert daemon.proc.poll() is None, daemon.log()[-2000:]
    await harness.pool.execute(
        "DROP TRIGGER refuse ON birddog.outbox; DROP FUNCTION birddog.refuse()"
    )
    await eventually(lambda: _receipts(harness, 6), "receipts after it", within_s=30)
    code, log = await asyncio.to_thread(daemon.terminate)
    assert code == 0, log[-2000:]
    assert set(inbox.posts) == set(first + later)
    assert REFUSAL not in log
