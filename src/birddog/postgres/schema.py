"""The schema's migrations: Alembic, configured in code, run under a lock.

``await migrate(dsn)`` brings a database to the current schema (and refreshes the
least-privilege roles' grants); ``migrations/env.py`` and the tests use the rest. This is
the one adapter module that loads Alembic and SQLAlchemy's engine, so the others stay
light to import.
"""

from __future__ import annotations

import asyncio
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from birddog.core.errors import DatabaseRefused
from birddog.postgres.roles import MIGRATION_LOCK_ID, install_roles, refresh_grants
from birddog.postgres.tables import SCHEMA

__all__ = [
    "MIGRATION_LOCK_ID",
    "SCHEMA",
    "alembic_config",
    "include_name",
    "migrate",
    "migrations_dir",
    "sqlalchemy_url",
]

# Alembic's ``context`` is process-global, so two upgrades in one process (two threads)
# would trample each other; across processes the advisory lock serialises them.
_ALEMBIC_LOCK = threading.Lock()


def sqlalchemy_url(dsn: str) -> str:
    """The SQLAlchemy URL (asyncpg driver) for a PostgreSQL DSN.

    Args:
        dsn: ``postgresql://...`` or ``postgres://...`` (libpq style, as asyncpg takes
            it), or a URL that already names a driver.

    Returns:
        The same URL with the ``postgresql+asyncpg`` scheme.
    """
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+asyncpg://" + dsn.removeprefix(prefix)
    url = make_url(dsn)
    if url.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL URL: {url.render_as_string(hide_password=True)}")
    return url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def migrations_dir() -> Path:
    """Where the Alembic revisions are: inside the wheel, or at the top of a checkout.

    Returns:
        ``birddog/_migrations`` of the installed package when present, else the
        repository's ``migrations/`` (editable installs).

    Raises:
        FileNotFoundError: neither exists.
    """
    packaged = Path(str(resources.files("birddog"))) / "_migrations"
    checkout = Path(__file__).resolve().parents[3] / "migrations"
    for candidate in (packaged, checkout):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"no BirdDog migrations at {packaged} or {checkout}")


def alembic_config(dsn: str) -> Config:
    """An Alembic configuration for ``dsn``, built in code (no ``alembic.ini`` needed).

    Args:
        dsn: the database to migrate (``postgresql://...``).

    Returns:
        A config whose ``env.py`` connects to ``dsn`` with asyncpg.
    """
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute, not an ini option, so "%" in passwords needs no escaping.
    config.attributes["dsn"] = dsn
    config.attributes["configure_logger"] = False
    return config


async def migrate(dsn: str, *, revision: str = "head", roles: bool = False) -> None:
    """Upgrade the database to ``revision`` (default: the newest schema).

    Safe to run from several tasks or processes at once: they take turns (a lock in the
    process, an advisory lock in the database). At head, the least-privilege roles'
    grants are applied again when the roles are installed (:mod:`birddog.postgres.roles`).

    Args:
        dsn: the database (``postgresql://...``).
        revision: the Alembic revision to upgrade to.
        roles: also install the roles (``birddog migrate --roles``): create the missing
            ones, give the schema to ``birddog_owner``, grant each role its privileges.
    """
    try:
        # Alembic's env.py runs its own event loop, so it gets a thread of its own.
        await asyncio.to_thread(_run_alembic, command.upgrade, alembic_config(dsn), revision)
        if revision != "head" and not roles:
            return
        conn = await asyncpg.connect(dsn)
        try:
            if roles:
                await install_roles(conn)
            else:
                await refresh_grants(conn)
        finally:
            await conn.close()
    except Exception as exc:
        denied = _denied(exc)
        if denied is None:
            raise
        raise DatabaseRefused(
            f"this login may not {'install the roles' if roles else 'migrate'}: {denied}; "
            "migrate as a member of birddog_owner, and run migrate --roles once as a login "
            "that may create roles and owns the schema (or a superuser)"
        ) from None


def _denied(exc: BaseException) -> str | None:
    """The server's own words when ``exc`` is (or wraps) a missing privilege."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        if isinstance(seen, asyncpg.InsufficientPrivilegeError):
            return str(seen).splitlines()[0]
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return None


def _run_alembic(operation: Any, config: Config, revision: str) -> None:
    with _ALEMBIC_LOCK:
        operation(config, revision)


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic's name filter: only the ``birddog`` schema belongs to BirdDog.

    Args:
        name: the object's name (None for the default schema).
        type_: what kind of object (``schema``, ``table``, ...).
        parent_names: the enclosing names (unused).

    Returns:
        False for every schema but ``birddog``; True for everything inside it.
    """
    if type_ == "schema":
        return name == SCHEMA
    return True
