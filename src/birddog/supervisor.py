"""The supervisor of one command: nothing a command starts outlives the worker that asked.

:mod:`birddog.spawn` starts every child process under this supervisor, run with the
worker's own interpreter. It is a script of the standard library only and is started by
its path (``python -I -S .../birddog/supervisor.py``), not with ``-m birddog.supervisor``:
importing the ``birddog`` package costs about half a second, this file tens of
milliseconds, and a supervisor starts for every job.

What it does, on Linux:

- It leads a new session and, in it, the command's process group (the worker starts it
  with ``setsid``; the command joins that group), so signalling the group reaches
  everything the command did not move elsewhere, and no process of the turn has a
  controlling terminal: ``/dev/tty`` cannot be opened and ``TIOCSTI`` cannot type into
  the terminal the worker was started from. The supervisor opens no terminal itself, and
  the command, not being a session leader, cannot acquire one by opening it.
- It asks the kernel for ``SIGTERM`` when its parent, the worker, dies
  (``prctl(PR_SET_PDEATHSIG)``), and checks ``getppid()`` right after in case the worker
  was already gone. The signal comes when the *thread* that started the supervisor ends;
  BirdDog's worker starts processes from its event loop in the main thread.
- It is the subreaper of what it starts (``prctl(PR_SET_CHILD_SUBREAPER)``): a
  grandchild whose parent exits, one that double-forked or called ``setsid()``, is
  re-parented to it, not to PID 1, so it can still be found and ended.
- The command gets the supervisor's fds 0-2 (stdin, stdout, stderr), its working
  directory and environment, and nothing else open; with ``--uid`` it runs as another
  user (its gid and supplementary groups too), while the supervisor keeps the worker's
  user so that it can signal it.
- On the worker's death, on ``SIGTERM`` (or ``SIGINT``, ``SIGHUP``) from the worker, it
  ends every descendant it can find (walking ``/proc`` for processes whose parent chain
  reaches it, again and again until it has no child left): ``SIGTERM``, then ``SIGKILL``
  once the grace has passed, then it exits. ``SIGUSR1`` asks for ``SIGKILL`` at once.
- With ``--remove DIR`` (the fresh directory a turn of ``worker --command`` runs in),
  once everything has ended it removes that directory, whatever the agent left in it:
  it outlives the worker by design, so a worker killed with ``SIGKILL`` leaves no turn
  directory behind.
- When the command exits, whatever it left behind is ended the same way, and the
  supervisor then exits with the command's own status: the same exit code, or killed by
  the same signal, so the caller cannot tell it apart from the command's.

Elsewhere (macOS and the BSDs have neither the parent-death signal nor the subreaper,
nor ``/proc``): the supervisor polls ``getppid()`` every quarter of a second to notice
the worker's death, and can reach only the command's process group (``SIGTERM``, then
after the grace ``SIGKILL``, which ends the supervisor too). A process that left the
group (``setsid``, a double fork) is out of its reach there.

The caller passes ``--status-fd N``: the supervisor writes ``started <pid>`` there once
the command runs, or ``failed <errno> <reason>`` when it could not be started, and closes
it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Final

__all__ = [
    "EXIT_CANNOT_START",
    "SCRIPT",
    "boot_id",
    "descendants",
    "main",
    "process_start_ticks",
    "remove_tree",
    "supervisor_argv",
]

SCRIPT: Final = os.path.realpath(__file__)
"""This file: what the worker's interpreter runs."""

EXIT_CANNOT_START: Final = 127
"""The supervisor's exit status when the command could not be started (as a shell's)."""

PR_SET_PDEATHSIG: Final = 1
PR_SET_CHILD_SUBREAPER: Final = 36

_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_POLL_PARENT_S: Final = 0.25
"""How often the parent is looked at where the kernel does not say it died."""
_ROUND_S: Final = 0.02
"""How often, while ending, descendants are looked for and reaped."""
_PROC: Final = "/proc"


