"""The OS account the embedded server runs as under root, made once and checked for reach.

PostgreSQL refuses to run as root, so under root the server runs as
:data:`~birddog.postgres.datadir.SERVER_USER` (created if missing), who must be able to
cross every directory on the way to its data.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
from pathlib import Path

from birddog.core.text import printable
from birddog.postgres import datadir
from birddog.postgres.datadir import blocking_directory, server_ids
from birddog.postgres.embedded.errors import EmbeddedServerError

__all__ = ["check_reachable", "existing_account", "server_account"]

_ACCOUNT_LOCK = (
    "/run/lock/birddog-embedded-user.lock"
    if os.path.isdir("/run/lock")
    else (
        "/tmp/birddog-embedded-user.lock"  # noqa: S108 - opened without following links
    )
)
"""Held by root while it creates the server's user (one process at a time)."""


def existing_account() -> tuple[int, int] | None:
    """Under root, the server user's uid and gid (unknown ids for one not yet created)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(datadir.SERVER_USER)
    except KeyError:
        return (-1, -1)  # a new system user: "others" on every directory
    return entry.pw_uid, entry.pw_gid


def server_account() -> tuple[int, int] | None:
    """The uid and gid the server runs as under root (creating the user); None otherwise.

    Processes starting servers at once (a test run's workers on a new machine) create the
    user one at a time: ``useradd`` run twice at once may leave one of them holding the
    gid of a group the other replaced, and a server started with it cannot reach its own
    directory.
    """
    if os.geteuid() != 0:
        return None
    ids = server_ids()
    if ids is not None:
        return ids
    fd = os.open(_ACCOUNT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        ids = server_ids()
        if ids is None:
            made = subprocess.run(  # noqa: S603 - a fixed command line
                [
                    "/usr/sbin/useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    datadir.SERVER_USER,
                ],
                check=False,
                capture_output=True,
                text=True,
            )
            ids = server_ids()
            if ids is None:
                said = made.stderr.strip().splitlines()
                raise EmbeddedServerError(
                    f"could not create the user {datadir.SERVER_USER} the embedded server runs as "
                    "under root: "
                    f"{printable(said[-1]) if said else f'exit status {made.returncode}'}"
                )
    finally:
        os.close(fd)
    return ids


def check_reachable(path: Path, account: tuple[int, int]) -> None:
    """Refuse, naming the directory, when the server user cannot cross every one to ``path``."""
    blocked = blocking_directory(path, account)
    if blocked is not None:
        directory, mode = blocked
        raise EmbeddedServerError(
            f"running as root, the embedded PostgreSQL runs as user {datadir.SERVER_USER}, who "
            f"cannot reach {directory} (mode {mode:04o}); BirdDog never widens permissions "
            "outside its data directory: choose a BIRDDOG_DATA_DIR that user can reach "
            "(such as /var/lib/birddog), or unset it to let BirdDog choose, or set "
            "DATABASE_URL"
        )
