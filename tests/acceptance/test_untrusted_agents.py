"""Command agents are untrusted: tried as an attacker would, with real workers and PostgreSQL.

A worker SIGKILLed mid-turn leaves no process of that turn alive past the kill grace, and
no second worker starts the job while one lives. An agent reads everything it can think
of (its environment, the pgpass files, the worker's /proc, the route secrets through
psql): run as another OS user (``--user``) it gets none of it; run as the worker's own
user it gets exactly what SECURITY.md's "What an agent can do" says.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from birddog.postgres.embedded import EmbeddedPostgres
from birddog.supervisor import boot_id, descendants
from tests.support import eventually, process_running
from tests.support.cli import BIRDDOG, Daemon, cli
from tests.support.stacks import Harness
from tests.support.users import os_user

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

KILL_GRACE_S = 1.0
LEASE_S = 2.0

# First turn: the issue's `sh -c 'sleep 300 & sleep 300'`, stamped; the job's next turn
# answers at once. Stamps and pids go to a file in the agent's own directory (--cwd).
AGENT = """\
echo "start $(date +%s.%N)" >> turns.log
if [ -e first ]; then echo "end $(date +%s.%N)" >> turns.log; echo second turn; exit 0; fi
touch first
sh -c 'sleep 300 & sleep 300'
"""


async def send(database_url: str, job_id: str, *extra: str, **env: str) -> None:
    sent = await cli(
        database_url, "send", "--allow-unknown", "--job-id", job_id, "--to", "agent:s-agent",
        "--from", "asker:s-ask", "--reply-to", "asker:s-ask", "--key", f"mail-{job_id}",
        "--command-id", f"cmd-{job_id}", "--content", "hello", *extra, variables=env,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr


def logged(daemon: Daemon, text: str) -> Callable[[], Awaitable[bool]]:
    """A probe for eventually(): whether ``text`` is in the process's log."""

    async def predicate() -> bool:
        return text in daemon.log()

    return predicate


def descendants_of(root: int) -> list[int]:
    """The processes below ``root``, by their parent pids in /proc (never by name)."""
    return descendants(root)


