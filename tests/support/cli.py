"""The ``birddog`` command and daemon as subprocesses of a test, and logins per role."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from tests.support.zygote import WarmProcess, Zygote

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the subprocesses' working directory."""

BIRDDOG = str(Path(sys.executable).parent / "birddog")
"""The console script of the running interpreter's environment."""

FRESH = os.environ.get("BIRDDOG_TEST_EXEC", "") not in ("", "0")
"""``BIRDDOG_TEST_EXEC=1``: every command a fresh ``birddog`` process, not a warm fork."""

_ZYGOTE = Zygote()
_LAUNCH = Path(__file__).with_name("zygote_launch.py")


def start(
    args: list[str],
    *,
    env: dict[str, str],
    stdin: IO[Any] | int = subprocess.DEVNULL,
    stdout: IO[Any] | int = subprocess.DEVNULL,
    stderr: IO[Any] | int = subprocess.DEVNULL,
    fresh: bool = False,
) -> WarmProcess | subprocess.Popen[bytes]:
    """Start ``birddog ARGS`` in the checkout: a fork of the warm zygote (see its module).

    Streams are open files or file descriptors (``subprocess.DEVNULL`` for none).
    ``fresh``: a new ``birddog`` process all the same, for a test that reads what only
    ``exec`` sets (``/proc/PID/environ`` keeps the environment a process was started with).
    """
    if fresh or FRESH:
        return subprocess.Popen(  # noqa: S603 - our own console script
            [BIRDDOG, *args], env=env, cwd=ROOT, stdin=stdin, stdout=stdout, stderr=stderr
        )
    with contextlib.ExitStack() as held:
        streams = [
            held.enter_context(open(os.devnull, "rb+")) if stream == subprocess.DEVNULL else stream
            for stream in (stdin, stdout, stderr)
        ]
        return _ZYGOTE.spawn(
            args, env=env, cwd=ROOT, stdin=streams[0], stdout=streams[1], stderr=streams[2],
            argv0=BIRDDOG,
        )  # fmt: skip


def command_line(args: list[str]) -> tuple[str, list[str]]:
    """The program and arguments that run ``birddog ARGS`` for a client that starts it itself.

    A warm fork (:mod:`tests.support.zygote_launch` stands for it as the client's process),
    or with ``BIRDDOG_TEST_EXEC=1`` the console script itself.
    """
    if FRESH:
        return BIRDDOG, args
    return sys.executable, ["-S", str(_LAUNCH), _ZYGOTE.socket_path(), *args]


async def wait_for_exit(proc: WarmProcess | subprocess.Popen[bytes], timeout_s: float) -> int:
    """Its exit status; :class:`subprocess.TimeoutExpired` after ``timeout_s`` (it runs on)."""
    if isinstance(proc, WarmProcess):
        return await proc.wait_async(timeout_s)
    return await asyncio.to_thread(proc.wait, timeout_s)


@contextlib.contextmanager
def _captured(input_bytes: bytes | None) -> Iterator[tuple[IO[bytes] | int, IO[bytes], IO[bytes]]]:
    """Standard streams for a command: ``input_bytes`` (None: no stdin at all), and two files."""
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        if input_bytes is not None:
            stdin.write(input_bytes)
            stdin.seek(0)
        yield (stdin if input_bytes is not None else subprocess.DEVNULL), out, err


def _read(file: IO[bytes]) -> bytes:
    file.seek(0)
    return file.read()


def _text(file: IO[bytes]) -> str:
    return _read(file).decode(errors="replace")


_SPOOLS = Path(tempfile.mkdtemp(prefix="birddog-test-spools-"))
atexit.register(shutil.rmtree, _SPOOLS, ignore_errors=True)


def spool_path_for(database_url: str) -> Path:
    """The local spool of the CLI processes of one test database (never the checkout's).

    Every process a test starts on one database shares it, so a send spooled by one is
    forwarded by another; tests on other databases never see it.
    """
    name = hashlib.sha256(database_url.encode()).hexdigest()[:16]
    return _SPOOLS / name / "spool.db"


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: the test database, its spool, no metrics, JSON logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIRDDOG_")}
    env.update(
        DATABASE_URL=database_url,
        BIRDDOG_SPOOL_PATH=str(spool_path_for(database_url)),
        BIRDDOG_METRICS_PORT="0",
        BIRDDOG_WORKER_METRICS_PORT="0",
        BIRDDOG_LOG_FORMAT="json",
        BIRDDOG_BASE_DELAY_S="0.05",
        BIRDDOG_MAX_DELAY_S="0.2",
        BIRDDOG_POST_TIMEOUT_S="5",
        BIRDDOG_BACKSTOP_S="2",
        BIRDDOG_SHUTDOWN_GRACE_S="2",
    )
    env.update(extra)
    return env


