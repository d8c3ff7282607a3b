"""Agents have no terminal: a command agent cannot open /dev/tty or type into the worker's.

Issue 38's first attack: an agent kept the worker's session and controlling terminal and,
with ``TIOCSTI``, typed a command into the root shell that started the worker. Every
process ``birddog.spawn`` starts now runs in a session of its own. Each test gives a
"worker" (a small harness running :func:`birddog.spawn.command_handler`) a pseudo-terminal
as its controlling terminal, as a shell would, runs a hostile agent through it, and then
reads the terminal's input queue: anything the agent pushed would be there. The same
agent started the old way (the worker's session kept) is the control: it opens
``/dev/tty`` and, where the kernel allows ``TIOCSTI``, injects.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.users import os_user

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

AGENT = r"""
import errno, fcntl, json, os, sys, termios
fields = open("/proc/self/stat").read().rpartition(")")[2].split()
report = {"sid": os.getsid(0), "tty_nr": int(fields[4]), "uid": os.getuid(), "pushed": []}
held = [0, 1, 2]
try:
    held.append(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    report["dev_tty"] = "opened"
except OSError as exc:
    report["dev_tty"] = errno.errorcode.get(exc.errno, str(exc.errno))
for fd in held:
    try:
        for byte in b"id\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        report["pushed"].append(fd)
    except OSError:
        pass
sys.stdout.write(json.dumps(report))
"""
"""The attacker: where it runs, whether it reaches a terminal, and what it pushed into one."""

HARNESS = r"""
import asyncio, json, os, shlex, subprocess, sys, termios
from birddog.core.jobs import AgentJobPayload
from birddog.spawn import command_handler, run_as

slave, user, python, agent = sys.argv[1:5]
terminal = os.open(slave, os.O_RDWR)  # a session leader's first terminal: its own
attrs = termios.tcgetattr(terminal)
attrs[3] &= ~(termios.ICANON | termios.ECHO)  # what is pushed can be read back at once
termios.tcsetattr(terminal, termios.TCSANOW, attrs)
os.close(os.open("/dev/tty", os.O_RDWR))  # the worker does have a terminal


def queued():
    os.set_blocking(terminal, False)
    try:
        return os.read(terminal, 4096).decode("utf-8", "replace")
    except BlockingIOError:
        return ""
    finally:
        os.set_blocking(terminal, True)


handler = command_handler(f"{python} -I -S -c {shlex.quote(agent)}", user=user or None)
spawned = json.loads(asyncio.run(handler(AgentJobPayload(session_id="s", command_fact_id="c"))))
spawned_queue = queued()
account = run_as(user) if user else None
# The control: the same agent as a plain child, in the worker's session.
old = subprocess.run(
    [python, "-I", "-S", "-c", agent], capture_output=True, check=True,
    user=account.uid if account else None, group=account.gid if account else None,
    extra_groups=[] if account else None,
)
print(json.dumps({
    "worker_sid": os.getsid(0),
    "spawned": spawned, "spawned_queue": spawned_queue,
    "control": json.loads(old.stdout), "control_queue": queued(),
}))
"""
"""The worker: a pty as its controlling terminal, the agent run by the command handler."""


def tiocsti_for_everyone() -> bool:
    """Whether the kernel lets a process without CAP_SYS_ADMIN use TIOCSTI at all."""
    try:
        return Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() != "0"
    except OSError:
        return True  # kernels before 6.2 have no switch: TIOCSTI is on


@pytest.fixture
def terminal() -> Iterator[str]:
    """A pseudo-terminal: the harness makes its slave its controlling terminal."""
    master, slave = pty.openpty()
    try:
        yield os.ttyname(slave)
    finally:
        os.close(slave)
        os.close(master)


def run_worker(terminal: str, *, user: str = "", python: str = sys.executable) -> dict[str, Any]:
    """Run the harness in a session of its own with ``terminal`` as its terminal."""
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", HARNESS, terminal, user, python, AGENT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_command_agent_has_no_terminal_and_cannot_open_dev_tty(terminal: str) -> None:
    """A command agent runs in a session of its own: no controlling terminal, /dev/tty ENXIO."""
    said = run_worker(terminal)
    spawned, control = said["spawned"], said["control"]
    assert control["dev_tty"] == "opened", control  # the worker's session has a terminal
    assert control["sid"] == said["worker_sid"]
    assert spawned["sid"] != said["worker_sid"]
    assert spawned["tty_nr"] == 0, spawned
    assert spawned["dev_tty"] == "ENXIO", spawned


def test_an_agent_of_another_user_cannot_type_into_the_workers_terminal(terminal: str) -> None:
    """A --user agent's TIOCSTI reaches no terminal; the same agent in the old session could."""
    python = shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin")
    if python is None:
        pytest.skip("no python3 another user can run (/usr/bin/python3)")
    with os_user() as user:
        said = run_worker(terminal, user=user, python=python)
    spawned, control = said["spawned"], said["control"]
    assert spawned["uid"] != 0
    assert control["uid"] == spawned["uid"]
    assert spawned["tty_nr"] == 0, spawned
    assert spawned["dev_tty"] == "ENXIO", spawned
    assert spawned["pushed"] == [], spawned
    assert said["spawned_queue"] == ""
    if not tiocsti_for_everyone():
        pytest.skip(
            "dev.tty.legacy_tiocsti=0: the kernel refuses TIOCSTI to every unprivileged "
            "process, so the control cannot inject (no controlling terminal was proven above)"
        )
    # The control proves the attack would work against a worker's session.
    assert control["dev_tty"] == "opened", control
    assert control["pushed"] == [3], control
    assert said["control_queue"] == "id\n"
