"""A warm ``birddog``: the suite's command-line processes, forked from one that has imported it.

A fresh ``birddog`` process spends about 0.4 s of CPU importing Python modules before it
does anything, and the suite starts well over a thousand of them: on a 2-core machine
that was most of its time. A *zygote* process imports the command line and every module
its commands load, once per test worker, and does nothing else (no thread, no event loop,
no connection). Each command is a fork of it that takes its arguments, environment,
working directory and standard streams from the test and calls the console script's
``main``, so it runs the same code a shell's ``birddog`` runs, as a process of its own
with a pid of its own, and exits with the same status.

Only import time is shared. What a fresh process would find out at import (a missing
optional dependency) the lean-install tests check with real installs, and
``BIRDDOG_TEST_EXEC=1`` runs every command of the suite as a fresh ``birddog`` instead.

The zygote reaps its children and signals them on request, so a pid the tests signal is
always the command's own, never a reused one (a child is reaped only after its exit was
reported).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import random
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

PRELOAD = (
    "birddog.cli",
    "birddog.bootstrap",
    "birddog.processes.daemon",
    "birddog.processes.worker",
    "birddog.processes.console",
    "birddog.processes.mcp",
    "birddog.processes.a2a",
    "birddog.http.transport",
    "birddog.daemon",
    "birddog.worker",
    "birddog.console",
    "birddog.metrics",
    "birddog.mcp.server",
    "birddog.a2a.app",
    "birddog.postgres.schema",
)
"""What the zygote imports before it forks: the command line and what its commands load."""

_HEADER = struct.Struct("!I")


def _send_message(sock: socket.socket, payload: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(payload).encode()
    socket.send_fds(sock, [_HEADER.pack(len(data)) + data], list(fds))


def _recv_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    chunk, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, max_fds)
    if len(chunk) < _HEADER.size:
        raise EOFError("the zygote's peer went away")
    (size,) = _HEADER.unpack_from(chunk)
    data = bytearray(chunk[_HEADER.size :])
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise EOFError("the zygote's peer went away mid-message")
        data += more
    return json.loads(bytes(data)), fds


# ---- the zygote ---------------------------------------------------------------------------


def _serve(path: str) -> None:
    """Preload, then fork one child per request until the test worker goes away."""
    import importlib  # noqa: PLC0415

    for name in PRELOAD:
        with contextlib.suppress(ModuleNotFoundError):  # an extra not installed
            importlib.import_module(name)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "accept":
                conn, _ = listener.accept()
                pid = _fork_one(conn, listener, selector, children, (wake_r, wake_w))
                if pid is not None:
                    children[pid] = conn
                    selector.register(conn, selectors.EVENT_READ, pid)
            elif key.data == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            else:
                _signal_request(key.fileobj, key.data, children, selector)  # type: ignore[arg-type]
        _reap(children, selector)
    for pid in list(children):  # the test worker is gone: so are its commands
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _signal_request(
    conn: socket.socket, pid: int, children: dict[int, socket.socket], selector: Any
) -> None:
    try:
        data = conn.recv(64)
    except OSError:
        data = b""
    if not data:  # the test side let go: the child runs on until it exits
        selector.unregister(conn)
        return
    for line in data.decode().split():
        if pid in children:  # not reaped yet, so the pid is still the child's
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, int(line))


def _reap(children: dict[int, socket.socket], selector: Any) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
        conn.close()


def _fork_one(
    conn: socket.socket,
    listener: socket.socket,
    selector: Any,
    children: dict[int, socket.socket],
    wake: tuple[int, int],
) -> int | None:
    try:
        request, fds = _recv_message(conn, max_fds=3)
    except (EOFError, OSError):
        conn.close()
        return None
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        conn.sendall(f"pid {pid}\n".encode())
        return pid
    # The child: become the command.
    code = 1
    try:
        selector.close()
        listener.close()
        for other in children.values():
            other.close()
        conn.close()
        for fd in wake:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        atexit._clear()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()
        sys.argv = [request["argv0"], *request["args"]]
        code = _run_main(request["args"])
    finally:
        os._exit(code)


def _run_main(args: list[str]) -> int:
    """The console script's ``main`` over ``args``, ended as an interpreter would end it."""
    code = 0
    try:
        from birddog.cli import main  # noqa: PLC0415 - preloaded

        main(args=args, prog_name="birddog")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