@dataclass
class Finished:
    """How a ``birddog`` process ended: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


async def run_to_end(
    args: list[str],
    *,
    env: dict[str, str],
    stdin: bytes | None = None,
    timeout_s: float = 90,
    fresh: bool = False,
) -> Finished:
    """Run ``birddog ARGS`` to its end; one that outlives ``timeout_s`` fails the test loudly.

    A process still running at the deadline is asked to stop (SIGTERM: a waiting command
    says where it stood), then killed, by its pid; the failure shows everything it printed
    and, when py-spy is installed, where each of its threads was. ``stdin``: its input (None:
    none at all); ``fresh``: a new process, not a fork of the zygote (see :func:`start`).
    """
    with _captured(stdin) as (given, out, err):
        proc = start(args, env=env, stdin=given, stdout=out, stderr=err, fresh=fresh)
        try:
            code = await wait_for_exit(proc, timeout_s)
        except subprocess.TimeoutExpired:
            pass
        else:
            return Finished(code, _text(out), _text(err))
        threads = await _threads_of(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            await wait_for_exit(proc, 5)
            how = "it stopped on SIGTERM"
        except subprocess.TimeoutExpired:
            proc.kill()
            await wait_for_exit(proc, 30)
            how = "killed: SIGTERM did not stop it"
        raise AssertionError(
            f"birddog {' '.join(args)} was still running after {timeout_s:g} s ({how})"
            f"\n--- stdout\n{_text(out)}\n--- stderr\n{_text(err)}\n--- threads\n{threads}"
        )


async def cli(
    database_url: str,
    *args: str,
    timeout_s: float = 60,
    fresh: bool = False,
    variables: Mapping[str, str] | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run ``birddog ARGS`` on ``database_url`` to completion (:func:`run_to_end`, no input).

    ``env``: variables added to :func:`cli_env`'s; ``variables``: more of them, for a
    mapping built at run time (its names cannot be mistaken for this function's
    parameters); ``fresh``: a new process, not a fork of the zygote. One still running
    after ``timeout_s`` fails the test as :func:`run_to_end` says.
    """
    done = await run_to_end(
        list(args),
        env=cli_env(database_url, **(variables or {}), **env),
        timeout_s=timeout_s,
        fresh=fresh,
    )
    return subprocess.CompletedProcess([BIRDDOG, *args], done.returncode, done.stdout, done.stderr)


async def _threads_of(pid: int) -> str:
    """Where each thread of process ``pid`` is, from py-spy when it is installed."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return "(py-spy is not installed)"
    dump = await asyncio.create_subprocess_exec(
        spy, "dump", "--pid", str(pid), stdout=asyncio.subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await dump.communicate()
    return out.decode(errors="replace")


def token_of(stdout: str) -> str:
    """The token on the ``token:`` line ``birddog agent add`` or ``agent token`` printed."""
    [line] = [line for line in stdout.splitlines() if line.startswith("token: ")]
    return line.removeprefix("token: ")


class Daemon:
    """A ``birddog run`` (or ``birddog COMMAND``) subprocess this test started and will stop by its pid."""

    def __init__(self, database_url: str, *args: str, command: str = "run", **env: str) -> None:
        # The log goes to a file, so a test can read it while the daemon runs.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in kill()
        self.proc = start([command, *args], env=cli_env(database_url, **env), stderr=self._log)

    def log(self) -> str:
        """Everything the daemon logged so far."""
        self._log.seek(0)
        return self._log.read()

    def terminate(self, timeout_s: float = 20) -> tuple[int, str]:
        """SIGTERM, wait, and return the exit code and the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout_s)
        text = self.log()
        self._log.close()
        return code, text

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=20)
        if not self._log.closed:
            self._log.close()


KINDS = ("owner", "daemon", "worker", "sender", "reader", "a2a")
"""The kinds of process, one role each (``birddog migrate --roles``)."""


async def drop_agent_logins(database_url: str) -> None:
    """Drop every agent login this database made (roles outlive the test's database)."""
    conn = await asyncpg.connect(database_url)
    try:
        for row in await conn.fetch("SELECT login FROM birddog.agent_logins"):
            await conn.execute(f'DROP ROLE IF EXISTS "{row["login"]}"')
    finally:
        await conn.close()


def as_login(dsn: str, user: str, password: str) -> str:
    """The same database, logged in as another user with a password."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))
