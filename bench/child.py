"""A bench helper process that talks with the bench in lines of JSON, both sides.

A peer's worker and its loader run as children of the bench (``python -m <module>
<command> ...``). Each prints one JSON object per line on stdout as it reaches a stage
(:func:`say`) and may wait for a word from the bench on stdin (:func:`heard`); its last
line is its result (:func:`bench.harness.dispatch`). The bench side is :class:`Child`:
it reads the lines up to the stage it expects, sends words, and stops the child by its
pid, sampling its CPU and peak RSS meanwhile.

So a loader can hold its jobs in an open transaction until the bench has started its
clocks, and commit when told: the clock then starts at a commit, for every system alike.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from bench.harness import Sampler, spawn_python, stop_pid


def say(**fields: Any) -> None:
    """Tell the bench that a stage is reached: ``fields`` as one JSON line on stdout."""
    print(json.dumps(fields), flush=True)


async def heard() -> str:
    """The next word from the bench (one line on stdin), without blocking the loop."""
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


class Child:
    """A bench helper ``python -m <args>`` run by the bench: its lines in, words out.

    Args:
        args: the module and its arguments.
        env: extra environment (a peer's DSN).
        name: how errors name it.
    """

    def __init__(self, args: Sequence[str], *, env: dict[str, str], name: str) -> None:
        self.name = name
        self.proc = spawn_python(args, env=env, stdin=True)
        self.sampler = Sampler(self.proc.pid)
        self.lines: list[dict[str, Any]] = []

    async def expect(self, key: str, *, timeout_s: float) -> dict[str, Any]:
        """Read lines until one has ``key``; that line. Raises if the child ends first."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), timeout_s)
            if not line:
                code = await asyncio.to_thread(self.proc.wait, 15)
                raise RuntimeError(f"{self.name} exited with {code} before {key!r}")
            fields = _fields(line)
            if fields is None:
                continue
            self.lines.append(fields)
            if key in fields:
                return fields

    def tell(self, word: str) -> None:
        """Send ``word`` as one line on the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def check_alive(self) -> None:
        """Raise if the child has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")

    def cpu_s(self) -> float:
        """The child's CPU seconds so far (user + system)."""
        return self.sampler.cpu_s()

    @property
    def peak_rss_mb(self) -> float:
        """The largest RSS sampled so far, MB."""
        return round(self.sampler.peak_rss / 2**20, 1)

    async def finish(self, *, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait for the child to exit by itself; its last line (its result)."""
        try:
            out, _ = await asyncio.wait_for(asyncio.to_thread(self.proc.communicate), timeout_s)
        finally:
            self.sampler.stop()
        return self._result(out)

    async def stop(self) -> dict[str, Any]:
        """SIGTERM by pid (SIGKILL if it lingers); its last line, or ``{}``."""
        self.sampler.stop()
        await asyncio.to_thread(stop_pid, self.proc)
        assert self.proc.stdout is not None
        return self._result(await asyncio.to_thread(self.proc.stdout.read))

    def _result(self, out: str) -> dict[str, Any]:
        if self.proc.returncode not in (0, None):
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
        for line in reversed(out.splitlines()):
            if (fields := _fields(line)) is not None:
                return fields
        return self.lines[-1] if self.lines else {}


def _fields(line: str) -> dict[str, Any] | None:
    """A line of the protocol (a JSON object), or ``None`` for anything else a library printed."""
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def kill(children: Sequence[Child]) -> None:
    """Stop every child still running, by its pid (cleanup after a failure)."""
    for child in children:
        child.sampler.stop()
        if child.proc.poll() is None:
            stop_pid(child.proc)
        for stream in (child.proc.stdin, child.proc.stdout):
            if stream is not None:
                stream.close()