def supervisor_argv(
    argv: Sequence[str],
    *,
    parent_pid: int,
    grace_s: float,
    status_fd: int,
    uid: int | None = None,
    gid: int | None = None,
    groups: Sequence[int] = (),
    remove: str | None = None,
) -> list[str]:
    """The command line that runs ``argv`` under a supervisor.

    Args:
        argv: the command and its arguments.
        parent_pid: the worker's pid: the supervisor ends everything once it is gone.
        grace_s: time between ``SIGTERM`` and ``SIGKILL``.
        status_fd: where the supervisor says whether the command started.
        uid: run the command as this user (the supervisor must be root).
        gid: with ``uid``, its group.
        groups: with ``uid``, its supplementary groups.
        remove: a directory the supervisor removes once everything it watches ended.

    Returns:
        The argument vector, starting with this interpreter.
    """
    line = [sys.executable, "-I", "-S", SCRIPT, "--parent", str(parent_pid)]
    line += ["--grace", repr(float(grace_s)), "--status-fd", str(status_fd)]
    if uid is not None:
        line += ["--uid", str(uid), "--gid", str(uid if gid is None else gid)]
        line += ["--groups", ",".join(str(group) for group in groups)]
    if remove is not None:
        line += ["--remove", remove]
    return [*line, "--", *argv]


# ---- what /proc says -----------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (field 3 onwards)."""
    try:
        with open(f"{_PROC}/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields follow the last ')'.
    return text.rpartition(")")[2].split()


def process_start_ticks(pid: int) -> int | None:
    """When a process started, in clock ticks since boot (``/proc/PID/stat`` field 22).

    With the boot id, a pid and its start time name one process: a pid reused later has
    another start time.

    Args:
        pid: the process.

    Returns:
        The start time, or None when there is no such process (or no ``/proc``).
    """
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def boot_id() -> str | None:
    """This boot of this host (``/proc/sys/kernel/random/boot_id``); None without it."""
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id", encoding="ascii") as boot:
            return boot.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def descendants(root: int) -> list[int]:
    """Every live process whose chain of parents reaches ``root`` (Linux ``/proc``).

    Zombies are left out: nothing runs in them, and their parent reaps them.

    Args:
        root: the ancestor.

    Returns:
        Their pids, parents before their children; empty without ``/proc``.
    """
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None or len(fields) < 2 or fields[0] in {"Z", "X"}:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def remove_tree(path: str) -> bool:
    """Remove what an agent left in ``path``, even directories it made unwritable.

    Never raises: what cannot be removed stays (the caller says so). ``shutil`` is
    imported here only, when there is something to remove: a supervisor's start must
    not pay for it.

    Args:
        path: the directory.

    Returns:
        Whether ``path`` is gone.
    """
    try:
        os.rmdir(path)  # the usual case: the agent left nothing
    except FileNotFoundError:
        return True
    except OSError:
        pass
    else:
        return True
    import shutil  # noqa: PLC0415 - see above
    import stat  # noqa: PLC0415

    def unlock(_function: object, failed: str, _exc: object) -> None:
        try:
            parent = os.path.dirname(failed)
            os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, stat.S_IRWXU)
                shutil.rmtree(failed, ignore_errors=True)
            elif os.path.lexists(failed):
                os.unlink(failed)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)
    return not os.path.lexists(path)


# ---- the supervisor ------------------------------------------------------------------

_MAX_FD: Final = 1 << 20
"""Above every fd a process may hold (``closerange`` skips what is not open)."""


def _read(fd: int) -> bytes:
    """What a pipe holds now (empty at its end, or when a non-blocking pipe is empty)."""
    try:
        return os.read(fd, 4096)
    except (BlockingIOError, InterruptedError):
        return b""


