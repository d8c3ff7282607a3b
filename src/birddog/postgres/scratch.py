"""A database of the demo's own on the configured server, created and dropped whole.

``birddog demo`` writes routes, jobs, replies and a dead letter; none of that belongs in
the user's database, and a daemon draining that database must not deliver the demo's
replies. So the demo works in ``birddog_demo`` beside it, dropped when the demo ends.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import asyncpg

from birddog.core.errors import DatabaseRefused
from birddog.postgres.pool import connect_errors, describe_database
from birddog.postgres.sql import queries

DEMO_DATABASE = "birddog_demo"
"""The name of the demo's database (the statements in ``queries.sql`` name it too)."""


def with_database(dsn: str, database: str) -> str:
    """The same server and credentials as ``dsn``, pointed at another database.

    Args:
        dsn: a ``postgresql://`` URL.
        database: the database name.

    Returns:
        The URL with its path replaced (query options such as ``host`` are kept).
    """
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


async def create_demo_database(dsn: str) -> str:
    """Create the demo's database afresh (dropping one a crashed demo left behind).

    Args:
        dsn: any database on the server; the demo's database is created beside it.

    Returns:
        The DSN of the demo's database.

    Raises:
        DatabaseRefused: the role may not create databases (the message says why the demo
            needs to).
        StoreUnavailable: the server could not be reached.
    """
    with connect_errors(dsn):
        conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(queries["demo_database_drop"])
        await conn.execute(queries["demo_database_create"])
    except asyncpg.InsufficientPrivilegeError as exc:
        raise DatabaseRefused(
            f"the demo runs in a database of its own ({DEMO_DATABASE}) so it never writes "
            f"into yours, and {describe_database(dsn)} may not create one: {exc}"
        ) from exc
    finally:
        await conn.close()
    return with_database(dsn, DEMO_DATABASE)


async def drop_demo_database(dsn: str) -> None:
    """Drop the demo's database, disconnecting whatever still uses it.

    Args:
        dsn: any database on the server but the demo's own.
    """
    with connect_errors(dsn):
        conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(queries["demo_database_drop"])
    finally:
        await conn.close()
