"""Receiving replies without writing code: ``birddog listen``, and the runnable example."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import eventually, free_port
from tests.support.cli import BIRDDOG, ROOT, cli, cli_env
from tests.support.stacks import Harness, fan_out

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn(database_url: str, tmp_path: Path) -> Iterator[Spawn]:
    """Start a process on the test database, output to files; each is stopped at the end."""
    processes: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
            process = subprocess.Popen(  # noqa: S603 - our own console script or example
                list(args), env=cli_env(database_url), cwd=ROOT, stdout=out, stderr=err,
                text=True,
            )  # fmt: skip
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=20)


async def test_listen_prints_each_reply_and_acknowledges_it(
    database_url: str, harness: Harness, tmp_path: Path, spawn: Spawn
) -> None:
    """Listen reads the route's secret, turns the reply into a receipt and prints one line."""
    port = free_port()
    await harness.routes.add("alice", f"http://127.0.0.1:{port}/inbox")
    out, err = tmp_path / "out", tmp_path / "err"
    listener = spawn(BIRDDOG, "listen", "alice", "--port", str(port), "--count", "1")

    async def listening() -> bool:
        return "listening for alice's replies" in err.read_text()

    await eventually(listening, "the listener", within_s=30)
    [key] = await fan_out(harness, 1, ["alice"], prefix="listen")
    assert (await cli(database_url, "run", "--once")).returncode == 0
    assert listener.wait(timeout=30) == 0
    assert out.read_text().splitlines() == [f"{key} completed from bob:s-bob: reply 0"]
    assert await harness.states() == {key: "receipt"}


async def test_listen_without_a_route_says_how_to_add_one(database_url: str) -> None:
    """Listen for an agent with no route exits 1 naming the command that adds one."""
    done = await cli(database_url, "listen", "nobody", "--port", str(free_port()))
    assert done.returncode == 1
    assert "no route for agent 'nobody'" in done.stderr
    assert "birddog route add nobody" in done.stderr


async def test_the_receiving_example_stores_a_reply_before_acknowledging_it(
    database_url: str, harness: Harness, tmp_path: Path, spawn: Spawn
) -> None:
    """examples/receive_replies.py verifies, stores the reply durably, and it becomes a receipt."""
    port = free_port()
    route = await harness.routes.add("alice", f"http://127.0.0.1:{port}/inbox")
    assert route.secret is not None
    store = tmp_path / "replies.jsonl"
    spawn(
        sys.executable, "examples/receive_replies.py", "--secret", route.secret,
        "--port", str(port), "--store", str(store),
    )  # fmt: skip
    [key] = await fan_out(harness, 1, ["alice"], prefix="example")

    async def received() -> bool:
        await cli(database_url, "run", "--once")
        return store.exists() and await harness.states() == {key: "receipt"}

    await eventually(received, "the example to take the reply", within_s=60)
    [stored] = [json.loads(line) for line in store.read_text().splitlines()]
    assert (stored["key"], stored["content"]) == (key, "reply 0")
