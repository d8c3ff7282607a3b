"""The asyncpg pool the adapters share, and the translation of connection failures.

``create_pool`` sets a JSON codec for ``json``/``jsonb`` on every connection, so JSON
columns come back as Python values. ``store_errors()`` turns every driver failure (the
database is not there, or the server refused the statement) into
:class:`birddog.StoreUnavailable`, so the adapters' callers catch BirdDog errors only.
``connect_errors(dsn)`` does the same for opening connections and tells the two kinds of
failure apart: :class:`birddog.StoreUnreachable` for what may pass (the server is down or
starting), :class:`birddog.DatabaseRefused` for what will not (a failed login, a missing
role or database, a malformed URL). Both name the host and database, never the password.
:func:`acquire_within` tells them apart for a pool's connection too, so a sender knows
that nothing of its operation reached the database (and may spool it).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from birddog.core.errors import (
    DatabaseRefused,
    SchemaMissing,
    StoreBusy,
    StoreRefused,
    StoreUnavailable,
    StoreUnreachable,
)
from birddog.core.spool import Destination
from birddog.core.text import printable
from birddog.postgres.sql import queries

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
    # A connection the server dropped while it sat idle, handed out before the driver read
    # its end of file ("cannot switch to state ..."; asyncpg issue #1069): once read, the
    # pool replaces it.
    asyncpg.InternalClientError,
    ConnectionError,
    OSError,
    TimeoutError,
)


_TRANSIENT: tuple[type[BaseException], ...] = (
    asyncpg.TransactionRollbackError,  # class 40: serialization failure, deadlock
    asyncpg.LockNotAvailableError,  # 55P03
    asyncpg.QueryCanceledError,  # 57014: statement timeout, cancelled
    asyncpg.InsufficientResourcesError,  # class 53: disk full, out of memory
)
"""Statements the server turned down for its own state, not for their data: trying again
later may succeed, so they are not refusals of a row."""

_BAD_ARGUMENT: tuple[type[BaseException], ...] = (asyncpg.exceptions._base.DataError,)
"""A value the driver could not send (client side, before the server saw it)."""

_SCHEMA_MISSING: tuple[type[BaseException], ...] = (
    asyncpg.UndefinedTableError,  # 42P01: relation "birddog.x" does not exist
    asyncpg.InvalidSchemaNameError,  # 3F000: schema "birddog" does not exist
    asyncpg.UndefinedColumnError,  # 42703: a column a newer revision adds
    asyncpg.UndefinedFunctionError,  # 42883: a function a newer revision adds
)
"""Refusals that mean the schema is not there, or is older than this BirdDog.