# ---- the test side ------------------------------------------------------------------------


class WarmProcess:
    """A command forked from the zygote: the parts of :class:`subprocess.Popen` the suite uses."""

    def __init__(self, pid: int, conn: socket.socket, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._conn = conn
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        self._read(block=False)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to exit; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        if self.returncode is None and not self._read(block=True, timeout=timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    async def wait_async(self, timeout_s: float | None = None) -> int:
        """:meth:`wait` without blocking the event loop (no thread of the loop's pool)."""
        if self.returncode is None:
            loop = asyncio.get_running_loop()
            self._conn.setblocking(False)
            try:
                async with asyncio.timeout(timeout_s):
                    data = await loop.sock_recv(self._conn, 64)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout_s or 0.0) from None
            finally:
                if self._conn.fileno() != -1:
                    self._conn.setblocking(True)
            self._ended(data)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal it, through the zygote, which holds its pid until it was reaped."""
        if self.poll() is None:
            with contextlib.suppress(OSError):
                self._conn.sendall(f"{int(sig)}\n".encode())

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def _read(self, *, block: bool, timeout: float | None = None) -> bool:
        with self._lock:
            if self.returncode is not None:
                return True
            self._conn.settimeout(timeout if block else 0.0)
            try:
                data = self._conn.recv(64)
            except (BlockingIOError, TimeoutError):
                return False
            except OSError:
                data = b""
            finally:
                self._conn.settimeout(None)
            self._ended(data)
            return True

    def _ended(self, data: bytes) -> None:
        """Record the exit the zygote reported (nothing: the zygote itself was killed)."""
        text = data.decode()
        self.returncode = int(text.split()[1]) if text.startswith("exit ") else -signal.SIGKILL
        self._conn.close()


class Zygote:
    """The zygote of this test process, started on first use and ended with the process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._dir = tempfile.mkdtemp(prefix="birddog-zygote-")
        self._path = str(Path(self._dir) / "zygote.sock")
        self._lock = threading.Lock()

    def spawn(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path,
        stdin: IO[Any] | int,
        stdout: IO[Any] | int,
        stderr: IO[Any] | int,
        argv0: str,
    ) -> WarmProcess:
        """Fork ``birddog ARGS`` with these streams (open files or file descriptors)."""
        self._start()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._path)
        fds = [s if isinstance(s, int) else s.fileno() for s in (stdin, stdout, stderr)]
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd), "argv0": argv0}
        _send_message(conn, request, fds)
        line = b""
        while not line.endswith(b"\n"):
            more = conn.recv(64)
            if not more:
                raise RuntimeError("the zygote did not start the command")
            line += more
        return WarmProcess(int(line.split()[1]), conn, ["birddog", *args])

    def socket_path(self) -> str:
        """The zygote's socket, for :mod:`tests.support.zygote_launch` (started if need be)."""
        self._start()
        return self._path

    def _start(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            root = Path(__file__).resolve().parents[2]
            self._proc = subprocess.Popen(  # noqa: S603 - our own interpreter
                [
                    sys.executable,
                    "-c",
                    f"from tests.support.zygote import _serve; _serve({self._path!r})",
                ],
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self._proc.stdout is not None
            if self._proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the zygote did not start")
            atexit.register(self.stop)

    def stop(self) -> None:
        """End the zygote (its running children are killed with it)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.unlink(self._path)
            os.rmdir(self._dir)
