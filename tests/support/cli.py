"""The ``birddog`` command and daemon as subprocesses of a test, and logins per role."""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the subprocesses' working directory."""

BIRDDOG = str(Path(sys.executable).parent / "birddog")
"""The console script of the running interpreter's environment."""


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


async def cli(
    database_url: str, *args: str, timeout_s: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``birddog ARGS`` to completion without blocking the event loop."""
    return await asyncio.to_thread(
        subprocess.run,
        [BIRDDOG, *args],
        env=cli_env(database_url, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


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
) -> Finished:
    """Run ``birddog ARGS`` to its end; one that outlives ``timeout_s`` fails the test loudly.

    A process still running at the deadline is asked to stop (SIGTERM: a waiting command
    says where it stood), then killed, by its pid; the failure shows everything it printed
    and, when py-spy is installed, where each of its threads was.
    """
    proc = await asyncio.create_subprocess_exec(
        BIRDDOG, *args,
        env=env,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    talking = asyncio.ensure_future(proc.communicate(stdin))
    done, _ = await asyncio.wait({talking}, timeout=timeout_s)
    if talking in done:
        out, err = talking.result()
        assert proc.returncode is not None
        return Finished(proc.returncode, out.decode(), err.decode())
    threads = await _threads_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    done, _ = await asyncio.wait({talking}, timeout=5)
    if talking not in done:
        proc.kill()
    out, err = await talking
    raise AssertionError(
        f"birddog {' '.join(args)} was still running after {timeout_s:g} s "
        f"({'it stopped on SIGTERM' if talking in done else 'killed: SIGTERM did not stop it'})"
        f"\n--- stdout\n{out.decode()}\n--- stderr\n{err.decode()}\n--- threads\n{threads}"
    )


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
        self.proc = subprocess.Popen(  # noqa: S603 - our own console script
            [BIRDDOG, command, *args],
            env=cli_env(database_url, **env),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            text=True,
        )

    def log(self) -> str:
        """Everything the daemon logged so far."""
        self._log.seek(0)
        return self._log.read()

    def terminate(self, timeout_s: float = 20) -> tuple[int, str]:
        """SIGTERM, wait, and return the exit code and the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=timeout_s)
        text = self.log()
        self._log.close()
        return self.proc.returncode, text

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=20)
        if not self._log.closed:
            self._log.close()


KINDS = ("owner", "daemon", "worker", "sender", "reader")
"""The kinds of process, one role each (``birddog migrate --roles``)."""


def as_login(dsn: str, user: str, password: str) -> str:
    """The same database, logged in as another user with a password."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))
