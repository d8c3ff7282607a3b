"""Acceptance fixtures: the real CLI and daemon as subprocesses, real inboxes on 127.0.0.1.

The helpers they are built on (``cli``, ``Daemon``, ``Harness``...) live in
``tests.support.cli``, ``tests.support.stacks`` and ``tests.support.inbox``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from birddog.postgres.pool import create_pool
from tests.support.cli import KINDS, Daemon, as_login, cli
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness


@pytest.fixture
def daemons(database_url: str) -> Iterator[Callable[..., Daemon]]:
    """Start daemons on the test database; every one is stopped at the end."""
    started: list[Daemon] = []

    def start(*args: str, command: str = "run", **env: str) -> Daemon:
        daemon = Daemon(database_url, *args, command=command, **env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture
async def inbox() -> AsyncIterator[TestInbox]:
    """A running multi-agent inbox on 127.0.0.1."""
    box = TestInbox()
    await box.start()
    yield box
    await box.stop()


@pytest.fixture
async def harness(database_url: str, inbox: TestInbox) -> AsyncIterator[Harness]:
    """A pool on the test database and adapters over it."""
    pool = await create_pool(database_url)
    yield Harness(pool, inbox)
    await pool.close()


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A short-pathed BIRDDOG_DATA_DIR for an embedded server a test's processes start.

    Short, since the server's socket lives inside it; reachable by the server's own user
    when tests run as root. A server still running in it at the end is stopped by its pid.
    """
    root = Path(tempfile.mkdtemp(prefix="bd-"))
    root.chmod(0o711)
    data = root / "data"
    try:
        yield data
    finally:
        if data.exists():
            from birddog.postgres.embedded import EmbeddedPostgres  # noqa: PLC0415 - an extra

            pid = EmbeddedPostgres(data).pid
            if pid is not None:  # its last user's exit stops it; this only guards a crash
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)


# ---- least privilege: one login per role ----------------------------------------------


@pytest.fixture
async def logins(database_url: str) -> AsyncIterator[dict[str, str]]:
    """``birddog migrate --roles`` as the superuser, then one login per role (DSNs by kind)."""
    done = await cli(database_url, "migrate", "--roles")
    assert done.returncode == 0, done.stderr
    assert "birddog_reader are in place" in done.stdout
    tag = secrets.token_hex(4)
    conn = await asyncpg.connect(database_url)
    made: dict[str, str] = {}
    try:
        for kind in KINDS:
            name, password = f"bdt_{tag}_{kind}", secrets.token_urlsafe(16)
            # Test-made names and passwords: letters, digits, '_' and '-' only.
            await conn.execute(
                f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE birddog_{kind}"
            )
            made[kind] = as_login(database_url, name, password)
        yield made
    finally:
        for kind in KINDS:
            await conn.execute(f"DROP ROLE IF EXISTS bdt_{tag}_{kind}")
        await conn.close()