def _send(target: int, sig: int, *, group: bool = False) -> None:
    """Send a signal to a process (or group); one already gone, or not ours, is no error."""
    try:  # noqa: SIM105 - contextlib is not imported here: it would slow every start
        (os.killpg if group else os.kill)(target, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where there is no ``prctl`` or it refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class _Supervisor:
    """One command, watched until it and everything it started have ended."""

    def __init__(self, options: _Options) -> None:
        self.parent_pid: int = options.parent
        self.grace_s: float = options.grace
        self.status_fd: int = options.status_fd
        self.uid: int | None = options.uid
        self.gid: int | None = options.gid
        self.groups = [int(g) for g in (options.groups or "").split(",") if g]
        self.stop_requested = False
        self.kill_now = False
        self.wakeup_r, wakeup_w = os.pipe()
        for fd in (self.wakeup_r, wakeup_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wakeup_w)
        for sig in _STOPPING:
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_kill_now)
        # A handler of its own (not SIG_IGN, which would reap children for us), so that a
        # child's exit wakes the loop through the wakeup fd.
        signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
        self.pdeathsig = _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        self.subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.walks = self.subreaper and os.path.exists(f"{_PROC}/self/stat")
        self.child: int | None = None
        self.status: int | None = None
        self.terminated: set[int] = set()

    def _on_stop(self, _sig: int, _frame: FrameType | None) -> None:
        self.stop_requested = True

    def _on_kill_now(self, _sig: int, _frame: FrameType | None) -> None:
        self.stop_requested = True
        self.kill_now = True

    def parent_gone(self) -> bool:
        """Whether the worker that started the supervisor has died."""
        return os.getppid() != self.parent_pid

    def report(self, line: str) -> None:
        """Tell the worker whether the command started, once."""
        if self.status_fd < 0:
            return
        try:
            os.write(self.status_fd, line.encode("utf-8", "replace") + b"\n")
            os.close(self.status_fd)
        except OSError:
            pass  # the worker is gone: the loop finds out and ends the command
        self.status_fd = -1

    def start(self, argv: Sequence[str]) -> bool:
        """Start the command; False (reported) when it cannot be started."""
        if self.parent_gone() or self.stop_requested:
            self.report("failed 0 the worker stopped before the command started")
            return False
        failure = self._fork_exec(list(argv))
        if failure is not None:
            self.report(f"failed {failure}")
            return False
        self.report(f"started {self.child}")
        # The command holds the pipes now; the supervisor lets go of stdin and stdout so
        # that their ends are the command's (stderr stays, for its last words).
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        return True

    def _fork_exec(self, argv: list[str]) -> str | None:
        """Fork and exec the command; ``"<errno> <reason>"`` when it could not start.

        By hand rather than with :mod:`subprocess`, whose import is most of what this
        script would cost to start: fork, then in the child restore the signals Python
        ignores, become the other user if asked, close every fd but 0-2 and exec; an
        error before the exec comes back through a pipe that the exec closes.
        """
        errors_r, errors_w = os.pipe()  # both close on exec
        pid = os.fork()
        if pid == 0:  # the child: no return from here
            try:
                for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(sig, signal.SIG_DFL)
                if self.uid is not None:
                    os.setgroups(self.groups)
                    os.setgid(self.uid if self.gid is None else self.gid)
                    os.setuid(self.uid)
                os.closerange(3, errors_w)
                os.closerange(errors_w + 1, _MAX_FD)
                os.execvp(argv[0], argv)  # noqa: S606 - the worker's command, as given
            except OSError as exc:
                os.write(errors_w, f"{exc.errno or 0} {exc.strerror or exc}".encode())
            except BaseException as exc:  # nothing may unwind in the child: it would run on
                os.write(errors_w, f"0 {type(exc).__name__}".encode())
            os._exit(EXIT_CANNOT_START)
        os.close(errors_w)
        chunks = []
        while chunk := _read(errors_r):
            chunks.append(chunk)
        os.close(errors_r)
        if chunks:
            os.waitpid(pid, 0)
            return b"".join(chunks).decode("utf-8", "replace")
        self.child = pid
        return None

    def reap(self) -> bool:
        """Collect every exited child; True while any child is left (running or not)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.child:
                self.status = status

    def wait(self, timeout_s: float) -> None:
        """Sleep until a signal arrives or ``timeout_s`` has passed."""
        select.select([self.wakeup_r], [], [], max(0.0, timeout_s))  # a signal ends it
        while _read(self.wakeup_r):
            pass

    def signal_all(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every descendant (Linux), else to the process group.

        ``SIGTERM`` reaches each process once: a program may read a second one as "stop
        now, skip the cleanup".
        """
        if self.walks:
            for pid in descendants(os.getpid()):
                if sig is signal.SIGTERM:
                    if pid in self.terminated:
                        continue
                    self.terminated.add(pid)
                _send(pid, sig)
            return
        # SIGKILL here ends the supervisor too: it is its last act (see end()).
        _send(os.getpgrp(), sig, group=True)

    def run(self) -> None:
        """Watch the command until it exits, or the worker dies or asks to stop."""
        while self.status is None:
            left = self.reap()
            if self.status is not None or not left:
                return
            if self.stop_requested or self.parent_gone():
                self.stop_requested = True
                return
            self.wait(60.0 if self.pdeathsig else _POLL_PARENT_S)

    def end(self) -> None:
        """End every descendant: ``SIGTERM``, ``SIGKILL`` after the grace, until none is left.

        With ``/proc`` and the subreaper, "none left" is exact: every descendant is a
        child of the supervisor by the time its own parent has gone, so the supervisor
        has no child left exactly when nothing it started runs. Without them, only the
        group can be reached, and is given the grace in full before ``SIGKILL``.
        """
        if not self.reap() and not self.stop_requested:
            return  # the command ended and left nothing behind: the usual case
        if not self.walks and not self.stop_requested:
            return  # the worker, still alive, ends the group as before
        deadline = time.monotonic() + self.grace_s
        if not self.kill_now:
            self.signal_all(signal.SIGTERM)
        while True:
            left = self.reap()
            if self.walks and not left:
                return
            now = time.monotonic()
            if self.kill_now or now >= deadline:
                self.signal_all(signal.SIGKILL)
                self.wait(_ROUND_S)
                continue
            self.wait(min(_ROUND_S * 5, deadline - now))
            if self.walks:
                # What was forked since the last round gets the same SIGTERM.
                self.signal_all(signal.SIGTERM)

    def exit(self) -> None:
        """Exit with the command's status: its exit code, or death by its signal."""
        if self.status is None:
            os._exit(EXIT_CANNOT_START if self.child is None else 128 + signal.SIGKILL)
        code = os.waitstatus_to_exitcode(self.status)
        if code >= 0:
            os._exit(code)
        # Die of the same signal, without a core dump of the supervisor.
        import resource  # noqa: PLC0415 - needed only here

        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.set_wakeup_fd(-1)
            signal.signal(-code, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
            os.kill(os.getpid(), -code)
        except (OSError, ValueError):
            pass  # a signal that cannot be raised: its number says it below
        os._exit(128 - code)


class _Options:
    """The supervisor's command line.

    Parsed by hand, with no dataclass: argparse and dataclasses each cost a tenth of the
    supervisor's start-up, which every job waits for.
    """

    def __init__(self) -> None:
        self.parent = -1
        self.grace = 5.0
        self.status_fd = -1
        self.uid: int | None = None
        self.gid: int | None = None
        self.groups = ""
        self.remove: str | None = None

    def set(self, name: str, value: str) -> None:
        """Take one ``--name value`` pair; ValueError for an unknown name or bad value."""
        if name == "--parent":
            self.parent = int(value)
        elif name == "--grace":
            self.grace = float(value)
        elif name == "--status-fd":
            self.status_fd = int(value)
        elif name == "--uid":
            self.uid = int(value)
        elif name == "--gid":
            self.gid = int(value)
        elif name == "--groups":
            self.groups = value
        elif name == "--remove":
            self.remove = value
        else:
            raise ValueError(name)


def _options(argv: Sequence[str]) -> tuple[_Options, list[str]]:
    args = list(argv)
    if "--" not in args or args.index("--") == len(args) - 1:
        sys.stderr.write("birddog-supervisor: the command follows --\n")
        os._exit(EXIT_CANNOT_START)
    split = args.index("--")
    options = _Options()
    flags = args[:split]
    try:
        for name, value in zip(flags[::2], flags[1::2], strict=True):
            options.set(name, value)
    except ValueError as exc:
        sys.stderr.write(f"birddog-supervisor: bad arguments ({exc})\n")
        os._exit(EXIT_CANNOT_START)
    return options, args[split + 1 :]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command the arguments name under supervision, then exit with its status.

    Args:
        argv: ``--parent PID --grace S [--status-fd N] [--uid U --gid G --groups a,b]
            [--remove DIR] -- COMMAND...`` (default: ``sys.argv[1:]``).
    """
    options, command = _options(sys.argv[1:] if argv is None else argv)
    supervisor = _Supervisor(options)
    started = supervisor.start(command)
    if started:
        supervisor.run()
        supervisor.end()
    if options.remove is not None:
        remove_tree(options.remove)  # nothing runs in it any more
    if not started:
        os._exit(EXIT_CANNOT_START)
    supervisor.exit()


if __name__ == "__main__":
    main()
