"""Who an agent runs as: another OS user, checked before any agent starts as it.

A ``--user`` is refused when it is the worker's own user, and when it (its uid, or any
of its groups) owns or can write what the worker keeps from agents: the embedded
server's data directory, the spool and the spool's directory (:class:`Guarded`, which
the composition root names). Root is refused by the same rule, since it owns them.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from birddog.spawn.errors import AgentSetupRefused

__all__ = ["Guarded", "RunAs", "check_guarded", "run_as"]

GUARD_RULE = (
    "an agent's user may own or write none of the worker's data directory, spool or "
    "secrets: choose a user of its own, in no group of theirs"
)
"""The rule a refused ``--user`` is told, after what broke it."""


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


@dataclass(frozen=True, slots=True)
class Guarded:
    """A path of the worker's that no agent's user may own or write.

    Attributes:
        path: the file or directory (a directory's own entries are guarded with it).
        what: what it is, for the refusal (``the spool``).
    """

    path: Path
    what: str


def check_guarded(account: RunAs, guarded: Iterable[Guarded]) -> None:
    """Refuse ``account`` when it owns or can write a guarded path (missing ones are skipped).

    A path counts as the account's when its owner is the account's uid or its group one
    of the account's groups, or when its mode lets the account write it (as owner, group
    or other). A guarded directory's direct entries are judged too (``pgpass``, the
    server's ``postgres/``, ``spool.db``). Links are judged themselves, never followed.

    Args:
        account: the user agents would run as.
        guarded: the worker's paths.

    Raises:
        AgentSetupRefused: one line naming the path, what it is, and the rule.
    """
    groups = {account.gid, *account.groups}
    for item in guarded:
        for path in _with_entries(item.path):
            problem = _reach(account.uid, groups, path)
            if problem is not None:
                raise AgentSetupRefused(
                    f"--user {account.name}: {problem} {str(path)[:200]} ({item.what}); "
                    + GUARD_RULE
                )


def _with_entries(path: Path) -> Iterator[Path]:
    """``path`` and, for a directory, each entry in it."""
    yield path
    if path.is_dir() and not path.is_symlink():
        try:
            yield from sorted(path.iterdir())
        except OSError:
            return


def _reach(uid: int, groups: set[int], path: Path) -> str | None:
    """How the user ``uid`` in ``groups`` holds ``path`` (owns it, can write it), or None."""
    try:
        info = path.lstat()
    except OSError:
        return None
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == uid:
        return f"uid {uid} owns"
    if info.st_gid in groups:
        return f"its group {info.st_gid} owns"
    if stat.S_ISLNK(info.st_mode):
        return None  # a link's own mode means nothing; its owner was judged above
    if mode & stat.S_IWOTH:
        return "every user can write"
    return None
