"""The supervisor: nothing a command starts outlives it, its worker, or the worker's SIGKILL.

Real processes. The commands write the pids they start to a file the test names, and the
test checks those pids in /proc (an exited zombie counts as dead): never a process found
by its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from birddog.core.turns import Turn
from birddog.spawn import end_leftover_turn, process_group, run_command
from birddog.supervisor import boot_id, descendants, process_start_ticks
from tests.support import eventually, process_running
from tests.support.users import os_user

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

SH = "/bin/sh"

# A grandchild that leaves the group and the session (setsid) after a double fork, and
# writes its pid: only a subreaper can still find it once its parent has exited. The
# command returns once the pid is written (the pipe's last writer closed), so a command
# that exits at once never races the grandchild's write.
ESCAPE = (
    "import os, sys, time\n"
    "r, w = os.pipe()\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        with open(sys.argv[1], 'a') as out: out.write(f'{os.getpid()}\\n')\n"
    "        os.close(w)\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
    "os.close(w)\n"
    "os.read(r, 1)\n"
    "os.wait()\n"
)


def pids_in(path: Path, count: int, *, within_s: float = 30) -> list[int]:
    """The first ``count`` pids written to ``path``, waiting for them with a deadline."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        pids = [int(word) for line in lines for word in line.split()]
        if len(pids) >= count and path.read_text().endswith("\n"):
            return pids[:count]
        time.sleep(0.02)
    raise AssertionError(
        f"{path} never held {count} pids: {path.read_text() if path.exists() else 'absent'}"
    )


async def all_dead(pids: list[int], *, within_s: float) -> float:
    """Wait until none of ``pids`` runs; the seconds it took. Fails naming the live ones."""
    began = time.monotonic()
    while True:
        alive = [pid for pid in pids if process_running(pid)]
        if not alive:
            return time.monotonic() - began
        assert time.monotonic() - began < within_s, f"still running after {within_s} s: {alive}"
        await asyncio.sleep(0.01)


def parent_of(pid: int) -> int | None:
    """The parent pid /proc gives ``pid`` (None: it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except OSError:
        return None


def stat_of(pid: int) -> str:
    """What /proc says of a process, for a failure's message."""
    try:
        return Path(f"/proc/{pid}/stat").read_text()
    except OSError as exc:
        return str(exc)


def environment(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], **extra}


SRC = Path(__file__).resolve().parents[2] / "src"


def start_caller(script: str, *args: str) -> subprocess.Popen[bytes]:
    """This interpreter running ``script``: a stand-in for a worker, killed by its pid."""
    return subprocess.Popen(  # noqa: S603 - this interpreter, a script of this test
        [sys.executable, "-c", script, *args], env={**os.environ, "PYTHONPATH": str(SRC)}
    )


def stop_caller(caller: subprocess.Popen[bytes]) -> None:
    if caller.poll() is None:
        caller.kill()
    caller.wait(timeout=10)


async def test_a_grandchild_that_left_the_session_is_ended_when_the_command_exits(
    tmp_path: Path,
) -> None:
    """A double-forked setsid() grandchild is re-parented to the supervisor and ended with it."""
    pids = tmp_path / "pids"
    done = await run_command(
        [sys.executable, "-c", ESCAPE, str(pids)], env=environment(), grace_s=0.5
    )
    assert done.returncode == 0
    [escaped] = pids_in(pids, 1)
    assert not process_running(escaped)


async def test_the_exit_status_is_the_commands_own() -> None:
    """Exit codes and deaths by signal come back as if there were no supervisor between."""
    assert (await run_command([SH, "-c", "exit 3"], env=environment())).returncode == 3
    assert (await run_command([SH, "-c", "exit 0"], env=environment())).returncode == 0
    killed = await run_command([SH, "-c", "kill -SEGV $$"], env=environment())
    assert killed.returncode == -signal.SIGSEGV
    with pytest.raises(Exception, match="killed by SIGSEGV"):
        killed.check()