Every statement BirdDog sends names its objects in the ``birddog`` schema, so these say
the schema is missing or behind, never that a statement is wrong."""

_REFUSED: tuple[type[BaseException], ...] = (
    asyncpg.InvalidAuthorizationSpecificationError,  # 28000: no such role, no pg_hba entry
    asyncpg.InvalidPasswordError,  # 28P01: wrong password
    asyncpg.InvalidCatalogNameError,  # 3D000: no such database
    asyncpg.InsufficientPrivilegeError,  # 42501: no CONNECT privilege
)
"""Connection failures that retrying cannot fix: the configuration must change."""

_CONNECT_FAILED: tuple[type[BaseException], ...] = (*_UNAVAILABLE, asyncpg.PostgresError)
"""Any other failure to connect (a server starting up, too many connections) may pass."""

CONNECT_TIMEOUT_S = 10.0
"""How long one connection attempt may take."""


def describe_database(dsn: str) -> str:
    """Name the database a DSN points at, for people: database, host, user, no password.

    Args:
        dsn: ``postgresql://user:password@host:port/database?host=/socket/dir``.

    Returns:
        E.g. ``database "birddog" on db.internal:5432 as "birddog"``; a DSN that cannot
        be parsed is described as such.
    """
    try:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query)
        host = parts.hostname or query.get("host", [""])[0] or "the default socket"
        port = parts.port or query.get("port", [""])[0]
        user = unquote(parts.username or query.get("user", [""])[0])
        database = unquote(parts.path.lstrip("/")) or query.get("dbname", [""])[0] or user
    except ValueError:
        return "the database URL"
    where = f"{host}:{port}" if port else host
    named = f'database "{database}"' if database else "the default database"
    who = f' as "{user}"' if user else ""
    return printable(f"{named} on {where}{who}")


def destination_of(dsn: str) -> Destination | None:
    """The database a DSN names, as a spooled mail records it: never the password.

    What the DSN leaves out is what libpq and asyncpg would use: ``PGHOST``, ``PGPORT``,
    ``PGUSER``, ``PGDATABASE``, else port 5432, the OS user, a database named as the user.

    Args:
        dsn: ``postgresql://user:password@host:port/database?host=/socket/dir``.

    Returns:
        Its host, port, database and user; None for a DSN that cannot be parsed (its mail
        is then filed under no database).
    """
    try:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query)
        host = parts.hostname or query.get("host", [""])[0] or os.environ.get("PGHOST", "")
        port = int(parts.port or query.get("port", [""])[0] or os.environ.get("PGPORT") or 5432)
        user = (
            unquote(parts.username or "")
            or query.get("user", [""])[0]
            or os.environ.get("PGUSER", "")
            or getpass.getuser()
        )
        database = (
            unquote(parts.path.lstrip("/"))
            or query.get("dbname", [""])[0]
            or os.environ.get("PGDATABASE", "")
            or user
        )
    except (ValueError, KeyError, OSError):
        return None
    return Destination(host=host, port=port, database=database, user=user)


def _password(dsn: str) -> str | None:
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return None
    return parts.password or parse_qs(parts.query).get("password", [None])[0]


def url_problem(dsn: str) -> str | None:
    """What makes ``dsn`` unusable as a PostgreSQL URL, or None when it looks right.

    Args:
        dsn: the database URL.

    Returns:
        One line naming the part that is wrong (the password is never repeated).
    """
    try:
        parts = urlsplit(dsn)
        if parts.scheme not in {"postgresql", "postgres"}:
            shown = printable(parts.scheme) if parts.scheme else "none"
            return f"the scheme must be postgresql:// or postgres://, not {shown}"
        _ = parts.port
    except ValueError as exc:
        return printable(str(exc))
    return None


def failure_reason(exc: BaseException, *, dsn: str | None = None) -> str:
    """The driver's reason for a failed connection or query, in one line for people.

    Args:
        exc: what the driver raised.
        dsn: the DSN that was used; its password is masked wherever the reason repeats it.

    Returns:
        The server's own message for a PostgreSQL error, a plain reading of a network
        error, else the exception's text; never empty, never the password.
    """
    if isinstance(exc, ConnectionRefusedError):
        reason = "connection refused (is PostgreSQL running and listening there?)"
    elif isinstance(exc, FileNotFoundError):
        reason = "no server socket there (is PostgreSQL running?)"
    elif isinstance(exc, socket.gaierror):
        reason = f"cannot resolve the host name ({exc.strerror or exc})"
    elif isinstance(exc, TimeoutError):
        reason = "timed out"
    else:
        reason = re.sub(r"\[Errno -?\d+\] ", "", str(exc)) or type(exc).__name__
    password = _password(dsn) if dsn else None
    if password:
        # Whole words only: a short password must not mask letters of the message.
        reason = re.sub(rf"(?<!\w){re.escape(password)}(?!\w)", "***", reason)
    return printable(" ".join(reason.split()))


@contextmanager
def connect_errors(dsn: str) -> Iterator[None]:
    """Translate a failure to connect to ``dsn`` into a BirdDog error that names it.

    Args:
        dsn: the DSN being connected to.

    Yields:
        Nothing; the body runs inside the translation.

    Raises:
        DatabaseRefused: a failure retrying cannot fix (login, role, database, URL).
        StoreUnreachable: a failure that may pass (server down, starting, unreachable).
    """
    try:
        yield
    except ValueError as exc:  # asyncpg's ClientConfigurationError is one too
        why = url_problem(dsn) or failure_reason(exc, dsn=dsn)
        raise DatabaseRefused(f"the database URL (DATABASE_URL) is malformed: {why}") from exc
    except _REFUSED as exc:
        raise DatabaseRefused(
            f"{describe_database(dsn)} refused the connection: {failure_reason(exc, dsn=dsn)}"
        ) from exc
    except _CONNECT_FAILED as exc:
        raise StoreUnreachable(
            f"cannot reach {describe_database(dsn)}: {failure_reason(exc, dsn=dsn)}"
        ) from exc


async def check_connection(dsn: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Open one connection to ``dsn`` and close it again.

    Args:
        dsn: the database.
        timeout_s: how long the attempt may take.

    Raises:
        DatabaseRefused: the database turned the connection away for good.
        StoreUnreachable: the database could not be reached (yet).
    """
    with connect_errors(dsn):
        conn = await asyncpg.connect(dsn, timeout=timeout_s)
    await conn.close()