async def test_a_sigkilled_worker_leaves_no_process_of_its_turn_and_no_overlapping_turn(
    database_url: str, harness: Harness, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    """A kill -9 of a worker mid-turn: its processes die within the grace; the next turn waits."""
    turns = tmp_path / "turns"
    turns.mkdir()
    (turns / "agent.sh").write_text(AGENT)
    await send(database_url, "k-1", "--max-recoveries", "1")
    timing = {"BIRDDOG_JOB_LEASE_S": str(LEASE_S), "BIRDDOG_KILL_GRACE_S": str(KILL_GRACE_S)}
    args = ("--command", "sh agent.sh", "--cwd", str(turns))
    first = daemons(*args, command="worker", **timing)

    async def recorded() -> bool:
        row = await harness.pool.fetchrow(
            "SELECT turn_pid FROM birddog.jobs WHERE job_id = 'k-1' AND state = 'running'"
        )
        return (
            row is not None
            and row["turn_pid"] is not None
            and len(descendants_of(row["turn_pid"])) >= 4
        )

    await eventually(recorded, "the first turn, recorded, to start", within_s=60)
    row = await harness.pool.fetchrow(
        "SELECT turn_host, turn_boot_id, turn_pid, turn_start_ticks, worker_id"
        " FROM birddog.jobs WHERE job_id = 'k-1'"
    )
    supervisor = row["turn_pid"]
    assert row["turn_host"] == socket.gethostname()
    assert row["worker_id"].endswith(f":{first.proc.pid}")
    assert row["turn_boot_id"] == boot_id()
    turn = [supervisor, *descendants_of(supervisor)]  # agent.sh, sh -c, two sleeps
    assert all(process_running(pid) for pid in turn)
    # A second worker is already waiting when the first dies.
    second = daemons(*args, command="worker", **timing)
    await eventually(logged(second, '"worker_started"'), "the second worker", within_s=60)
    first.kill()
    killed_at = time.monotonic()
    last_alive = time.time()
    gone_after_s = 0.0
    while alive := [pid for pid in turn if process_running(pid)]:
        last_alive = time.time()
        gone_after_s = time.monotonic() - killed_at
        assert gone_after_s < KILL_GRACE_S, f"still running: {alive}"
        await asyncio.sleep(0.01)
    lease = await harness.pool.fetchval(
        "SELECT lease_expires_at FROM birddog.jobs WHERE job_id = 'k-1'"
    )

    async def settled() -> bool:
        state: str | None = await harness.pool.fetchval(
            "SELECT state FROM birddog.jobs WHERE job_id = 'k-1'"
        )
        return state == "settled"

    await eventually(settled, "the second turn to settle the job", within_s=60)
    job = await harness.pool.fetchrow(
        "SELECT outcome, recovery_count, result_content, worker_id FROM birddog.jobs"
        " WHERE job_id = 'k-1'"
    )
    assert (job["outcome"], job["recovery_count"]) == ("completed", 1)
    assert job["result_content"] == "second turn\n"
    assert job["worker_id"].endswith(f":{second.proc.pid}")
    stamps = [line.split() for line in (turns / "turns.log").read_text().splitlines()]
    starts = [float(when) for what, when in stamps if what == "start"]
    assert len(starts) == 2
    assert starts[1] > last_alive, "the second turn began while the first still ran"
    assert starts[1] >= lease.timestamp() + KILL_GRACE_S, "recovered before lease + kill grace"
    code, log = second.terminate()
    assert code == 0, log[-2000:]
    print(
        f"\nturn of {len(turn)} processes gone within {gone_after_s:.2f} s of"
        f" the SIGKILL; the next turn began {starts[1] - last_alive:.2f} s after the last one died"
    )


# ---- what an agent can read ------------------------------------------------------------

ATTACK = r"""
data="$1"
birddog="$2"
sup=$PPID
worker=$(sed 's/.*) //' /proc/$sup/stat | cut -d' ' -f2)
echo "== env"; env
echo "== cwd"; pwd; touch written && echo "cwd writable"
echo "== fds"; ls /proc/self/fd
echo "== id"; id -u
echo "== supervisor cmdline"; cat /proc/$sup/cmdline 2>&1 | tr '\0' ' '; echo
echo "== worker cmdline"; cat /proc/$worker/cmdline 2>&1 | tr '\0' ' '; echo
echo "== worker environ"; cat /proc/$worker/environ 2>&1 | tr '\0' '\n'
echo "== worker cwd"; wcwd=$(readlink /proc/$worker/cwd 2>&1); echo "$wcwd"
echo "== worker cwd pgpass"; cat "$wcwd/.birddog/pgpass" 2>&1
echo "== data dir pgpass"; cat "$data/pgpass" 2>&1
echo "== psql"
psql "host=$data/postgres user=postgres dbname=postgres passfile=$data/pgpass" \
  -At -c 'select secret from birddog.routes' 2>&1
echo "== birddog psql"
BIRDDOG_DATA_DIR="$data" "$birddog" psql -At -c 'select secret from birddog.routes' 2>&1
echo "== end"
"""


def sections(text: str) -> dict[str, str]:
    """The attacker's report, by section (``== env`` ...)."""
    found: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("== "):
            name = line[3:]
            found[name] = ""
        else:
            found[name] = found.get(name, "") + line + "\n"
    return found


@pytest.fixture
def agent_user() -> Iterator[str]:
    """A fresh OS user for agents (root only; removed after), else the test is skipped."""
    with os_user() as name:
        yield name


async def test_an_agent_reaches_nothing_of_the_mail_room_as_another_user_and_what_it_says_as_its_own(
    embedded_dir: Path, daemons: Callable[..., Daemon], agent_user: str
) -> None:
    """With --user the attacker finds no secret; as the worker's user exactly what SECURITY.md says."""
    embedded = {"BIRDDOG_DATA_DIR": str(embedded_dir), "WORKER_MARKER": "worker-only-value"}
    daemon = daemons(DATABASE_URL="", **embedded)
    await eventually(logged(daemon, "birddog is ready"), "the daemon", within_s=90)
    added = await cli("", "route", "add", "keeper", "http://127.0.0.1:9/hook", variables=embedded)
    assert added.returncode == 0, added.stderr
    route_secret = added.stdout.split("signing secret: ")[1].split()[0]
    password = (embedded_dir / "pgpass").read_text().strip().rpartition(":")[2]
    script = embedded_dir.parent / "attack.sh"
    script.write_text(ATTACK)
    script.chmod(0o755)
    command = f"sh {script} {embedded_dir} {BIRDDOG}"
    secrets_found = (route_secret, password, "worker-only-value")

    async def attack(job_id: str, *user: str) -> dict[str, str]:
        await send("", job_id, **embedded)
        # A fresh process: the attacker reads the worker's /proc/PID/environ, which holds
        # what the worker was started with.
        done = await cli(
            "", "worker", "--command", command, *user, "--once", "--queue", "s-agent",
            timeout_s=120, fresh=True, variables=embedded,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        conn = await asyncpg.connect(EmbeddedPostgres(embedded_dir).dsn())
        try:
            text = await conn.fetchval(
                "SELECT result_content FROM birddog.jobs WHERE job_id = $1", job_id
            )
        finally:
            await conn.close()
        assert text is not None, f"job {job_id} has no result"
        return sections(text)

    # As another OS user: nothing.
    other = await attack("a-other", "--user", agent_user)
    assert other["end"] is not None
    report = "".join(other.values())
    assert not [found for found in secrets_found if found in report], report
    assert other["id"].strip() != "0"
    assert "cwd writable" in other["cwd"]
    assert "DATABASE_URL" not in other["env"]
    assert "Permission denied" in other["worker environ"]
    assert "Permission denied" in other["data dir pgpass"]

    # As the worker's own user: a clean environment and directory, and yet the worker's
    # /proc, the data directory and so the database are the agent's too.
    own = await attack("a-own")
    env = dict(line.split("=", 1) for line in own["env"].splitlines() if "=" in line)
    assert {name for name in env if not name.startswith("BIRDDOG_")} <= {
        "PATH", "HOME", "LANG", "TZ", "PWD", "SHLVL", "OLDPWD", "_",
    } | {name for name in env if name.startswith("LC_")}  # fmt: skip
    assert sorted(name for name in env if name.startswith("BIRDDOG_")) == [
        "BIRDDOG_COMMAND_ID", "BIRDDOG_FROM_AGENT", "BIRDDOG_FROM_SESSION", "BIRDDOG_JOB_ID",
        "BIRDDOG_MAIL_KEY", "BIRDDOG_SESSION_ID",
    ]  # fmt: skip
    assert "/birddog-turn-" in own["cwd"]
    assert sorted(own["fds"].split()) in (["0", "1", "2"], ["0", "1", "2", "3"])
    assert "worker-only-value" in own["worker environ"]
    assert password in own["data dir pgpass"]
    assert route_secret in own["psql"] or route_secret in own["birddog psql"]
    assert daemon.terminate()[0] == 0
