"""What every benchmark shares: the server, fresh databases, the inbox and daemon processes.

- :func:`postgres_server` gives the DSN of a PostgreSQL server: ``DATABASE_URL`` when set,
  else an :class:`~birddog.postgres.embedded.EmbeddedPostgres` in a temporary directory,
  started and stopped here. Its durability settings are left at their defaults (fsync and
  synchronous_commit on): the benchmarks measure what a deployment gets.
- :func:`fresh_database` creates ``bench_<name>`` on that server and migrates it.
- :class:`InboxProcess` runs ``bench/inbox_server.py`` in a child process on 127.0.0.1.
- :class:`DaemonProcess` runs ``birddog run`` as a child process and samples its RSS and CPU.
- :func:`seed_outbox` writes rows with one ``generate_series`` statement.

Every child is started here and stopped here, by its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import psutil

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent


def now_ns() -> int:
    """``CLOCK_MONOTONIC`` in nanoseconds, the clock the inbox process stamps with."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointed at another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


@dataclass
class Server:
    """The PostgreSQL server of a run."""

    dsn: str
    embedded: Any = None
    postmaster_pid: int | None = None
    databases: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def postgres_server(tmp: Path) -> AsyncIterator[Server]:
    """``DATABASE_URL``'s server, or an embedded one in ``tmp`` for the length of the run."""
    if url := os.environ.get("DATABASE_URL"):
        server = Server(dsn=url)
        try:
            yield server
        finally:
            await _drop_all(server)
        return
    from birddog.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415

    root = Path(tempfile.mkdtemp(prefix="bdpg-"))  # short: the unix socket lives here
    embedded = EmbeddedPostgres(root)
    dsn = await asyncio.to_thread(embedded.start)
    server = Server(dsn=dsn, embedded=embedded, postmaster_pid=embedded.pid)
    try:
        yield server
    finally:
        await asyncio.to_thread(embedded.stop, "fast")
        shutil.rmtree(root, ignore_errors=True)