async def _init_connection(conn: Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name,
            encoder=json.dumps,
            decoder=json.loads,
            schema="pg_catalog",
        )


async def _keep_session(conn: Connection) -> None:
    """The release's reset: nothing beyond what asyncpg always does (see :func:`create_pool`)."""
    del conn


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    pgbouncer: bool = False,
    **kwargs: Any,
) -> Pool:
    """Open an asyncpg pool for the BirdDog adapters.

    Every connection decodes ``json``/``jsonb`` to Python values and encodes Python
    values (``dict``, ``list``, ...) with ``json.dumps``. Statements are planned for their
    actual parameters every time (``plan_cache_mode = force_custom_plan``): a claim at
    ``now`` must use the due-time index when the backlog lies in the future, which a
    generic plan cannot know.

    Through PgBouncer in transaction mode (``pgbouncer``), consecutive statements may run
    on different server connections, so nothing may be prepared under a name: the
    statement cache is off (every statement is then unnamed, so planned for its
    parameters anyway), and no setting is sent at start-up (PgBouncer refuses unknown
    start-up parameters). Only a LISTEN needs a direct connection.

    A released connection is not reset with a statement. asyncpg's default reset sends
    ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` on every release,
    a round trip the releasing task waits for (about a dozen per ask). BirdDog leaves none
    of that on a pooled connection: its settings are ``SET LOCAL`` / ``set_config(...,
    true)`` (they end with the transaction), its advisory locks are transaction locks, its
    cursors live inside transactions, and it LISTENs on dedicated connections only. What
    asyncpg does on every release whatever the reset (an open transaction rolled back,
    listener callbacks dropped) still happens. A caller that sets session state on a
    connection of this pool passes its own ``reset`` (asyncpg's: ``Connection.reset``).

    Args:
        dsn: ``postgresql://...`` (a unix socket is ``?host=/dir``).
        min_size: connections kept open.
        max_size: the most connections at once.
        pgbouncer: ``dsn`` is a PgBouncer in transaction (or statement) mode.
        **kwargs: passed to :func:`asyncpg.create_pool`.

    Returns:
        The open pool; close it with ``await pool.close()``.

    Raises:
        DatabaseRefused: the database turned the connection away for good.
        StoreUnavailable: the database could not be reached.
    """
    settings = {} if pgbouncer else {"plan_cache_mode": "force_custom_plan"}
    settings.update(kwargs.pop("server_settings", None) or {})
    if pgbouncer:
        kwargs["statement_cache_size"] = 0
    kwargs.setdefault("reset", _keep_session)
    with connect_errors(dsn):
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


