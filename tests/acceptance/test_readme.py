"""The README runs: every shell block, in order, on a fresh embedded server.

The blocks run top to bottom in one ``bash`` (so a variable set in one block is there
in the next), from the repository's root, after a ``birddog run`` this test starts on
an embedded server of its own: that is what ``make run`` gives a reader. Conventions
the README keeps (CONTRIBUTING.md repeats them):

- a command whose comment says ``(keeps running)`` is started in the background and
  stopped at the end, as a reader runs it in a terminal of its own;
- ``make run`` and ``make test`` are what this test stands in for, so they are skipped;
- a block right after ``<!-- not run by the README test: why -->`` is for another host
  (Docker, systemd) and is skipped;
- port 8080 is replaced by a free port, so two runs on one machine do not collide.

At the end no command may have failed, nothing may be pending, a receipt must exist,
and every background process must still be running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support import eventually, free_port
from tests.support.cli import BIRDDOG, ROOT, Daemon, cli_env
from tests.support.inbox import TestInbox
from tests.support.mcp import call, command_agents, json_errlog, stdio_mcp
from tests.support.stacks import Harness
from tests.support.transcript import play, steps_of

README = ROOT / "README.md"
SPOOL_DOC = ROOT / "docs" / "spool.md"
AGENTS_DOC = ROOT / "docs" / "agents.md"
RUN = "<!-- run by tests/acceptance/test_readme.py -->"
PLAYED = "<!-- played by tests/acceptance/test_readme.py -->"
SKIP = "<!-- not run by the README test"
KEEPS_RUNNING = "(keeps running)"
STOOD_IN_FOR = ("make run", "make test")
SHELLS = {"sh", "bash", "shell"}


@dataclass(frozen=True)
class Command:
    """One logical command line of a README block."""

    line: str
    background: bool


def shell_commands(text: str, *, marked: bool = False) -> list[Command]:
    """Every command of every shell block the README test runs, in order.

    ``marked``: only the blocks right after a ``<!-- run by tests/acceptance/test_readme.py
    -->`` line (a page of docs/ whose session this test runs).
    """
    commands: list[Command] = []
    lines = text.splitlines()
    index = 0
    previous = ""
    while index < len(lines):
        fence = re.match(r"^```(\S*)", lines[index])
        if fence is None:
            if lines[index].strip():
                previous = lines[index].strip()
            index += 1
            continue
        body: list[str] = []
        index += 1
        while not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1
        wanted = previous == RUN if marked else not previous.startswith(SKIP)
        if fence.group(1) in SHELLS and wanted:
            commands += _commands(body)
        previous = ""
    return commands


def _commands(body: list[str]) -> list[Command]:
    joined = "\n".join(body).replace("\\\n", " ")
    commands = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith(STOOD_IN_FOR):
            continue
        commands.append(Command(line, KEEPS_RUNNING in line))
    return commands


def script(commands: list[Command], *, port: int, pids: Path, logs: Path) -> str:
    """The bash script that runs the commands: in order, background ones detached."""
    out = ["set -eo pipefail", "trap 'echo \"README command failed: $BASH_COMMAND\" >&2' ERR"]
    for number, command in enumerate(commands):
        line = command.line.replace("8080", str(port))
        if command.background:
            code = line.split(" #", 1)[0]
            out.append(f"{code} > {logs}/background-{number}.log 2>&1 < /dev/null &")
            out.append(f"echo $! >> {pids}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_the_readme_has_shell_blocks_and_runs_the_tour() -> None:
    """The extraction finds the tour: a listener, a send, a worker, a command agent and an ask."""
    commands = shell_commands(README.read_text(encoding="utf-8"))
    lines = " ".join(command.line for command in commands)
    assert any(command.background and " listen " in command.line for command in commands)
    assert " send " in lines
    assert " worker " in lines
    assert "make run" not in lines
    assert any(command.background and " worker --command " in command.line for command in commands)
    assert " ask --to " in lines


def _assert_no_traceback(logs: Path) -> None:
    """No background command's log in ``logs`` shows a traceback."""
    for log_path in logs.glob("background-*.log"):
        assert "Traceback" not in log_path.read_text(), log_path.read_text()[-2000:]


