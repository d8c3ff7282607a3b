"""A live session on the TypeScript MCP SDK gets its tasks before the worker beside it spawns.

``live_session.mjs`` (the TS SDK's Client, pinned by ``package-lock.json`` here) starts
``birddog mcp --as bob:s-bob`` over stdio and waits in ``next_task``, while ``birddog worker
--command`` serves bob beside it, its agent appending a line to a file at each start. Mails
queued while the session is live are all the session's, answered through ``answer``, with
no spawn; once the script has closed its client, the session has left, and the next mail
is the worker's at once (one spawn: the counter counts). Skipped, with the reason, where
``node`` or the installed ``node_modules`` (``make interop-deps``) are absent.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from birddog import AgentAddress, AgentWork, Job, Mail, agent_job
from birddog.postgres.pool import Pool
from tests.support import enqueue, eventually
from tests.support.cli import ROOT, Daemon, cli_env, command_line

HERE = Path(__file__).parent
NODE = shutil.which("node")
SDK = HERE / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
CONTENTS = ("first task", "second task", "third task")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not on PATH (the interop tests need Node)"),
    pytest.mark.skipif(
        not SDK.is_file(), reason="tests/interop/node_modules is absent: run make interop-deps"
    ),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc"),
    pytest.mark.timeout(180),
]


def task_for_bob(job_id: str, content: str) -> Job:
    """A task from alice to bob's session (no reply wanted)."""
    mail = Mail(key=f"m-{job_id}", to=BOB, from_=ALICE, reply_to=[], content=content, created_at=1)
    work = AgentWork(job_id=job_id, session_id=BOB.session_id, command_fact_id=job_id)
    return agent_job(work, mail)


@pytest.fixture
def spawns(tmp_path: Path) -> Path:
    """The file bob's command agent appends one line to per start."""
    return tmp_path / "spawns"


@pytest.fixture
def worker(database_url: str, spawns: Path) -> Iterator[Daemon]:
    """``birddog worker --command`` for bob, its agent counting its starts."""
    started = Daemon(
        database_url,
        "--command",
        f"sh -c 'echo $$ >> {spawns}; tr a-z A-Z'",
        "--agent",
        "bob",
        command="worker",
    )
    yield started
    started.kill()


def spawned(spawns: Path) -> int:
    """How many times bob's command agent started."""
    return len(spawns.read_text().splitlines()) if spawns.exists() else 0


async def live_holders(pool: Pool) -> list[str]:
    """The holders of bob's live sessions that still count."""
    rows = await pool.fetch(
        "SELECT holder FROM birddog.live_sessions WHERE queue_key = $1 AND expires_at > now()",
        "bob\x1fs-bob",
    )
    return [row["holder"] for row in rows]


async def settled(pool: Pool, job_id: str) -> dict[str, Any]:
    """The job once settled: its worker, times and reply content."""

    async def look() -> dict[str, Any]:
        row = await pool.fetchrow(
            "SELECT state, worker_id, created_at, started_at, result_content "
            "FROM birddog.jobs WHERE job_id = $1",
            job_id,
        )
        return {} if row is None else dict(row)

    return await eventually(
        look, f"job {job_id} settled", until=lambda row: row.get("state") == "settled"
    )


async def test_a_ts_sdk_live_session_takes_its_tasks_with_no_spawn_beside_a_worker(
    database_url: str, pg_pool: Pool, worker: Daemon, spawns: Path
) -> None:
    """Three tasks through next_task and answer, the worker's agent never started; then the worker's."""
    del worker  # running beside the session
    assert NODE is not None
    command, args = command_line(["mcp", "--as", f"{BOB.agent_id}:{BOB.session_id}"])
    server = {"command": command, "args": args, "env": cli_env(database_url), "cwd": str(ROOT)}
    config = {"server": server, "count": len(CONTENTS), "waitS": 30}
    proc = await asyncio.create_subprocess_exec(
        NODE,
        str(HERE / "live_session.mjs"),
        json.dumps(config),
        cwd=HERE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        [holder] = await eventually(lambda: live_holders(pg_pool), "bob's session live")
        assert holder.startswith("mcp:")
        await enqueue(pg_pool, *(task_for_bob(f"t-{n}", text) for n, text in enumerate(CONTENTS)))
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()[-4000:]
    seen = json.loads(out)
    assert [(t["status"], t["content"]) for t in seen["tasks"]] == [
        ("task", text) for text in CONTENTS
    ]
    assert [answer["isError"] for answer in seen["answers"]] == [False] * len(CONTENTS)
    for n, text in enumerate(CONTENTS):
        row = await settled(pg_pool, f"t-{n}")
        assert (row["worker_id"], row["result_content"]) == (holder, text[::-1])
    assert spawned(spawns) == 0
    # The client closed: the session left, and the worker takes the next mail at once.
    await eventually(
        lambda: live_holders(pg_pool),
        "bob's session left",
        until=lambda holders: holders == [],
        within_s=10,
    )
    await enqueue(pg_pool, task_for_bob("after", "for the worker"))
    row = await settled(pg_pool, "after")
    assert row["result_content"] == "FOR THE WORKER"
    assert row["worker_id"] != holder
    assert row["started_at"] - row["created_at"] < timedelta(seconds=30)  # no grace waited
    assert spawned(spawns) == 1
