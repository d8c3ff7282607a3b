"""An outage on real processes: mail sent while PostgreSQL is stopped arrives once, in order.

The test starts a PostgreSQL server of its own and stops it. Four concurrent streams of
``birddog send`` processes then send every mail; some senders are SIGKILLed mid-send
(their mail sent again, as a caller that saw no answer would). The server starts, a
``birddog spool forward`` is SIGKILLed mid-way, then a daemon (which forwards at start)
and a worker run: every mail becomes one job, in its stream's order, each reply lands in
the sender's mailbox, the spool is empty and ``birddog check`` says ``ok``.

``make test`` runs a reduced size; ``make chaos`` (``BIRDDOG_CHAOS_FULL=1``) sends 1,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from birddog.clock import SystemClock
from birddog.postgres import migrate
from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import answer_for, eventually
from tests.support.chaos import Process, birddog_env
from tests.support.cli import BIRDDOG, ROOT

FULL = os.environ.get("BIRDDOG_CHAOS_FULL") == "1"
MAILS = 1000 if FULL else 40
STREAMS = 4
KILLED_SENDS = 25 if FULL else 4
"""Sends SIGKILLed part-way (then sent again)."""
SEED = int(os.environ.get("BIRDDOG_CHAOS_SEED", "20261202"))

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(2400 if FULL else 600)]


def send_args(index: int, stream: int) -> list[str]:
    """``birddog send`` of mail ``index`` of ``stream``: alice to bob's stream session."""
    return [
        "send", "--allow-unknown", "--job-id", f"out-{index}", "--to", f"bob:s-{stream}", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", f"mail-{index}", "--command-id", f"cmd-{index}",
        "--content", f"mail {index} of stream {stream}",
    ]  # fmt: skip


async def send_stream(
    stream: int, indexes: list[int], killed: set[int], env: dict[str, str], rng: random.Random
) -> int:
    """Send each mail of a stream in order; a doomed send is SIGKILLed first, then sent again.

    Returns:
        How many sends were killed before they answered.
    """
    kills = 0
    for index in indexes:
        if index in killed:
            proc = await asyncio.create_subprocess_exec(
                BIRDDOG, *send_args(index, stream), env=env, cwd=ROOT,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                await asyncio.wait_for(proc.wait(), rng.uniform(0.2, 2.5))
            except TimeoutError:
                # The send may end between the timeout and the signal: then it answered.
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)  # our own child, by its pid
                kills += int(await proc.wait() == -signal.SIGKILL)
        done = await asyncio.create_subprocess_exec(
            BIRDDOG, *send_args(index, stream), env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(done.communicate(), 120)
        assert done.returncode == 0, err.decode()
        assert out.decode().strip() == f"spooled (database unreachable): out-{index}", err.decode()
    return kills


def cli_json(env: dict[str, str], *args: str) -> dict[str, object]:
    """A ``birddog`` command's JSON output."""
    done = subprocess.run(  # noqa: S603 - our own console script
        [BIRDDOG, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode in {0, 1}, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


async def counts(pool: Pool) -> dict[str, int]:
    """Jobs, jobs not settled, replies pending or dead, receipts and mailbox rows."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM birddog.jobs) AS jobs,"
        " (SELECT count(*) FROM birddog.jobs WHERE state <> 'settled') AS open,"
        " (SELECT count(*) FROM birddog.outbox) AS outbox,"
        " (SELECT count(*) FROM birddog.receipts) AS receipts,"
        " (SELECT count(*) FROM birddog.mailbox WHERE agent_id = 'alice') AS mailbox"
    )
    assert row is not None
    return dict(row)


async def test_mail_sent_while_postgres_is_stopped_arrives_once_in_order() -> None:
    """Every spooled mail becomes one job in stream order, answered and delivered; check ok."""
    rng = random.Random(SEED)
    root = Path(tempfile.mkdtemp(prefix="bd-spool-"))
    server = EmbeddedPostgres(root)
    pool: Pool | None = None
    processes: list[Process] = []
    try:
        dsn = await asyncio.wait_for(asyncio.to_thread(server.start), 60)
        await asyncio.wait_for(migrate(dsn), 60)
        pool = await create_pool(dsn, min_size=0, max_size=2)
        await PostgresRoutes(pool, clock=SystemClock()).add("alice", kind="mailbox")
        await pool.close()
        pool = None
        env = birddog_env(dsn)
        await asyncio.to_thread(server.stop, "fast")

        began = time.monotonic()
        streams = {s: [i for i in range(MAILS) if i % STREAMS == s] for s in range(STREAMS)}
        killed = set(rng.sample(range(MAILS), KILLED_SENDS))
        kills = await asyncio.gather(
            *(
                send_stream(s, ids, killed, env, random.Random(SEED + s))
                for s, ids in streams.items()
            )
        )
        sending_s = time.monotonic() - began
        status = cli_json(env, "spool", "status", "--json")
        assert isinstance(status["mails"], int)
        assert status["mails"] >= MAILS, status
        away = cli_json(env, "check", "--json")
        assert away["ok"] is False

        await asyncio.wait_for(asyncio.to_thread(server.start), 60)
        pool = opened = await create_pool(dsn, min_size=1, max_size=2)  # `opened`: never None
        forwarder = Process("forward", ["spool", "forward"], env, root)
        processes.append(forwarder)
        await eventually(
            lambda: opened.fetchval("SELECT count(*) FROM birddog.jobs"),
            "the forwarder's first jobs",
            until=lambda n: n > 0 or not forwarder.alive(),
            within_s=120,
            every_s=0.01,
        )
        forwarder_killed_mid_way = forwarder.alive()
        forwarder.kill()

        processes.append(Process("daemon", ["run"], env, root))
        processes.append(
            Process("worker", ["worker", "--handler", "tests.chaos.handlers:echo"], env, root)
        )
        await eventually(
            lambda: counts(pool) if pool else {},
            "every job settled and every reply in alice's mailbox",
            until=lambda c: (
                (c["jobs"], c["open"], c["outbox"], c["mailbox"]) == (MAILS, 0, 0, MAILS)
            ),
            within_s=600 if FULL else 180,
            every_s=0.5,
        )
        rows = await pool.fetch(
            "SELECT queue, job_id FROM birddog.jobs ORDER BY created_at, job_id"
        )
        for stream, ids in streams.items():
            stored = [r["job_id"] for r in rows if r["queue"] == f"s-{stream}"]
            assert stored == [f"out-{i}" for i in ids], stream
        replies = await pool.fetch("SELECT command_id, reply::text AS reply FROM birddog.mailbox")
        for row in replies:
            assert answer_for(row["command_id"]) in row["reply"]
        status = cli_json(env, "spool", "status", "--json")
        assert (status["mails"], status["quarantined"]) == (0, 0), status
        check = cli_json(env, "check", "--json")
        assert check["ok"] is True, check
        print(
            f"spool outage: {MAILS} mails from {STREAMS} streams spooled in {sending_s:.1f} s "
            f"({sum(kills)} sends killed); forwarder killed mid-way: {forwarder_killed_mid_way}; "
            f"all delivered {time.monotonic() - began:.1f} s after the first send"
        )
    except BaseException:
        for process in processes:
            print(f"----- {process.name} (pid {process.pid}) -----\n{process.tail(15)}")
        raise
    finally:
        for process in processes:
            if process.alive():
                process.terminate()
        if pool is not None:
            await asyncio.wait_for(pool.close(), 10)
        await asyncio.to_thread(server.stop, "immediate")
        shutil.rmtree(root, ignore_errors=True)
