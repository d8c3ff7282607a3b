"""The processes that use the embedded server: counted in the data directory, the last stops it."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from birddog.postgres.embedded.directory import write_private

__all__ = ["ServerUsers", "alive"]


class ServerUsers:
    """The processes that use the server (``users`` in the data directory), one lock for all.

    The last one out stops the server (at its exit).

    Args:
        data_dir: BirdDog's data directory.
        stop: stops the server if it runs (called by the last user, under the lock).
    """

    def __init__(self, data_dir: Path, stop: Callable[[], None]) -> None:
        self.data_dir = data_dir
        self._stop = stop
        self._registered = False

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One process at a time starts, stops or counts users of this server."""
        fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def register(self) -> None:
        """Count this process as a user (once), and stop the server at exit if it is last."""
        if self._registered:
            return
        users = self._users()
        users.add(os.getpid())
        self._write_users(users)
        self._registered = True
        atexit.register(self._last_one_out)

    def alive(self) -> list[int]:
        """The processes counted as users that still run, in pid order (no lock taken)."""
        return sorted(pid for pid in self._users() if alive(pid))

    def _last_one_out(self) -> None:
        """At exit: stop the server if no other process that used it is still alive."""
        with contextlib.suppress(OSError, subprocess.SubprocessError), self.lock():
            users = {pid for pid in self._users() if pid != os.getpid() and alive(pid)}
            self._write_users(users)
            if not users:
                self._stop()

    def _users(self) -> set[int]:
        try:
            text = (self.data_dir / "users").read_text()
        except FileNotFoundError:
            return set()
        return {int(word) for word in text.split() if word.isdigit()}

    def _write_users(self, users: set[int]) -> None:
        write_private(
            self.data_dir / "users", "".join(f"{pid}\n" for pid in sorted(users)), owner=None
        )


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not; another user's does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] == "Z"