@asynccontextmanager
async def acquire_within(
    pool: Pool, timeout_s: float, operation: str, *, open_within_s: float = 0.0
) -> AsyncIterator[Connection]:
    """A pool connection, waited for no longer than ``timeout_s``.

    Many callers on a small pool queue for a connection; a caller with a deadline (an
    ask, a tool call) must not wait past it for one. Nothing of the operation has been
    sent when this fails, so the errors say which failure it was: the pool was full, or
    no connection could be opened (the server down or unreachable), or the server turned
    the login away.

    Args:
        pool: the pool (one made with ``min_size=0`` opens its first connection here).
        timeout_s: the longest wait for a free connection.
        operation: what it is for, for the message.
        open_within_s: when the pool must open a connection (it has none free), give the
            attempt at least this long, whatever ``timeout_s`` says. A sender that spools
            what the database cannot take passes :data:`CONNECT_TIMEOUT_S`: a short
            deadline (``ask --timeout 0``) must not turn a connection still opening on a
            server that is up into "unreachable".

    Yields:
        The connection, released when the block ends.

    Raises:
        StoreBusy: every connection was in use for ``timeout_s``; nothing was done.
        StoreUnreachable: no connection could be opened; nothing reached the database.
        DatabaseRefused: the database turned the connection away for good.
    """
    # A full pool that times out is busy; one that could open a connection and did not
    # get one in time found the server too slow to answer, or gone.
    full = pool.get_idle_size() == 0 and pool.get_size() >= pool.get_max_size()
    wait_s = timeout_s if full or pool.get_idle_size() else max(timeout_s, open_within_s)
    try:
        conn = await pool.acquire(timeout=max(wait_s, 0.001))
    except TimeoutError as exc:
        if full:
            raise StoreBusy(
                f"no database connection was free for {operation} within {timeout_s:g} s; "
                "nothing was done"
            ) from exc
        raise StoreUnreachable(
            f"cannot reach the database for {operation}: no connection within {wait_s:g} s"
        ) from exc
    except ValueError as exc:
        raise DatabaseRefused(f"the database URL is malformed: {failure_reason(exc)}") from exc
    except _REFUSED as exc:
        raise DatabaseRefused(
            f"the database refused the connection: {failure_reason(exc)}"
        ) from exc
    except _CONNECT_FAILED as exc:
        raise StoreUnreachable(
            f"cannot reach the database for {operation}: {failure_reason(exc)}"
        ) from exc
    try:
        yield conn
    finally:
        await _release(pool, conn)


async def _release(pool: Pool, conn: PoolConnectionProxy[asyncpg.Record]) -> None:
    """Give ``conn`` back; one that cannot be reset in time is closed, never an error.

    The work on it is done (committed, or its error on its way up): a release cut short
    (a loaded server slow to answer the reset, a deadline expiring meanwhile) only costs
    the pool that connection, which asyncpg terminates and replaces on the next acquire.
    """
    try:
        await pool.release(conn)
    except (
        TimeoutError,
        OSError,
        asyncpg.InterfaceError,
        asyncpg.InternalClientError,
        asyncpg.PostgresError,
    ):
        if not conn.is_closed():
            conn.terminate()


