"""Statements run as one role's login: what the database answers, a refusal or a value."""

from __future__ import annotations

from typing import Any

import asyncpg

DENIED = "42501"
"""insufficient_privilege"""


async def refusal(dsn: str, statement: str, *args: Any) -> str | None:
    """The SQLSTATE the database answers ``statement`` with as this login (None: it ran)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement, *args)
    except asyncpg.PostgresError as exc:
        return exc.sqlstate
    finally:
        await conn.close()
    return None


async def value_as(dsn: str, statement: str, *args: Any) -> Any:
    """The first value ``statement`` answers as this login."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()
