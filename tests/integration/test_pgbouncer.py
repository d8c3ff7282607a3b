"""Through PgBouncer in transaction mode: the drain, the wake protocol and settlements work.

Skipped when no ``pgbouncer`` binary is installed. PgBouncer runs on 127.0.0.1 in front
of the test database, as the user that owns the server's socket when run as root (it
refuses to run as root).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from birddog import MailRoom, Outcome, StoreUnavailable
from birddog.clock import SystemClock
from birddog.engine import EngineConfig
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.outbox import PostgresOutbox
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.wake import PostgresWake
from birddog.testing import RecordingTransport
from tests.support import ALICE, CAROL, enqueue, eventually, free_port, make_job, make_row

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
)

pytestmark = pytest.mark.skipif(PGBOUNCER is None, reason="no pgbouncer installed")


def _server_of(dsn: str) -> tuple[str, int, str, str, str]:
    """Host, port, user, password and database of a DSN (password from its passfile)."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = parts.port or int(query.get("port", ["5432"])[0])
    user = parts.username or "postgres"
    password = parts.password or ""
    if not password and "passfile" in query:
        for line in Path(query["passfile"][0]).read_text().splitlines():
            fields = line.split(":")
            if len(fields) >= 5 and fields[3] in ("*", user):
                password = ":".join(fields[4:])
                break
    return host, port, user, password, parts.path.lstrip("/")


async def _answers(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether PgBouncer accepts a connection on ``port`` yet (it must still be running)."""
    assert proc.poll() is None, f"pgbouncer exited with {proc.returncode}"
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


def _configure(database_url: str, root: Path, listen: int) -> tuple[list[str], str]:
    """Write a transaction-mode configuration in ``root``; the command and the DSN."""
    host, port, user, password, database = _server_of(database_url)
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{database} = host={host} port={port} user={user} password={password} "
        f"dbname={database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\ndefault_pool_size = 4\n"
        "max_client_conn = 100\nignore_startup_parameters = extra_float_digits\n"
        f"logfile = {root}/pgbouncer.log\npidfile = {root}/pgbouncer.pid\n"
    )
    command = [str(PGBOUNCER), str(root / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses root: run it as whoever owns the server's socket directory.
        owner = pwd.getpwuid(Path(host).stat().st_uid).pw_name if host.startswith("/") else "nobody"
        shutil.chown(root, user=owner)
        for path in root.iterdir():
            shutil.chown(path, user=owner)
        command += ["-u", owner]
    return command, f"postgresql://{user}@127.0.0.1:{listen}/{database}"


@pytest.fixture
async def bouncer(database_url: str) -> AsyncIterator[str]:
    """A PgBouncer in transaction mode for the test database; its DSN (no password)."""
    root = Path(tempfile.mkdtemp(prefix="birddog-bouncer-"))
    listen = free_port()
    command, dsn = _configure(database_url, root, listen)
    proc = await asyncio.to_thread(
        subprocess.Popen, command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await eventually(lambda: _answers(proc, listen), "pgbouncer listening", within_s=10)
        yield dsn
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, timeout=10)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def pooled(bouncer: str) -> AsyncIterator[Pool]:
    """A BirdDog pool through the bouncer, as BIRDDOG_PGBOUNCER=1 makes it."""
    pool = await create_pool(bouncer, max_size=6, pgbouncer=True)
    yield pool
    await pool.close()


async def test_the_engine_drains_through_pgbouncer(pooled: Pool) -> None:
    """Claims, posts, stores and the wake protocol all work in transaction mode."""
    outbox = PostgresOutbox(pooled)
    wake = PostgresWake(pooled)
    await outbox.add([make_row(f"outbox:m{i:03d}:reply:0", agent=f"a{i % 5}") for i in range(200)])
    transport = RecordingTransport(lambda reply: not reply.key.endswith("7:reply:0"))
    room = MailRoom(
        outbox=outbox,
        transport=transport,
        wake=wake,
        clock=SystemClock(),
        config=EngineConfig(window_size=64),
    )
    engine = room.engine()
    reports: list[int] = []
    await asyncio.wait_for(
        engine.serve(
            stop=asyncio.Event(),
            listener=None,
            backstop_s=1,
            on_report=lambda report: reports.append(len(report.delivered)),
            once=True,
        ),
        30,
    )
    assert sum(reports) == 180
    assert await pooled.fetchval("SELECT count(*) FROM birddog.receipts") == 180
    retried = await pooled.fetchval(
        "SELECT count(*) FROM birddog.outbox WHERE attempts = 1 AND jsonb_array_length(attempt_log) = 1"
    )
    assert retried == 20
    now = datetime.now(UTC)
    assert await wake.going_to_sleep(until=now + timedelta(seconds=30), now=now) > now


async def test_settlements_fan_out_through_pgbouncer(pooled: Pool) -> None:
    """Enqueue, claim and settle with fan-out and the wake's shared lock, in transaction mode."""
    jobs = PostgresJobs(pooled, clock=SystemClock())
    await enqueue(pooled, make_job("b1", reply_to=[ALICE, CAROL]))
    claimed = await jobs.claim(lease_s=60)
    assert claimed is not None
    keys = await jobs.settle(
        job_id="b1", claim_token=claimed.claim_token, outcome=Outcome.COMPLETED, content="ok"
    )
    assert len(keys) == 2
    assert await pooled.fetchval("SELECT count(*) FROM birddog.outbox") == 2


async def test_without_the_setting_pgbouncer_refuses_the_pool_in_one_line(bouncer: str) -> None:
    """Without BIRDDOG_PGBOUNCER the pool sends a start-up setting PgBouncer refuses, clearly."""
    with pytest.raises(StoreUnavailable, match="unsupported startup parameter"):
        await create_pool(bouncer, max_size=2)
