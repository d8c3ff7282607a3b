"""The asyncpg pool the adapters share, and the translation of connection failures.

``create_pool`` sets a JSON codec for ``json``/``jsonb`` on every connection, so JSON
columns come back as Python values. ``store_errors()`` turns "the database is not there"
into :class:`birddog.StoreUnavailable`; every other database error passes unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from birddog.core.errors import StoreUnavailable

if TYPE_CHECKING:
    Pool: TypeAlias = asyncpg.Pool[asyncpg.Record]
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
else:
    Pool = asyncpg.Pool
    Connection = asyncpg.Connection | PoolConnectionProxy
"""``Pool``: an asyncpg pool. ``Connection``: a plain or a pooled asyncpg connection."""

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # class 08: connection lost, refused, failed
    asyncpg.CannotConnectNowError,  # 57P03: starting up or shutting down
    asyncpg.AdminShutdownError,  # 57P01: terminated by the administrator / restart
    asyncpg.CrashShutdownError,  # 57P02: another backend crashed
    asyncpg.TooManyConnectionsError,  # 53300
    asyncpg.InterfaceError,  # the connection is closed or the pool is closing
    ConnectionError,
    OSError,
    TimeoutError,
)


async def _init_connection(conn: Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name,
            encoder=json.dumps,
            decoder=json.loads,
            schema="pg_catalog",
        )


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    **kwargs: Any,
) -> Pool:
    """Open an asyncpg pool for the BirdDog adapters.

    Every connection decodes ``json``/``jsonb`` to Python values and encodes Python
    values (``dict``, ``list``, ...) with ``json.dumps``. Statements are planned for their
    actual parameters every time (``plan_cache_mode = force_custom_plan``): a claim at
    ``now`` must use the due-time index when the backlog lies in the future, which a
    generic plan cannot know.

    Args:
        dsn: ``postgresql://...`` (a unix socket is ``?host=/dir``).
        min_size: connections kept open.
        max_size: the most connections at once.
        **kwargs: passed to :func:`asyncpg.create_pool`.

    Returns:
        The open pool; close it with ``await pool.close()``.

    Raises:
        StoreUnavailable: the database could not be reached.
    """
    settings = {"plan_cache_mode": "force_custom_plan"}
    settings.update(kwargs.pop("server_settings", None) or {})
    with store_errors("create_pool"):
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            server_settings=settings,
            **kwargs,
        )
    if pool is None:  # asyncpg types the awaited pool as optional; it never is
        raise StoreUnavailable("create_pool returned no pool")
    return pool


@contextmanager
def store_errors(operation: str) -> Iterator[None]:
    """Translate a lost or unreachable database into :class:`StoreUnavailable`.

    Args:
        operation: what was being done, for the message (never values or content).

    Yields:
        Nothing; the body runs inside the translation.

    Raises:
        StoreUnavailable: the body failed because the database is not reachable; the
            driver's error is its ``__cause__``.
    """
    try:
        yield
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(
            f"database unavailable during {operation}: {type(exc).__name__}"
        ) from exc
