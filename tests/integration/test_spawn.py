"""Kill what you spawn: process groups ended whole, on completion, cancellation and limits.

Real processes; "dead" is checked by pid in /proc (an orphaned zombie counts as dead,
since nothing runs in it).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from birddog import AgentAddress, AgentJobPayload, Mail
from birddog.spawn import (
    CommandFailed,
    CommandNotFound,
    OutputTooLarge,
    command_argv,
    command_handler,
    describe_exit,
    job_environment,
    process_group,
    run_command,
)
from tests.support import eventually, process_running

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

SH = "/bin/sh"

# A grandchild that ignores SIGTERM, and a child that ignores it too: only SIGKILL ends them.
STUBBORN = (
    'trap "" TERM; (trap "" TERM; sleep 600) & echo "$$ $!" > "$PIDS"; echo started; sleep 600'
)


def read_pids(path: Path) -> list[int] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return [int(pid) for pid in text.split()] if text.endswith("\n") else None


async def pids_from(path: Path) -> list[int]:
    pids = await eventually(
        lambda: asyncio.to_thread(read_pids, path),
        f"the pids in {path}",
        until=lambda pids: pids is not None,
        within_s=30,
    )
    assert isinstance(pids, list), pids
    return pids


def payload(content: str = "hello") -> AgentJobPayload:
    mail = Mail(
        key="mail-1",
        to=AgentAddress(agent_id="upper", session_id="s-upper"),
        from_=AgentAddress(agent_id="asker", session_id="s-ask"),
        reply_to=[AgentAddress(agent_id="asker", session_id="s-ask")],
        content=content,
        created_at=1,
    )
    return AgentJobPayload(session_id="s-upper", command_fact_id="cmd-1", mail=mail)


async def test_run_command_feeds_stdin_and_collects_stdout() -> None:
    """The input reaches stdin; stdout comes back whole, the exit status with it."""
    done = await run_command(command_argv("tr a-z A-Z"), input=b"hello\nworld")
    assert (done.returncode, done.stdout) == (0, b"HELLO\nWORLD")


async def test_a_large_input_and_output_pass_through() -> None:
    """A megabyte in and out does not deadlock on full pipes."""
    data = os.urandom(512 * 1024).hex().encode()
    done = await run_command(command_argv("cat"), input=data, max_output_bytes=len(data))
    assert done.stdout == data


async def test_a_failure_keeps_the_tail_of_stderr() -> None:
    """A non-zero exit keeps the status and only the end of a long stderr."""
    script = "i=0; while [ $i -lt 2000 ]; do echo noise $i >&2; i=$((i+1)); done; echo last words >&2; exit 3"
    done = await run_command([SH, "-c", script])
    assert done.returncode == 3
    assert done.stderr_tail.endswith(b"last words\n")
    assert len(done.stderr_tail) <= 4096
    with pytest.raises(CommandFailed) as caught:
        done.check()
    assert str(caught.value).startswith("exit status 3: ")
    assert str(caught.value).endswith("last words")


def test_describe_exit_fits_a_diagnostic_and_cuts_at_a_word() -> None:
    """The description names the status or signal and keeps the end, starting on a word."""
    assert describe_exit(2, b"") == "exit status 2"
    assert describe_exit(-9, b"oom\n") == "killed by SIGKILL: oom"
    long = describe_exit(1, b" ".join(b"word%d" % i for i in range(200)))
    assert len("CommandFailed: " + long) <= 200
    assert long.startswith("exit status 1: word")
    assert long.endswith("word199")


async def test_what_a_finished_command_left_running_is_ended(tmp_path: Path) -> None:
    """A background process the command left behind is killed when the command exits."""
    pids = tmp_path / "pids"
    done = await run_command(
        [SH, "-c", 'sleep 600 & echo "$!" > "$PIDS"; echo done'],
        env={**os.environ, "PIDS": str(pids)},
        grace_s=5,
    )
    assert done.stdout == b"done\n"
    [leftover] = await pids_from(pids)
    assert not process_running(leftover)


async def test_cancelling_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    """Cancelled mid-run, every process of the group dies, SIGTERM-proof ones by SIGKILL."""
    pids = tmp_path / "pids"
    task = asyncio.create_task(
        run_command([SH, "-c", STUBBORN], env={**os.environ, "PIDS": str(pids)}, grace_s=0.3)
    )
    spawned = await pids_from(pids)
    assert all(process_running(pid) for pid in spawned)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(process_running(pid) for pid in spawned)


async def test_a_timeout_ends_the_group_too(tmp_path: Path) -> None:
    """asyncio.timeout around the call ends the whole group before TimeoutError arrives."""
    pids = tmp_path / "pids"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            await run_command(
                [SH, "-c", STUBBORN], env={**os.environ, "PIDS": str(pids)}, grace_s=0.3
            )
    assert not any(process_running(pid) for pid in await pids_from(pids))


async def test_too_much_output_stops_the_command() -> None:
    """A command writing past the limit is stopped and reported, not buffered for ever."""
    with pytest.raises(OutputTooLarge) as caught:
        await run_command(command_argv("yes"), max_output_bytes=100_000, grace_s=1)
    assert "100000 bytes" in str(caught.value)


async def test_process_group_ends_the_group_when_the_block_raises(tmp_path: Path) -> None:
    """Leaving a process_group block by an exception ends the group."""
    pids = tmp_path / "pids"

    async def buggy_handler() -> None:
        async with process_group(
            [SH, "-c", STUBBORN], env={**os.environ, "PIDS": str(pids)}, grace_s=0.3
        ):
            await pids_from(pids)
            raise RuntimeError("handler bug")

    with pytest.raises(RuntimeError, match="handler bug"):
        await buggy_handler()
    assert not any(process_running(pid) for pid in await pids_from(pids))


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("no-such-program-birddog --flag", "'no-such-program-birddog': not found on PATH"),
        ("/nonexistent/tool", "'/nonexistent/tool': not found"),
        ("", "empty"),
        ("tr 'a-z", "cannot parse"),
    ],
)
def test_a_command_that_cannot_run_is_refused_up_front(command: str, message: str) -> None:
    """A missing, empty or unparsable command is a one-line error before any job runs."""
    with pytest.raises(CommandNotFound) as caught:
        command_handler(command)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    """A path to a file without the execute bit is refused as not executable."""
    script = tmp_path / "agent.sh"
    script.write_text("echo hi\n")
    with pytest.raises(CommandNotFound, match="not executable"):
        command_argv(str(script))


async def test_command_handler_passes_content_and_ids() -> None:
    """Stdin is the content; the ids are in the environment; worker credentials are not."""
    script = (
        'cat; echo; echo "$BIRDDOG_SESSION_ID $BIRDDOG_COMMAND_ID $BIRDDOG_MAIL_KEY '
        "$BIRDDOG_FROM_AGENT $BIRDDOG_FROM_SESSION job=${BIRDDOG_JOB_ID:-none} "
        'db=${DATABASE_URL:-none} secret=${BIRDDOG_SECRET_KEY:-none}"'
    )
    os.environ["BIRDDOG_SECRET_KEY"] = "not-for-agents"
    try:
        handle = command_handler(f"{SH} -c '{script}'")
        reply = await handle(payload("question?"))
    finally:
        del os.environ["BIRDDOG_SECRET_KEY"]
    assert reply == ("question?\ns-upper cmd-1 mail-1 asker s-ask job=none db=none secret=none\n")


async def test_command_handler_fails_on_a_non_zero_exit() -> None:
    """A non-zero exit raises CommandFailed with the tail of stderr."""
    handle = command_handler(f"{SH} -c 'echo out; echo cannot do that >&2; exit 4'")
    with pytest.raises(CommandFailed, match="exit status 4: cannot do that"):
        await handle(payload())


async def test_command_handler_refuses_output_that_is_not_utf8() -> None:
    """Bytes that are not UTF-8 on stdout fail the job with a clear reason."""
    handle = command_handler(
        f"{sys.executable} -c 'import sys; sys.stdout.buffer.write(b\"\\xff\")'"
    )
    with pytest.raises(CommandFailed, match="not UTF-8"):
        await handle(payload())


def test_job_environment_without_mail() -> None:
    """A job without mail gets the session, command and job ids only."""
    bare = AgentJobPayload(session_id="s", command_fact_id="c")
    assert job_environment(bare, "job-9") == {
        "BIRDDOG_SESSION_ID": "s",
        "BIRDDOG_COMMAND_ID": "c",
        "BIRDDOG_JOB_ID": "job-9",
    }
