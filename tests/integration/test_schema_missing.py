"""A database without the birddog schema, or with an older one, says "run `birddog migrate`"."""

from __future__ import annotations

import asyncpg
import pytest

from birddog import SchemaMissing
from birddog.postgres import enqueue_accepted_job
from birddog.postgres.daemons import PostgresDaemons
from birddog.postgres.pool import Pool, check_schema, create_pool
from birddog.postgres.reports import PostgresReports
from tests.support import make_job


async def test_a_library_send_into_an_unmigrated_database_names_the_fix(
    empty_database_url: str,
) -> None:
    """enqueue_accepted_job on a database never migrated raises SchemaMissing, not a driver error."""
    conn = await asyncpg.connect(empty_database_url)
    try:
        with pytest.raises(SchemaMissing) as raised:
            async with conn.transaction():
                await enqueue_accepted_job(conn, make_job("j1"))
    finally:
        await conn.close()
    # The write path is a function in the schema, so the schema itself is what is missing.
    assert str(raised.value).startswith("the database has no birddog schema (")
    assert str(raised.value).endswith("run `birddog migrate`")


async def test_the_start_check_refuses_a_database_never_migrated(empty_database_url: str) -> None:
    """One statement tells a process, before it says it is ready, that the schema is missing."""
    pool = await create_pool(empty_database_url, max_size=1)
    try:
        with pytest.raises(SchemaMissing, match="run `birddog migrate`"):
            await check_schema(pool)
    finally:
        await pool.close()


async def test_a_column_a_newer_revision_adds_says_the_schema_is_older(pg_pool: Pool) -> None:
    """A statement that needs a column the database lacks says the schema is older than BirdDog."""
    await PostgresDaemons(pg_pool, kind="drain").seen()
    await pg_pool.execute("ALTER TABLE birddog.daemons DROP COLUMN stopped_at")
    with pytest.raises(SchemaMissing) as raised:
        await PostgresReports(pg_pool).due_without_daemon(within_s=60)
    message = str(raised.value)
    assert message.startswith("the birddog schema is older than this BirdDog (column ")
    assert message.endswith("run `birddog migrate`")