async def test_only_fds_0_to_2_are_open_in_the_command(tmp_path: Path) -> None:
    """An fd the caller leaves inheritable never reaches the command: ls /proc/self/fd shows 0-2."""
    leaked_r, leaked_w = os.pipe()
    os.set_inheritable(leaked_r, True)
    os.set_inheritable(leaked_w, True)
    try:
        done = await run_command(["ls", "-l", "/proc/self/fd"], env=environment())
    finally:
        os.close(leaked_r)
        os.close(leaked_w)
    lines = [line.split() for line in done.stdout.decode().splitlines() if "->" in line]
    fds = {int(words[words.index("->") - 1]): words[-1] for words in lines}
    # ls's own handle on the directory it lists is the only other one.
    others = {fd: target for fd, target in fds.items() if fd > 2}
    assert {0, 1, 2} <= set(fds)
    assert all(target.startswith("/proc/") for target in others.values()), fds
    assert len(others) <= 1, fds


async def test_the_command_runs_in_the_directory_given(tmp_path: Path) -> None:
    """The command runs in the directory given as cwd (the supervisor starts there)."""
    done = await run_command(["pwd"], env=environment(), cwd=tmp_path)
    assert done.stdout.decode().strip() == str(tmp_path)


async def test_the_supervisor_and_the_command_lead_and_join_one_group(tmp_path: Path) -> None:
    """The supervisor leads a new process group; the command is in it, and is its child."""
    async with process_group(
        [SH, "-c", "sleep 600"], env=environment(), stdin=None, stdout=None, stderr=None
    ) as group:
        assert group.command_pid is not None
        assert os.getpgid(group.pgid) == group.pgid != os.getpgrp()
        assert os.getpgid(group.command_pid) == group.pgid
        assert group.command_pid in descendants(group.pgid)
    assert not process_running(group.command_pid)


KILLED_WORKER = """
import asyncio, os, sys
from birddog.spawn import run_command

async def main() -> None:
    await run_command(
        ["/bin/sh", "-c", sys.argv[1]],
        env={"PATH": os.environ["PATH"], "PIDS": sys.argv[2]},
        grace_s=float(sys.argv[3]),
    )

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("script", "count", "grace_s"),
    [
        ('sleep 300 & echo "$$ $!" > "$PIDS"; sleep 300', 2, 1.0),
        # SIGTERM-proof, and a grandchild that left for a session of its own.
        (
            'trap "" TERM; (trap "" TERM; sleep 300) & echo "$$ $!" > "$PIDS.1";'
            f' {sys.executable} -c "{ESCAPE}" "$PIDS.1"; mv "$PIDS.1" "$PIDS"; sleep 300',
            3,
            1.0,
        ),
    ],
    ids=["sleepers", "stubborn-and-escaped"],
)
async def test_a_sigkilled_caller_leaves_nothing_running(
    tmp_path: Path, script: str, count: int, grace_s: float
) -> None:
    """After kill -9 of the process that ran the command, all it started dies within the grace."""
    pids = tmp_path / "pids"
    caller = start_caller(KILLED_WORKER, script, str(pids), str(grace_s))
    try:
        spawned = await asyncio.to_thread(pids_in, pids, count, within_s=60)
        assert all(process_running(pid) for pid in spawned)
        stop_caller(caller)
        took = await all_dead(spawned, within_s=grace_s + 1.0)
    finally:
        stop_caller(caller)
    print(f"\n{len(spawned)} processes of a SIGKILLed caller gone in {took:.2f} s")


LEFTOVER = """
import asyncio, os, sys
from birddog.spawn import process_group

async def main() -> None:
    async with process_group(
        ["/bin/sh", "-c", sys.argv[1]], env={"PATH": os.environ["PATH"], "PIDS": sys.argv[2]},
        grace_s=0.5, stdin=None, stdout=None, stderr=None,
    ) as group:
        with open(sys.argv[2] + ".group", "w") as out:
            out.write(f"{group.pgid}\\n")
        await asyncio.Event().wait()

