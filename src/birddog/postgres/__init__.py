"""PostgreSQL adapters: the asyncpg outbox, wake, routes and job store, and the schema.

``await migrate(dsn)`` (:mod:`birddog.postgres.schema`) brings a database to the current
schema; the adapters then work on an asyncpg pool from :func:`create_pool`.

This package only hands names on, and lazily: importing one adapter module
(``birddog.postgres.outbox``) loads that module and what it needs, never Alembic or
SQLAlchemy, which only the migrations use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from birddog.postgres.jobs import ClaimedJob, PostgresJobs, enqueue_accepted_job
    from birddog.postgres.outbox import PostgresOutbox, insert_rows
    from birddog.postgres.pool import create_pool
    from birddog.postgres.routes import PostgresRoutes
    from birddog.postgres.schema import (
        MIGRATION_LOCK_ID,
        SCHEMA,
        alembic_config,
        include_name,
        migrate,
        migrations_dir,
        sqlalchemy_url,
    )
    from birddog.postgres.wake import PostgresWake, WakeListener, schedule_wake_on

_HOME = {
    "ClaimedJob": "jobs",
    "PostgresJobs": "jobs",
    "enqueue_accepted_job": "jobs",
    "PostgresOutbox": "outbox",
    "insert_rows": "outbox",
    "create_pool": "pool",
    "PostgresRoutes": "routes",
    "MIGRATION_LOCK_ID": "schema",
    "SCHEMA": "schema",
    "alembic_config": "schema",
    "include_name": "schema",
    "migrate": "schema",
    "migrations_dir": "schema",
    "sqlalchemy_url": "schema",
    "PostgresWake": "wake",
    "WakeListener": "wake",
    "schedule_wake_on": "wake",
}
"""Each name this package hands on, and the module it lives in."""

__all__ = [
    "MIGRATION_LOCK_ID",
    "SCHEMA",
    "ClaimedJob",
    "PostgresJobs",
    "PostgresOutbox",
    "PostgresRoutes",
    "PostgresWake",
    "WakeListener",
    "alembic_config",
    "create_pool",
    "enqueue_accepted_job",
    "include_name",
    "insert_rows",
    "migrate",
    "migrations_dir",
    "schedule_wake_on",
    "sqlalchemy_url",
]


def __getattr__(name: str) -> Any:
    """Load a handed-on name from its module on first use (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
