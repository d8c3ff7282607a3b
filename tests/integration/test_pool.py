"""BirdDog's pool: a release sends nothing, and leaves nothing of the work done on it."""

from __future__ import annotations

import asyncpg

from birddog.postgres.pool import Pool, acquire_within, create_pool


async def _released_statements(pool: Pool) -> list[str]:
    """The statements one connection sends from a ``SELECT 1`` to its next acquire."""
    sent: list[str] = []

    def record(query: asyncpg.connection.LoggedQuery) -> None:
        sent.append(query.query)

    async with acquire_within(pool, 5, "test") as conn:
        conn.add_query_logger(record)
        await conn.fetchval("SELECT 1")
    async with acquire_within(pool, 5, "test") as conn:
        conn.remove_query_logger(record)
    return sent


async def test_a_release_sends_no_reset_statement(database_url: str) -> None:
    """BirdDog's pool gives a connection back without asyncpg's reset round trip."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        assert await _released_statements(pool) == ["SELECT 1"]
    finally:
        await pool.close()
    # asyncpg's own reset, for contrast: the logger sees it.
    pool = await create_pool(database_url, min_size=1, max_size=1, reset=None)
    try:
        sent = await _released_statements(pool)
        assert sent[0] == "SELECT 1"
        assert any("RESET ALL" in statement for statement in sent[1:])
    finally:
        await pool.close()


async def test_a_released_connection_keeps_nothing_of_its_transactions(database_url: str) -> None:
    """Settings and advisory locks BirdDog takes end with the transaction; an open one rolls back."""
    # The tests' server runs without flushes: the pool asks for them on its connections.
    pool = await create_pool(
        database_url, min_size=1, max_size=1, server_settings={"synchronous_commit": "on"}
    )
    try:
        async with acquire_within(pool, 5, "test") as conn, conn.transaction():
            await conn.execute("SET LOCAL statement_timeout = '7s'")
            await conn.execute("SELECT set_config('synchronous_commit', 'off', true)")
            await conn.execute("SELECT pg_advisory_xact_lock(4242)")
        async with acquire_within(pool, 5, "test") as conn:
            # A transaction left open by a failure is rolled back by asyncpg on release.
            await conn.execute("BEGIN")
            await conn.execute("CREATE TABLE left_open (x int)")
        async with acquire_within(pool, 5, "test") as conn:
            settings = await conn.fetchrow(
                "SELECT current_setting('statement_timeout') AS timeout,"
                " current_setting('synchronous_commit') AS sync,"
                " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory') AS locks,"
                " to_regclass('left_open') IS NULL AS rolled_back"
            )
            assert settings is not None
            assert dict(settings) == {
                "timeout": "0",
                "sync": "on",
                "locks": 0,
                "rolled_back": True,
            }
    finally:
        await pool.close()