async def test_every_readme_shell_block_runs_on_a_fresh_embedded_server(
    embedded_dir: Path, tmp_path: Path
) -> None:
    """The README's commands all succeed, and the tour's reply ends as a receipt."""
    assert (ROOT / ".venv" / "bin" / "birddog").exists(), "the README assumes make's .venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIRDDOG_")}
    env.pop("DATABASE_URL", None)
    env.update(
        BIRDDOG_DATA_DIR=str(embedded_dir),
        BIRDDOG_METRICS_PORT="0",
        BIRDDOG_WORKER_METRICS_PORT="0",
        BIRDDOG_LOG_FORMAT="json",
        BIRDDOG_BASE_DELAY_S="0.2",
        BIRDDOG_MAX_DELAY_S="1",
    )

    async def birddog(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, [BIRDDOG, *args], env=env, cwd=ROOT, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip

    pids = tmp_path / "pids"
    pids.touch()
    daemon_log = tmp_path / "daemon.log"
    with daemon_log.open("w") as log:
        daemon = await asyncio.to_thread(
            subprocess.Popen, [BIRDDOG, "run"], env=env, cwd=ROOT, stdout=log, stderr=log
        )
    try:
        await eventually(
            lambda: "birddog is ready" in daemon_log.read_text() or daemon.poll() is not None,
            "the daemon (make run's stand-in)",
            within_s=90,
            every_s=0.1,
        )
        assert daemon.poll() is None, daemon_log.read_text()[-2000:]
        text = script(
            shell_commands(README.read_text(encoding="utf-8")),
            port=free_port(),
            pids=pids,
            logs=tmp_path,
        )
        done = await asyncio.to_thread(  # the README's own commands, as a reader runs them
            subprocess.run, ["bash", "-c", text],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
        assert "WHAT IS DUE?" in done.stdout  # the tour's ask, answered by worker --command

        async def delivered() -> bool:
            shown = await birddog("pending", "--json")
            return shown.returncode == 0 and json.loads(shown.stdout) == []

        await eventually(delivered, "nothing pending", within_s=60, every_s=0.1)
        receipts = await birddog("psql", "-At", "-c", "SELECT count(*) FROM birddog.receipts")
        assert int(receipts.stdout.strip()) >= 1, receipts.stderr
        for pid in [int(p) for p in pids.read_text().split()]:
            os.kill(pid, 0)  # still running: raises if it died
    finally:
        for pid in [int(p) for p in pids.read_text().split()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        await asyncio.to_thread(daemon.wait, timeout=30)
    _assert_no_traceback(tmp_path)


def embedded_env(embedded_dir: Path) -> dict[str, str]:
    """This process's environment for a reader on the embedded server in ``embedded_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIRDDOG_")}
    env.pop("DATABASE_URL", None)
    env.update(
        BIRDDOG_DATA_DIR=str(embedded_dir),
        BIRDDOG_METRICS_PORT="0",
        BIRDDOG_WORKER_METRICS_PORT="0",
    )
    return env


async def run_marked_session(
    page: Path, env: dict[str, str], tmp_path: Path, *, needs: str
) -> subprocess.CompletedProcess[str]:
    """Run the marked shell blocks of a docs page as a reader would; they must all succeed."""
    page_text = await asyncio.to_thread(page.read_text, encoding="utf-8")
    commands = shell_commands(page_text, marked=True)
    assert any(needs in command.line for command in commands), f"{page.name} lost its session"
    text = script(commands, port=free_port(), pids=tmp_path / "pids", logs=tmp_path)
    done = await asyncio.to_thread(  # the page's commands, as a reader runs them
        subprocess.run, ["bash", "-c", text],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return done


async def test_the_spool_session_of_docs_spool_runs_as_written_on_the_embedded_server(
    embedded_dir: Path, tmp_path: Path
) -> None:
    """docs/spool.md's session: the send spools, status lists it, forward puts it in once."""
    env = embedded_env(embedded_dir)
    done = await run_marked_session(SPOOL_DOC, env, tmp_path, needs=" send ")
    assert "spooled (database unreachable): send:mail-" in done.stdout, done.stdout
    assert "1 mail waiting" in done.stdout
    assert "forwarded 1 mail" in done.stdout
    assert "started by this command" in done.stderr
    assert "not running now" in done.stderr
    counted = await asyncio.to_thread(
        subprocess.run, [BIRDDOG, "psql", "-At", "-c", "SELECT count(*) FROM birddog.jobs"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert counted.stdout.strip() == "1", counted.stderr


async def test_the_turns_session_of_docs_agents_runs_as_written_on_the_embedded_server(
    embedded_dir: Path, tmp_path: Path
) -> None:
    """docs/agents.md's turn: three mails, two of them escalations, answered in one spawn."""
    env = embedded_env(embedded_dir)
    done = await run_marked_session(AGENTS_DOC, env, tmp_path, needs="--batch 20")
    for content in ("the deploy is stuck", "prod alarms are red", "please rerun the flaky test"):
        assert f"on it: {content}" in done.stdout, done.stdout
    assert re.search(r"escalation\s+worker\s+1\s+3\s+3\.0", done.stdout), done.stdout


async def test_the_digest_session_of_docs_agents_runs_as_written_on_the_embedded_server(
    embedded_dir: Path, tmp_path: Path
) -> None:
    """docs/agents.md's digest: the task answered, two mails waiting, a live session takes both.

    The digest is at 18:00 UTC: a run in the seconds before then would see it fall due.
    """
    env = embedded_env(embedded_dir)
    done = await run_marked_session(AGENTS_DOC, env, tmp_path, needs="--digest daily@18:00")
    out = done.stdout
    assert "settled 1 job: 1 completed; left 2 jobs waiting for their digest (at " in out, out
    assert out.count("queued, waiting for digest (at ") == 2, out
    assert "2 queued waiting for digest (informational mail); the next at " in out, out
    assert "\nok\n" in out, out
    assert "settled 2 jobs: 2 completed" in out, out
    assert out.count("noted (2 mails in this turn, 2 of them reports)") == 2, out
    assert "on it: please look at the red build" in out, out


def played_transcript(text: str) -> str:
    """The ``text`` block right after the :data:`PLAYED` line of a docs page."""
    after = text.split(PLAYED + "\n", 1)[1]
    assert after.startswith("```text\n"), "the played transcript is a text block"
    return after.removeprefix("```text\n").split("\n```", 1)[0]


async def test_the_two_agents_transcript_of_docs_agents_plays_as_written(
    database_url: str, harness: Harness, inbox: TestInbox, daemons: Callable[..., Daemon]
) -> None:
    """docs/agents.md's two agents, alice with an inbox URL route: every call as written.

    Alice's route posts to an inbox URL, bob's is a mailbox, a drain daemon runs, and each
    agent has its own ``birddog mcp --as`` over stdio. Every result is held to the
    transcript; the reply to alice's send is then posted to her URL, and only that one.
    """
    steps = steps_of(played_transcript(AGENTS_DOC.read_text(encoding="utf-8")))
    assert {step.tool for step in steps} >= {"ask", "next_task", "answer", "send", "result"}
    await harness.add_agent("alice")
    await harness.routes.add("bob", kind="mailbox")
    daemons()
    with json_errlog() as errlog:
        async with (
            stdio_mcp(database_url, "alice:s-alice", errlog) as alice,
            stdio_mcp(database_url, "bob:s-bob", errlog) as bob,
        ):
            await play({"alice": alice, "bob": bob}, steps)
    posted = await eventually(
        lambda: [reply.content for reply in inbox.replies],
        "the reply to alice's send, posted to her inbox URL",
        until=bool,
        within_s=60,
    )
    assert posted == ["Noted."]


def mcp_configs(text: str) -> list[dict[str, Any]]:
    """Every MCP server a ``json`` block of ``text`` configures (``mcpServers`` entries)."""
    blocks = re.findall(r"^```json\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    return [
        server
        for block in blocks
        if "mcpServers" in block
        for server in json.loads(block)["mcpServers"].values()
    ]


async def test_the_readme_mcp_config_starts_a_server_that_asks_as_written(
    database_url: str,
) -> None:
    """The README's MCP JSON config, run as a client runs it: its ask gets its answer.

    The command is the README's (``birddog``, the venv's), its arguments as written; the
    README's tour's question (``ask upper:s-upper what is due``) goes to a command agent.
    """
    [server] = mcp_configs(README.read_text(encoding="utf-8"))
    assert server["command"] == "birddog"
    params = StdioServerParameters(
        command=BIRDDOG, args=server["args"], env=cli_env(database_url, **server.get("env", {}))
    )
    with json_errlog() as errlog:
        async with (
            command_agents(database_url, slow_s=1, lease_s=60),
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            assert "me:s-me" in (session.instructions or "")
            await session.list_tools()
            answered, text, is_error = await call(
                session, "ask", to="upper:s-upper", content="what is due?"
            )
    assert not is_error, text
    assert answered["content"] == "WHAT IS DUE?"