async def _drop_all(server: Server) -> None:
    for name in server.databases:
        with contextlib.suppress(Exception):
            await admin(server.dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def admin(dsn: str, *statements: str) -> None:
    """Run statements on their own connection (CREATE/DROP DATABASE)."""
    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def fresh_database(server: Server, name: str, *, birddog: bool = True) -> str:
    """Create database ``bench_<name>`` (dropping an old one) and migrate it; its DSN."""
    database = f"bench_{name}"
    await admin(
        server.dsn,
        f"DROP DATABASE IF EXISTS {database} WITH (FORCE)",
        f"CREATE DATABASE {database}",
    )
    if database not in server.databases:
        server.databases.append(database)
    dsn = with_database(server.dsn, database)
    if birddog:
        # Imported here: the bench's child processes import this module, and Alembic
        # (with SQLAlchemy) would be most of their start-up.
        from birddog.postgres import migrate  # noqa: PLC0415

        await migrate(dsn)
        if extra := os.environ.get("BENCH_SCHEMA_DDL"):
            # A schema change to price before migrating it (results kept apart).
            await admin(dsn, extra)
    return dsn


async def drop_database(server: Server, dsn: str) -> None:
    """Drop a database made by :func:`fresh_database`."""
    database = urlsplit(dsn).path.lstrip("/")
    await admin(server.dsn, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    if database in server.databases:
        server.databases.remove(database)


async def postgres_info(dsn: str) -> dict[str, Any]:
    """The server's version and the settings that move the figures."""
    conn = await asyncpg.connect(dsn)
    try:
        info: dict[str, Any] = {"version": await conn.fetchval("SHOW server_version")}
        for name in (
            "fsync",
            "synchronous_commit",
            "shared_buffers",
            "work_mem",
            "max_connections",
            "wal_level",
        ):
            info[name] = await conn.fetchval(f"SHOW {name}")
        return info
    finally:
        await conn.close()


def machine_info() -> dict[str, Any]:
    """Cores, memory, Python, OS and the load when asked."""
    memory = psutil.virtual_memory()
    return {
        "cores_logical": psutil.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "memory_gb": round(memory.total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


# --------------------------------------------------------------------------------------
# child processes
# --------------------------------------------------------------------------------------


def stop_pid(proc: subprocess.Popen[Any], *, timeout_s: float = 15.0) -> int | None:
    """SIGTERM a child we started, SIGKILL it if it lingers; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


class Sampler:
    """Samples a process's RSS (peak) every ``interval_s`` in a thread; CPU time at the end."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.process = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            self._stop.wait(self.interval_s)

    def cpu_s(self) -> float:
        """User + system CPU seconds so far."""
        try:
            times = self.process.cpu_times()
        except psutil.Error:
            return 0.0
        return float(times.user + times.system)

    def rss(self) -> int:
        """The RSS now."""
        try:
            return int(self.process.memory_info().rss)
        except psutil.Error:
            return 0

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(2)


class TreeCpu:
    """CPU seconds used by a process tree (the postmaster and its backends) over a window.

    A thread reads every process of the tree each ``interval_s``, so backends that exit
    during the window (a client that disconnects) still count, up to their last reading.
    """

    def __init__(self, pid: int | None, interval_s: float = 0.25) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self._start: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> dict[tuple[int, float], float]:
        if self.pid is None:
            return {}
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return {}
        seen = {}
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                seen[proc.pid, proc.create_time()] = times.user + times.system
        return seen

    def start(self) -> TreeCpu:
        """Take the first reading and start sampling."""
        self._start = self._read()
        self._last = dict(self._start)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._last.update(self._read())

    def stop(self) -> float:
        """Stop sampling; the CPU seconds used since :meth:`start`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._last.update(self._read())
        return sum(cpu - self._start.get(key, 0.0) for key, cpu in self._last.items())


class InboxProcess:
    """The recipients' server (``bench/inbox_server.py``) in a child process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        """Start the child; the base URL (``http://127.0.0.1:<port>``)."""
        self.proc = spawn_python(["bench.inbox_server"])
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 30)
        self.port = int(line)
        self._session = aiohttp.ClientSession()
        return self.base_url

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, agent: str) -> str:
        """The inbox URL of an agent."""
        return f"{self.base_url}/inbox/{agent}"

    @property
    def pid(self) -> int:
        """The child's pid."""
        assert self.proc is not None
        return self.proc.pid

    def cpu_s(self) -> float:
        """The inbox process's CPU seconds so far."""
        try:
            times = psutil.Process(self.pid).cpu_times()
        except psutil.Error:
            return 0.0
        return float(times.user + times.system)

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._session is not None
        async with self._session.request(
            method, self.base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=60)
        ) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def configure(
        self, *, slow: Iterable[str] = (), delay_s: float = 0.0, events: bool = False
    ) -> None:
        """Name the slow agents and their delay; whether to keep per-post arrival times."""
        await self._call(
            "POST", "/config", {"slow": list(slow), "delay_s": delay_s, "events": events}
        )

    async def reset(self) -> None:
        """Forget every count."""
        await self._call("POST", "/reset")

    async def stats(self, *, events: bool = False) -> dict[str, Any]:
        """Counts, first and last arrival (monotonic ns), and arrivals by key if asked."""
        result: dict[str, Any] = await self._call("GET", "/stats?events=1" if events else "/stats")
        return result

    async def stop(self) -> None:
        """Stop the child by pid."""
        if self._session is not None:
            await self._session.close()
        if self.proc is not None:
            await asyncio.to_thread(stop_pid, self.proc)


class DaemonProcess:
    """``birddog run`` (or another ``birddog`` command) as a child process, its RSS sampled.

    Args:
        dsn: the database it drains.
        log_path: where its stderr (JSON logs) goes.
        env: extra ``BIRDDOG_*`` settings.
        args: the ``birddog`` command and its options (``worker --command cat``, say).
    """

    def __init__(
        self,
        dsn: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        args: Sequence[str] = ("run",),
    ) -> None:
        self.dsn = dsn
        self.log_path = log_path
        self.env = env or {}
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.sampler: Sampler | None = None
        self._log: Any = None

    def start(self) -> int:
        """Start the daemon; its pid."""
        env = {
            **os.environ,
            "DATABASE_URL": self.dsn,
            "BIRDDOG_METRICS_PORT": "0",
            "BIRDDOG_LOG_FORMAT": "json",
            **self.env,
        }
        self._log = self.log_path.open("wb")
        # BENCH_DAEMON names a module to run instead (a prototype, bench/experiments/).
        module = os.environ.get("BENCH_DAEMON") if self.args[:1] == ["run"] else None
        command = [sys.executable, "-m", module] if module else [str(BIN / "birddog")]
        self.proc = subprocess.Popen(  # noqa: S603 - this venv's birddog, or our own module
            [*command, *self.args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.sampler = Sampler(self.proc.pid)
        return self.proc.pid

    @property
    def pid(self) -> int:
        """The daemon's pid."""
        assert self.proc is not None
        return self.proc.pid

    async def wait_listening(self, conn: asyncpg.Connection, timeout_s: float = 60.0) -> None:
        """Wait until the daemon's listener connection has run ``LISTEN``."""

        async def listening() -> bool:
            self.check_alive()
            count = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
            )
            return bool(count)

        await wait_until(listening, timeout_s=timeout_s, what="the daemon to LISTEN")
        # Its first drain (of an empty outbox) follows the LISTEN; let it pass.
        await asyncio.sleep(0.3)

    def check_alive(self) -> None:
        """Raise if the daemon exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"birddog {self.args[0]} exited with {self.proc.returncode}; "
                f"log: {self.log_path}\n" + self.log_tail()
            )

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the daemon's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> int | None:
        """SIGTERM by pid; its exit code."""
        if self.sampler is not None:
            self.sampler.stop()
        code = stop_pid(self.proc) if self.proc is not None else None
        if self._log is not None:
            self._log.close()
        return code


async def wait_until(
    check: Callable[[], Awaitable[bool]],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    what: str = "a condition",
) -> float:
    """Poll ``check`` until true; the seconds it took. Raises TimeoutError at the deadline."""
    start = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)


def spawn_python(
    args: Sequence[str], *, env: dict[str, str] | None = None, stdin: bool = False
) -> subprocess.Popen[str]:
    """Start ``python -m <args>`` of this interpreter, stdout (and stdin if asked) piped, text."""
    return subprocess.Popen(  # noqa: S603 - our interpreter, our own modules
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        text=True,
    )


async def run_python(
    args: Sequence[str], *, timeout_s: float, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], float, int]:
    """Run ``python -m <args>`` (a bench helper printing one JSON line); result, CPU s, peak RSS."""
    proc = spawn_python(args, env=env)
    sampler = Sampler(proc.pid)
    try:
        out, _ = await asyncio.wait_for(asyncio.to_thread(proc.communicate), timeout_s)
    except TimeoutError:
        stop_pid(proc)
        raise
    finally:
        cpu = sampler.cpu_s()
        sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {' '.join(args)} exited with {proc.returncode}")
    # Children's CPU is read before exit by the sampler only approximately; prefer what
    # the child reports about itself.
    result = json.loads(out.strip().splitlines()[-1])
    return result, float(result.get("cpu_s", cpu)), sampler.peak_rss


def process_cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    """User + system CPU seconds of this process (or its waited-for children), start-up included."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def dispatch(
    argv: Sequence[str],
    commands: dict[str, Callable[..., Awaitable[dict[str, Any]]]],
    run: Callable[[Awaitable[dict[str, Any]]], dict[str, Any]] = asyncio.run,
) -> None:
    """Run a bench child's command (``argv[0]``) with its arguments; print its result as JSON.

    Args:
        argv: the command and its arguments (strings, each command converts its own).
        commands: the coroutine function of each command.
        run: the event loop runner (``asyncio.run``, or a peer's own such as uvloop's).
    """
    command, *args = argv
    if command not in commands:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(run(commands[command](*args))), flush=True)


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------

