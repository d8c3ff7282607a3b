"""``birddog worker --command`` as a user runs it: a real worker process, real commands."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import process_running
from tests.support.cli import cli
from tests.support.stacks import Harness
from tests.support.users import os_user

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


async def send(database_url: str, job_id: str, content: str) -> None:
    sent = await cli(
        database_url, "send", "--allow-unknown", "--job-id", job_id, "--to", "upper:s-upper",
        "--from", "asker:s-ask", "--reply-to", "asker:s-ask", "--key", f"mail-{job_id}",
        "--command-id", f"cmd-{job_id}", "--content", content,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr


async def test_a_command_worker_answers_with_stdout(database_url: str, harness: Harness) -> None:
    """Worker --command 'tr a-z A-Z' --once settles the job completed with the command's output."""
    await send(database_url, "j-1", "hello")
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    reply = await harness.pool.fetchval(
        "SELECT reply FROM birddog.outbox WHERE key = 'outbox:mail-j-1:reply:0'"
    )
    assert (reply["content"], reply["reply"]["outcome"]) == ("HELLO", "completed")


async def test_after_the_handler_timeout_no_process_of_the_group_lives(
    database_url: str, harness: Harness, tmp_path: Path
) -> None:
    """A grandchild ignoring SIGTERM dies with its group at the handler timeout; job interrupted."""
    pids = tmp_path / "pids"
    await send(database_url, "j-2", "take your time")
    command = (
        f'sh -c \'trap "" TERM; (trap "" TERM; sleep 600) & echo "$$ $!" > {pids}; sleep 600\''
    )
    worked = await cli(
        database_url, "worker", "--command", command, "--once",
        BIRDDOG_HANDLER_TIMEOUT_S="1", BIRDDOG_KILL_GRACE_S="0.5",
    )  # fmt: skip
    assert worked.returncode == 0, worked.stderr
    spawned = [int(pid) for pid in pids.read_text().split()]
    assert len(spawned) == 2
    assert not any(process_running(pid) for pid in spawned)
    job = await harness.pool.fetchrow(
        "SELECT state, outcome, diagnostic FROM birddog.jobs WHERE job_id = 'j-2'"
    )
    assert (job["state"], job["outcome"]) == ("settled", "interrupted")
    assert "timed out" in job["diagnostic"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--command", "no-such-agent-program --x"], "'no-such-agent-program': not found on PATH"),
        (["--command", "cat", "--handler", "tests.acceptance.handlers:echo"], "exactly one"),
        ([], "exactly one"),
    ],
)
async def test_a_worker_that_cannot_run_says_so_in_one_line(
    database_url: str, harness: Harness, args: list[str], message: str
) -> None:
    """A missing program or a wrong flag combination is a one-line error; nothing is claimed."""
    await send(database_url, "j-3", "hello")
    refused = await cli(database_url, "worker", *args, "--once")
    assert refused.returncode == 2
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert message in error
    assert "Traceback" not in refused.stderr
    state = await harness.pool.fetchval("SELECT state FROM birddog.jobs WHERE job_id = 'j-3'")
    assert state == "queued"


@pytest.fixture
def agent_user() -> Iterator[str]:
    """A fresh OS user for agents (root only; removed after), else the test is skipped."""
    with os_user() as name:
        yield name


@pytest.mark.parametrize("held", ["data directory", "spool"])
async def test_a_user_that_owns_the_workers_data_or_spool_is_refused_in_one_line(
    database_url: str, harness: Harness, tmp_path: Path, agent_user: str, held: str
) -> None:
    """--user is refused, naming the path and the rule, when it owns the data dir or the spool."""
    await send(database_url, "j-4", "hello")
    data = tmp_path / "data"
    (data / "postgres").mkdir(parents=True)
    spool = tmp_path / "spool" / "spool.db"
    spool.parent.mkdir()
    spool.write_bytes(b"")
    owned = data / "postgres" if held == "data directory" else spool
    entry = pwd.getpwnam(agent_user)
    os.chown(owned, entry.pw_uid, entry.pw_gid)  # as the embedded server's own directory
    refused = await cli(
        database_url, "worker", "--command", "cat", "--user", agent_user, "--once",
        BIRDDOG_DATA_DIR=str(data), BIRDDOG_SPOOL_PATH=str(spool),
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert f"--user {agent_user}: uid {entry.pw_uid} owns {owned}" in error
    assert "may own or write none of the worker's data directory, spool or secrets" in error
    assert "Traceback" not in refused.stderr
    state = await harness.pool.fetchval("SELECT state FROM birddog.jobs WHERE job_id = 'j-4'")
    assert state == "queued"