@contextmanager
def store_errors(operation: str) -> Iterator[None]:
    """Translate every database driver failure into :class:`StoreUnavailable`.

    A lost or unreachable database, and a statement the server refused (a constraint, a
    trigger, a serialization failure or deadlock, a statement timeout, a revoked
    privilege, a read-only server after a failover): either way the operation failed and
    the caller backs off or gives up on it. No caller needs the driver's types, and no
    driver error reaches a daemon's or a worker's loop to end it.

    Args:
        operation: what was being done, for the message (never values or content).

    Yields:
        Nothing; the body runs inside the translation.

    Raises:
        SchemaMissing: the statement names a table, column or function of the
            ``birddog`` schema the database does not have (not migrated, or migrated by
            an older BirdDog): the message says to run ``birddog migrate``.
        StoreUnavailable: the body failed in the driver or the server; the driver's error
            is its ``__cause__`` (:func:`refusal_reason` reads the server's reason from
            it). For a refusal the message names the error's class and SQLSTATE, never
            its text, which may quote stored values.
    """
    try:
        yield
    except _BAD_ARGUMENT as exc:
        # The driver could not encode a value (an int beyond int4, say): refused, too.
        raise StoreRefused(f"database refused {operation}: {type(exc).__name__}") from exc
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(
            f"database unavailable during {operation}: {failure_reason(exc)}"
        ) from exc
    except _SCHEMA_MISSING as exc:
        raise schema_missing(exc) from exc
    except _TRANSIENT as exc:
        state = getattr(exc, "sqlstate", "")
        raise StoreUnavailable(
            f"database busy during {operation}: {type(exc).__name__} (SQLSTATE {state})"
        ) from exc
    except asyncpg.PostgresError as exc:
        raise StoreRefused(
            f"database refused {operation}: {type(exc).__name__} (SQLSTATE {exc.sqlstate})"
        ) from exc


def schema_missing(exc: BaseException) -> SchemaMissing:
    """The one error for a database without the ``birddog`` schema (or with an older one).

    Args:
        exc: the server's refusal (42P01, 3F000, 42703 or 42883).

    Returns:
        The error to raise, its message ending with what to do: run ``birddog migrate``.
    """
    said = printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if isinstance(exc, asyncpg.UndefinedColumnError | asyncpg.UndefinedFunctionError):
        what = "the birddog schema is older than this BirdDog"
    else:
        what = "the database has no birddog schema"
    return SchemaMissing(f"{what} ({said}): run `birddog migrate`")


async def check_schema(conn: Pool | Connection) -> None:
    """Refuse, before anything is written or announced, a database that was never migrated.

    One statement: the schema's version table (every role may read it).

    Args:
        conn: a pool or a connection to the database.

    Raises:
        SchemaMissing: no ``birddog`` schema (or no version in it): run ``birddog migrate``.
    """
    with store_errors("schema check"):
        version = await conn.fetchval(queries["schema_version"])
    if version is None:
        raise SchemaMissing(
            "the database's birddog schema has no version (a migration never finished): "
            "run `birddog migrate`"
        )


def refusal_reason(exc: BaseException) -> str | None:
    """The server's reason for refusing a statement, for one line of a command's output.

    Args:
        exc: the error caught: a driver error, or a :class:`StoreUnavailable` from one.

    Returns:
        The server's message and SQLSTATE, made printable (it may quote stored text), or None
        when ``exc`` is not a statement the server refused.
    """
    if not is_refusal(exc):
        return None
    cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
    state = getattr(cause, "sqlstate", None)
    return printable(f"{cause} (SQLSTATE {state})" if state else str(cause))


def transient_reason(exc: BaseException) -> str | None:
    """The server's reason for a statement it gave up for its own state, else None.

    A deadlock, a serialization failure, a lock or statement timeout, a full disk: the
    command may succeed when run again, and says so in one line instead of a traceback.

    Args:
        exc: the error caught: a driver error, or a :class:`StoreUnavailable` from one.
    """
    cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
    if not isinstance(cause, _TRANSIENT):
        return None
    state = getattr(cause, "sqlstate", None)
    said = f"{cause} (SQLSTATE {state})" if state else str(cause)
    return printable(f"{said}; it may succeed when run again")


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` (or the driver error behind it) is a statement the server refused.

    A refusal (a constraint, a trigger, a bad value) concerns the rows of that statement;
    the connection and the database are fine, so other rows can still be worked on.

    Args:
        exc: the error caught, a driver error or a :class:`StoreUnavailable` from one.

    Returns:
        True for a server-side refusal, False for a lost or unreachable database.
    """
    cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
    if isinstance(cause, _BAD_ARGUMENT):
        return True
    return isinstance(cause, asyncpg.PostgresError) and not isinstance(
        cause, _UNAVAILABLE + _TRANSIENT
    )