CONTENT = "The delegated work is done: " + "all good. " * 48
"""A ~500-byte reply text, the same in every benchmark."""

WORKER = "bench-worker"

SEED_SQL = """
INSERT INTO birddog.outbox (
    key, recipient_agent_id, recipient_session_id, in_reply_to, command_id, outcome,
    reply, state, attempts, deferrals, due_at, created_at
)
SELECT
    'outbox:' || m.mail || ':reply:0', m.agent, m.agent || '-s', m.mail, 'cmd-' || g,
    'completed',
    jsonb_build_object(
        'key', 'outbox:' || m.mail || ':reply:0',
        'inReplyTo', m.mail,
        'to', jsonb_build_object(
            'kind', 'agent', 'agentId', m.agent, 'sessionId', m.agent || '-s'
        ),
        'from', jsonb_build_object(
            'kind', 'agent', 'agentId', $6::text, 'sessionId', $6::text || '-s'
        ),
        'replyTo', '[]'::jsonb,
        'content', $5::text,
        'createdAt', (extract(epoch FROM $7::timestamptz) * 1000)::bigint,
        'reply', jsonb_build_object('commandId', 'cmd-' || g, 'outcome', 'completed')
    ),
    'pending', 0, 0,
    $7::timestamptz + make_interval(secs => $8::float8 + (g % $9::int)),
    $7::timestamptz
FROM generate_series($1::int, $1::int + $2::int - 1) AS g,
LATERAL (
    SELECT
        $3::text || '-' || md5($3::text || g) AS mail,
        'agent-' || lpad((g % $4::int)::text, 3, '0') AS agent
) AS m
"""