asyncio.run(main())
"""

# Between the test and the worker: a subreaper, so that the worker's orphaned supervisor
# is re-parented here and its process group stays in this session. (Re-parented to PID 1,
# its stopped group would be orphaned, and the kernel would SIGCONT it at once.)
HOST = """
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
caller = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
with open(sys.argv[3] + ".caller", "w") as out:
    out.write(f"{caller.pid}\\n")
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.05)
"""


async def test_a_leftover_turn_of_a_dead_worker_is_ended_and_a_live_one_is_not(
    tmp_path: Path,
) -> None:
    """A supervisor that could not act on its worker's death is ended by the next worker."""
    pids = tmp_path / "pids"
    command = f'{sys.executable} -c "{ESCAPE}" "$PIDS"; sleep 300 & echo $! >> "$PIDS"; sleep 300'
    host = start_caller(HOST, LEFTOVER, command, str(pids))
    try:
        spawned = await asyncio.to_thread(pids_in, pids, 2, within_s=60)
        [supervisor] = await asyncio.to_thread(pids_in, Path(f"{pids}.group"), 1)
        [worker] = await asyncio.to_thread(pids_in, Path(f"{pids}.caller"), 1)
        ticks = process_start_ticks(supervisor)
        booted = boot_id()
        assert ticks is not None
        assert booted is not None
        turn = Turn(host=socket.gethostname(), boot_id=booted, pid=supervisor, start_ticks=ticks)
        # Its worker runs: the turn is not a leftover, and another start time is another process.
        assert await end_leftover_turn(turn, grace_s=0.5) is False
        reused = Turn(turn.host, turn.boot_id, turn.pid, turn.start_ticks + 1)
        assert await end_leftover_turn(reused, grace_s=0.5) is False
        os.kill(supervisor, signal.SIGSTOP)  # it cannot act on its worker's death
        os.kill(worker, signal.SIGKILL)
        await all_dead([worker], within_s=10)
        # A killed process shows as a zombie while its other threads still exit, and its
        # children are re-parented only when the last one has: wait for that.
        await eventually(
            lambda: parent_of(supervisor),
            "the supervisor's parent once its worker is gone",
            until=lambda parent: parent != worker,
            within_s=10,
        )
        assert all(process_running(pid) for pid in [supervisor, *spawned])
        seen = stat_of(supervisor)
        assert await end_leftover_turn(turn, grace_s=0.5) is True, (seen, turn, worker)
        await all_dead([supervisor, *spawned], within_s=5)
    finally:
        stop_caller(host)


# A worker of one job: the command handler running an agent that leaves things behind in
# its directory (one it cannot enter among them), writes its pid there, and waits.
TURN_WORKER = """
import asyncio, sys
from birddog.core.jobs import AgentJobPayload
from birddog.spawn import command_handler

agent = (
    "mkdir -p left/locked && touch left/locked/file left/file && chmod 000 left/locked; "
    "echo $$ > pid.part; mv pid.part pid; exec sleep 600"
)
handler = command_handler(f"/bin/sh -c '{agent}'", grace_s=0.5, user=sys.argv[1] or None)
asyncio.run(handler(AgentJobPayload(session_id="s", command_fact_id="c")))
"""


@pytest.mark.parametrize("as_user", [False, True], ids=["worker's user", "--user"])
async def test_a_sigkilled_worker_leaves_no_turn_directory_behind(
    tmp_path: Path, as_user: bool
) -> None:
    """Kill -9 of a worker mid-turn: the supervisor ends the turn and removes its directory."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with contextlib.ExitStack() as adapters:
        user = adapters.enter_context(os_user()) if as_user else ""
        worker = await asyncio.create_subprocess_exec(
            *(sys.executable, "-c", TURN_WORKER, user),
            env={**os.environ, "TMPDIR": str(temporary)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            said = await eventually(
                lambda: list(temporary.glob("birddog-turn-*/pid")), "the agent's pid", within_s=30
            )
            turn = said[0].parent
            # Read before the kill: the supervisor removes the directory as soon as it can.
            written = await eventually(
                lambda: said[0].read_text().strip(), "the agent's pid written", within_s=10
            )
            agent_pid = int(written)
            assert (turn / "left" / "file").exists()
            if as_user:
                assert turn.stat().st_uid == pwd.getpwnam(user).pw_uid  # the agent's own
            worker.kill()
            assert await asyncio.wait_for(worker.wait(), 10) == -signal.SIGKILL
            await all_dead([agent_pid], within_s=10)
            await eventually(lambda: not turn.exists(), "the turn directory removed", within_s=10)
            assert list(temporary.iterdir()) == []
        finally:
            if worker.returncode is None:
                worker.kill()
                await asyncio.wait_for(worker.wait(), 10)
