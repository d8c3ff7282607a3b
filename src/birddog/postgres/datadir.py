"""Where the embedded server keeps its data, and what its user can reach, when run as root.

PostgreSQL refuses to run as root, so under root the embedded server runs as the system
user :data:`SERVER_USER`, who must be able to cross every directory on the way to its
data and its binaries. A checkout under a 0700 home (``/root``, as in most containers),
or the XDG data directory of root, is out of that user's reach. BirdDog never widens a
directory it does not own, so:

- :func:`embedded_data_dir` keeps an explicit ``BIRDDOG_DATA_DIR`` as given (refused
  later, naming the directory in the way, if that user cannot reach it), and moves only
  the default one: to ``/var/lib/birddog/<name>-<hash>``, a name derived from the default
  directory alone, so that every later command of the same checkout finds the same data
  without a setting.
- :func:`blocking_directory` says which directory stops that user, if any.

Standard library only: the settings, ``birddog uri`` and the ready line use it without the
``embedded`` extra's binaries.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ROOT_DATA_HOME",
    "SERVER_USER",
    "DataDir",
    "blocking_directory",
    "embedded_data_dir",
    "server_ids",
]

SERVER_USER = "embedded_postgres"
"""The system user the server runs as when BirdDog runs as root."""

ROOT_DATA_HOME = Path("/var/lib/birddog")
"""Under root, where a default data directory the server's user cannot reach moves to."""


@dataclass(frozen=True, slots=True)
class DataDir:
    """The embedded server's data directory, and why it is not the default one.

    Attributes:
        path: where the data lives.
        instead_of: the default directory it replaces (out of the server user's reach
            under root), or None when it is the configured or default one.
    """

    path: Path
    instead_of: Path | None = None


def server_ids() -> tuple[int, int] | None:
    """The uid and gid of :data:`SERVER_USER`, or None when that user does not exist yet."""
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def blocking_directory(path: Path, ids: tuple[int, int] | None) -> tuple[Path, int] | None:
    """The first directory from ``/`` down to ``path`` the server's user cannot cross.

    Directories that do not exist yet are left out: BirdDog creates them as root with
    mode 0755, which every user may cross.

    Args:
        path: the directory the server's user must reach (through every parent).
        ids: that user's uid and gid; None for a user not yet created (in no group but
            its own new one, so only the "others" bits apply).

    Returns:
        The directory in the way and its mode, or None when the user can cross them all.
    """
    uid, gid = ids if ids is not None else (-1, -1)
    groups = {gid} | (
        {g.gr_gid for g in grp.getgrall() if SERVER_USER in g.gr_mem} if ids is not None else set()
    )
    for directory in [*reversed(path.parents), path]:
        try:
            info = directory.stat()
        except FileNotFoundError:
            return None
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid in groups:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return directory, stat.S_IMODE(info.st_mode)
    return None


def embedded_data_dir(default: Path, *, explicit: bool) -> DataDir:
    """Where the embedded server's data is, for the settings' ``data_dir``.

    Args:
        default: the settings' data directory.
        explicit: it was given (``BIRDDOG_DATA_DIR``); it is then used as it is.

    Returns:
        The directory to use: ``default``, or under root, when :data:`SERVER_USER` cannot
        reach ``default``'s parent, one of its own under :data:`ROOT_DATA_HOME`.
    """
    path = Path(default).expanduser().resolve()
    if explicit or os.geteuid() != 0 or blocking_directory(path.parent, server_ids()) is None:
        return DataDir(path)
    return DataDir(ROOT_DATA_HOME / _stable_name(path), instead_of=path)


def _stable_name(path: Path) -> str:
    """``<checkout>-<hash>``: the same for the same default directory, apart for two clones."""
    owner = path.parent.name if path.name == ".birddog" else path.name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", owner).strip("-.")[:32] or "birddog"
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:10]
    return f"{slug}-{digest}"