def reply_body(index: int, agent: str) -> tuple[str, str]:
    """The key and JSON body of reply ``index`` to ``agent``, shaped as BirdDog's."""
    mail = f"peer-{index:08d}"
    key = f"outbox:{mail}:reply:0"
    body = {
        "key": key,
        "inReplyTo": mail,
        "to": {"kind": "agent", "agentId": agent, "sessionId": f"{agent}-s"},
        "from": {"kind": "agent", "agentId": WORKER, "sessionId": f"{WORKER}-s"},
        "replyTo": [],
        "content": CONTENT,
        "createdAt": int(time.time() * 1000),
        "reply": {"commandId": f"cmd-{index}", "outcome": "completed"},
    }
    return key, json.dumps(body)


def agent_names(count: int) -> list[str]:
    """The recipients ``agent-000`` .. in the order :data:`SEED_SQL` assigns them."""
    return [f"agent-{i:03d}" for i in range(count)]


async def add_routes(conn: asyncpg.Connection, agents: Sequence[str], inbox: InboxProcess) -> None:
    """A route for each agent to its inbox on the bench's inbox server."""
    from birddog.http.signing import generate_secret  # noqa: PLC0415 - as migrate, above

    await conn.execute(
        "INSERT INTO birddog.routes (agent_id, url, secret) "
        "SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) "
        "ON CONFLICT (agent_id) DO UPDATE SET url = excluded.url",
        list(agents),
        [inbox.url(agent) for agent in agents],
        [generate_secret() for _ in agents],
    )


async def seed_outbox(
    conn: asyncpg.Connection,
    *,
    count: int,
    agents: int,
    prefix: str,
    start: int = 0,
    due_in_s: float = -1.0,
    due_spread_s: int = 1,
    at: datetime | None = None,
) -> None:
    """Write ``count`` pending rows in one statement: keys ``outbox:<prefix>-<md5>:reply:0``.

    Keys are md5-shaped, so rows of every due time and every agent interleave in key order,
    as real mail keys (uuids) do. Agents are assigned round-robin.

    Args:
        conn: a connection to a migrated database.
        count: how many rows.
        agents: how many recipients (``agent-000`` ..).
        prefix: the mail key prefix (distinct per seeding, so keys never collide).
        start: the first sequence number.
        due_in_s: seconds from ``at`` to the first due time (negative: already due).
        due_spread_s: due times spread over this many seconds.
        at: the creation time (default: now).
    """
    await conn.execute(
        SEED_SQL,
        start,
        count,
        prefix,
        agents,
        CONTENT,
        WORKER,
        at or datetime.now(UTC),
        due_in_s,
        max(1, due_spread_s),
    )


