"""Opening ``psql`` on a DSN without putting its password on the command line."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit


def psql_invocation(
    dsn: str, args: tuple[str, ...] | list[str], *, executable: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that open ``psql`` on ``dsn``.

    The password travels in ``PGPASSWORD`` (visible only to this user's processes), not in
    the arguments every user on the host can list.

    Args:
        dsn: ``postgresql://user:password@host:port/database?...``.
        args: more ``psql`` arguments (``-c 'SELECT 1'``, ``-f file.sql``).
        executable: the ``psql`` to run.

    Returns:
        The argument vector and the environment for :func:`subprocess.call`.
    """
    env = dict(os.environ)
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    password = unquote(parts.password or "") or next((v for k, v in query if k == "password"), None)
    if password:
        env["PGPASSWORD"] = password
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username is not None:
        netloc = f"{parts.username}@{netloc}"
    query = [(k, v) for k, v in query if k != "password"]
    bare = urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
    return [executable, bare, *args], env
