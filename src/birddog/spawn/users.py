"""Who an agent runs as: another OS user, checked before any agent starts as it."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field

from birddog.spawn.errors import AgentSetupRefused

__all__ = ["RunAs", "run_as"]


@dataclass(frozen=True, slots=True)
class RunAs:
    """Another OS user an agent runs as (``worker --user``).

    Attributes:
        name: the user's name.
        uid: its user id.
        gid: its primary group.
        groups: every group it belongs to (supplementary included).
        home: its home directory (the agent's ``HOME``).
    """

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = field(default=())
    home: str = "/"


def run_as(name: str) -> RunAs:
    """The user ``name``, checked for running agents as it.

    Args:
        name: a user name (or a numeric uid) of this host.

    Returns:
        Its ids, groups and home.

    Raises:
        AgentSetupRefused: the worker does not run as root (only root can start a
            process as another user), the user does not exist, or it is the worker's
            own user.
    """
    if os.geteuid() != 0:
        raise AgentSetupRefused(
            f"--user needs the worker to run as root, to start agents as {name!r} "
            f"(it runs as uid {os.geteuid()}); without --user agents run as the worker's user"
        )
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        raise AgentSetupRefused(f"--user {name!r}: no such user on this host") from None
    if entry.pw_uid == os.geteuid():
        raise AgentSetupRefused(
            f"--user {name!r} is the worker's own user: choose a user of its own for agents"
        )
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir or "/")