async def others_rate(
    conn: asyncpg.Connection,
    daemon: DaemonProcess,
    *,
    excluded: Sequence[str],
    started: float,
    window_s: float,
) -> dict[str, Any]:
    """How fast the recipients not in ``excluded`` got their receipts, within a window.

    Polls (with a deadline) until every row of theirs that was pending is a receipt or
    ``window_s`` passes; the rate runs from ``started`` (wall time of the wake) to their
    last receipt, or to the window's end when they were not all done.

    Returns:
        ``rows``, ``delivered``, ``all_done``, ``elapsed_s`` and ``per_s``.
    """
    others = "NOT (recipient_agent_id = ANY($1::text[]))"
    # One statement, one snapshot: a row swapped for its receipt meanwhile counts once.
    total = await conn.fetchval(
        f"SELECT (SELECT count(*) FROM birddog.outbox WHERE {others}) "  # noqa: S608 - constant
        f"+ (SELECT count(*) FROM birddog.receipts WHERE {others})",
        list(excluded),
    )
    deadline = time.monotonic() + window_s
    delivered = 0
    while time.monotonic() < deadline:
        daemon.check_alive()
        delivered = await conn.fetchval(
            f"SELECT count(*) FROM birddog.receipts WHERE {others}",  # noqa: S608 - constant
            list(excluded),
        )
        if delivered >= total:
            break
        await asyncio.sleep(0.1)  # a poll with a deadline
    ended = time.time()
    last = await conn.fetchval(
        f"SELECT max(delivered_at) FROM birddog.receipts WHERE {others}",  # noqa: S608
        list(excluded),
    )
    done = delivered >= total and last is not None
    elapsed = (last.timestamp() if done else ended) - started
    return {
        "rows": total,
        "delivered": delivered,
        "all_done": done,
        "elapsed_s": round(elapsed, 3),
        "per_s": delivered / elapsed if elapsed > 0 else float("nan"),
    }


async def clear_outbox(conn: asyncpg.Connection) -> None:
    """Empty the outbox, receipts and wake (between rounds)."""
    await conn.execute("TRUNCATE birddog.outbox, birddog.receipts, birddog.wake")


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100), nearest-rank on the sorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def write_result(path: Path, data: dict[str, Any]) -> None:
    """Write a result file, pretty JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


# --------------------------------------------------------------------------------------
# figures and the run context
# --------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured figure, next to the baseline it is compared with.

    ``ratio`` is ``value / baseline_value`` unless ``ratio_note`` says otherwise.
    ``configuration`` names the settings that won where several were tried (a peer at
    its best); the tables print it under the figure.
    """

    name: str
    value: float
    unit: str
    baseline: str
    baseline_value: float
    ratio: float
    ratio_note: str = "value / baseline"
    target: str = ""
    met: bool | None = None
    configuration: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The figure as JSON (``configuration`` only when one was chosen)."""
        data: dict[str, Any] = {
            "name": self.name,
            "value": _round(self.value),
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_value": _round(self.baseline_value),
            "ratio": _round(self.ratio),
            "ratio_note": self.ratio_note,
            "target": self.target,
            "met": self.met,
        }
        if self.configuration:
            data["configuration"] = self.configuration
        return data


def _round(value: float) -> float:
    if not math.isfinite(value):
        return value
    if abs(value) >= 100:
        return round(value, 1)
    return round(value, 4)


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``; NaN when the baseline is zero."""
    return value / baseline if baseline else float("nan")


@dataclass
class Context:
    """What a benchmark gets: the server, the inbox, a scratch directory and the mode."""

    server: Server
    inbox: InboxProcess
    tmp: Path
    quick: bool
    profile: bool
    results: Path

    def command(self, name: str) -> str:
        """The command that reproduces this benchmark in this mode."""
        prefix = "".join(
            f"{name}={shlex.quote(os.environ[name])} "
            for name in ("BENCH_DAEMON", "BENCH_SCHEMA_DDL", "BENCH_ASK_COUNT", "BENCH_PEER_COUNT")
            if os.environ.get(name)
        )
        quick = "--quick " if self.quick else ""
        return f"{prefix}.venv/bin/python -m bench {quick}--only {name}"


class Profiler:
    """``py-spy record`` on a pid (non-blocking sampling), written as collapsed stacks."""

    def __init__(self, pid: int, out: Path, rate: int = 250) -> None:
        self.out = out
        exe = shutil.which("py-spy") or str(BIN / "py-spy")
        self.proc = subprocess.Popen(  # noqa: S603 - py-spy from this venv
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> Path:
        """Stop sampling (SIGINT makes py-spy write its output)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.out


def summarize_profile(path: Path, top: int = 25) -> list[tuple[str, float]]:
    """Self-time and inclusive shares of the hottest frames in a py-spy raw profile.

    Returns ``[(frame, inclusive share), ...]``, most inclusive first, skipping frames
    that are in every stack (the event loop).
    """
    totals: dict[str, int] = {}
    samples = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        for frame in set(stack.split(";")):
            totals[frame] = totals.get(frame, 0) + count
    if not samples:
        return []
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    return [(frame, round(n / samples, 3)) for frame, n in ranked if n < samples][:top]
