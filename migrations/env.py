"""Alembic environment for the ``birddog`` schema (asyncpg driver).

The database URL comes, in order, from ``config.attributes["dsn"]`` (programmatic use,
see ``birddog.postgres.migrate``), ``-x dsn=...``, ``BIRDDOG_DATABASE_URL`` or
``DATABASE_URL``. The version table lives in the ``birddog`` schema, so BirdDog's
revisions never collide with the host application's own ``public.alembic_version``.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from birddog.postgres import MIGRATION_LOCK_ID, include_name, sqlalchemy_url
from birddog.postgres.tables import SCHEMA, metadata

config = context.config

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _dsn() -> str:
    dsn = (
        config.attributes.get("dsn")
        or context.get_x_argument(as_dictionary=True).get("dsn")
        or os.environ.get("BIRDDOG_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
    )
    if not dsn:
        raise SystemExit("set BIRDDOG_DATABASE_URL or DATABASE_URL, or pass -x dsn=...")
    return sqlalchemy_url(dsn)


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=metadata,
        include_schemas=True,
        include_name=include_name,
        version_table_schema=SCHEMA,
        **kwargs,  # type: ignore[arg-type]
    )


# Once ``birddog migrate --roles`` gave the schema to birddog_owner, migrations act as that
# role, so what they create belongs to it too (a login only needs to be a member of it).
_ACT_AS_OWNER = """
DO $owner$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
        WHERE n.nspname = 'birddog' AND r.rolname = 'birddog_owner'
          AND pg_has_role(current_user, r.oid, 'MEMBER')
    ) THEN
        SET LOCAL ROLE birddog_owner;
    END IF;
END
$owner$
"""


_CREATE_SCHEMA = """
DO $create$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'birddog') THEN
        CREATE SCHEMA birddog;
    END IF;
END
$create$
"""


def _run() -> None:
    with context.begin_transaction():
        # Two daemons starting at once must not both create the schema.
        context.execute(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
        context.execute(_ACT_AS_OWNER)
        # Only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
        # when the schema exists, which the owner role does not have.
        context.execute(_CREATE_SCHEMA)
        context.run_migrations()


def run_migrations_offline() -> None:
    _configure(url=_dsn(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    _run()


def _run_on(connection: Connection) -> None:
    _configure(connection=connection)
    _run()


async def run_async_migrations() -> None:
    engine = create_async_engine(_dsn(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_async_migrations())
