"""Shared fixtures: one PostgreSQL server per session, one fresh database per test.

Also the seeded console both the HTTP and the browser tests look at. Helpers live in
``tests.support``; fixtures here and in each suite's ``conftest.py`` are built on them.

Under pytest-xdist (``make test`` runs ``-n 3``) every worker is a session of its own: its
own server (or, with ``DATABASE_URL``, its own template database on the shared server),
its own clones, ports and temporary directories. The tests that share something bigger
run on one worker each (``xdist_group``): the browser tests share one Chromium, the
tests that create cluster-wide roles never race each other on a shared server, and the
thousand-asks tests never take each other's CPU.

The server is, in order: ``DATABASE_URL`` when set; a testcontainers PostgreSQL when a
Docker daemon answers; else the embedded server (``birddog.postgres.embedded``) in a
temporary directory. The schema is migrated once into ``birddog_template``; each test
gets its own ``CREATE DATABASE ... TEMPLATE birddog_template`` clone, dropped afterwards
(clones are made a couple of tests ahead, and dropped in the background).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from hypothesis import settings

from birddog.postgres import migrate
from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.pool import Pool, create_pool
from tests.support.browser import BROWSER_TESTS, SCREENSHOTS
from tests.support.console import ConsoleServer, Seeded, seed, start_console

# Example durations vary with the machine's load (CI shares 2 cores with PostgreSQL and
# subprocesses); a slow example is not a failure, so no property test has a deadline.
settings.register_profile("birddog", deadline=None)
settings.load_profile("birddog")

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
"""This process's pytest-xdist worker id (``gw0``...), empty in a serial run."""

TEMPLATE_DATABASE = f"birddog_template_{WORKER}" if WORKER else "birddog_template"
DOCKER_PROBE_TIMEOUT_S = 5.0


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointed at another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        subprocess.run(
            ["docker", "info"],  # noqa: S607 - the docker CLI from PATH, as a user runs it
            capture_output=True,
            timeout=DOCKER_PROBE_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


@contextlib.contextmanager
def _container_server() -> Iterator[str | None]:
    try:
        from testcontainers.postgres import PostgresContainer  # noqa: PLC0415 - only with Docker

        container = PostgresContainer("postgres:17-alpine", driver=None)
        container.start()
    except Exception:  # any failure here means "no usable Docker": the embedded server follows
        yield None
        return
    try:
        yield container.get_connection_url()
    finally:
        container.stop()


@contextlib.contextmanager
def _embedded_server() -> Iterator[str]:
    # Short path: the unix socket lives in the data directory (108-byte limit).
    root = Path(tempfile.mkdtemp(prefix="birddog-pg-"))
    server = EmbeddedPostgres(root)
    try:
        yield server.start()
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


async def _tune_for_tests(dsn: str) -> None:
    # Durability settings of a throwaway server only: tests never survive a power cut.
    conn = await asyncpg.connect(dsn)
    try:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            await conn.execute(f"ALTER SYSTEM SET {setting} = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


# ---- running in parallel, and what the end of the run says --------------------------------

ROLE_TESTS = ("tests/acceptance/test_roles.py", "tests/integration/test_a2a.py")
"""Tests that run ``birddog migrate --roles`` (cluster-wide roles), besides ``logins`` users
(the A2A module's server runs under a ``birddog_a2a`` login)."""

MANY_ASKS_TESTS = "tests/acceptance/test_many_asks.py"
"""A thousand asks at once, each with a deadline: two of them side by side took each other's
CPU (a fresh clone's run: 1,000 sends through ten connections past their 15 s deadline)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, keep the browser, the role and the thousand-asks tests on one worker each."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.nodeid.startswith(BROWSER_TESTS):
            item.add_marker(pytest.mark.xdist_group("browser"))
        elif item.nodeid.startswith(ROLE_TESTS) or "logins" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("roles"))
        elif item.nodeid.startswith(MANY_ASKS_TESTS):
            item.add_marker(pytest.mark.xdist_group("many_asks"))


_browser: dict[str, Any] = {"skipped": 0, "reason": "", "screenshots": set()}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count skipped browser tests and note where screenshots went (a worker's reports too)."""
    if report.nodeid.startswith(BROWSER_TESTS) and report.skipped and report.when == "setup":
        _browser["skipped"] += 1
        if isinstance(report.longrepr, tuple):
            _browser["reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
    for name, value in report.user_properties:
        if name == SCREENSHOTS:
            _browser["screenshots"].add(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say at the end of the run that the browser tests did not run, or where screenshots are."""
    if _browser["skipped"]:
        terminalreporter.write_line(
            f"browser tests: {_browser['skipped']} skipped: {_browser['reason']}",
            yellow=True,
            bold=True,
        )
    for where in sorted(_browser["screenshots"]):
        terminalreporter.write_line(f"console screenshots: {where}")


# ---- the database -------------------------------------------------------------------------


@pytest.fixture(scope="session")
async def postgres_server_dsn() -> AsyncIterator[str]:
    """The DSN of the session's PostgreSQL server (its ``postgres`` database)."""
    if url := os.environ.get("DATABASE_URL"):
        yield url
        return
    if _docker_answers():
        with _container_server() as container_dsn:
            if container_dsn is not None:
                yield container_dsn
                return
    with _embedded_server() as dsn:
        await _tune_for_tests(dsn)
        yield dsn


async def _admin(server_dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def template_database(postgres_server_dsn: str) -> str:
    """The name of a database migrated to head, cloned for each test."""
    await _admin(
        postgres_server_dsn,
        f"DROP DATABASE IF EXISTS {TEMPLATE_DATABASE} WITH (FORCE)",
        f"CREATE DATABASE {TEMPLATE_DATABASE}",
    )
    await migrate(with_database(postgres_server_dsn, TEMPLATE_DATABASE))
    return TEMPLATE_DATABASE


class DatabaseFactory:
    """Clones of the template database, made ahead of need and dropped in the background.

    ``CREATE DATABASE ... TEMPLATE`` takes a few hundred milliseconds; cloning the next
    databases while the current test runs takes that off every test's clock.
    """

    def __init__(self, server_dsn: str, template: str, *, ahead: int = 2) -> None:
        self.server_dsn = server_dsn
        self.template = template
        self.ahead = ahead
        self._ready: list[asyncio.Task[str]] = []
        self._drops: set[asyncio.Task[None]] = set()

    async def take(self) -> str:
        """A fresh clone's DSN; starts cloning the next ones."""
        while len(self._ready) < self.ahead + 1:
            self._ready.append(asyncio.create_task(self._create()))
        name = await self._ready.pop(0)
        self._ready.append(asyncio.create_task(self._create()))
        return with_database(self.server_dsn, name)

    def give_back(self, dsn: str) -> None:
        """Drop a clone in the background."""
        name = urlsplit(dsn).path.lstrip("/")
        task = asyncio.create_task(self._drop_quietly(name))
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)

    async def close(self) -> None:
        """Drop every clone made ahead and wait for the drops."""
        for task in self._ready:
            with contextlib.suppress(Exception):
                self.give_back(with_database(self.server_dsn, await task))
        self._ready.clear()
        if self._drops:
            await asyncio.gather(*self._drops, return_exceptions=True)

    async def _drop_quietly(self, name: str) -> None:
        # A drop that fails (a loaded machine's connect timing out) leaves one clone on a
        # throwaway server; it must not surface as an unretrieved task error in a test.
        with contextlib.suppress(Exception):
            await _admin(self.server_dsn, _drop(name))

    async def _create(self) -> str:
        name = f"birddog_test_{uuid.uuid4().hex[:16]}"
        await _admin(self.server_dsn, f"CREATE DATABASE {name} TEMPLATE {self.template}")
        return name


def _drop(name: str) -> str:
    return f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"


@pytest.fixture(scope="session")
async def database_factory(
    postgres_server_dsn: str, template_database: str
) -> AsyncIterator[DatabaseFactory]:
    """Makes and drops the per-test clones of the template database."""
    factory = DatabaseFactory(postgres_server_dsn, template_database)
    try:
        yield factory
    finally:
        await factory.close()


@pytest.fixture
async def database_url(database_factory: DatabaseFactory) -> AsyncIterator[str]:
    """A fresh database at the current schema, for this test only."""
    dsn = await database_factory.take()
    try:
        yield dsn
    finally:
        database_factory.give_back(dsn)


@pytest.fixture
async def empty_database_url(postgres_server_dsn: str) -> AsyncIterator[str]:
    """A fresh database with no BirdDog schema, for this test only."""
    name = f"birddog_test_{uuid.uuid4().hex[:16]}"
    await _admin(postgres_server_dsn, f"CREATE DATABASE {name}")
    try:
        yield with_database(postgres_server_dsn, name)
    finally:
        await _admin(postgres_server_dsn, _drop(name))


@pytest.fixture
async def pg_pool(database_url: str) -> AsyncIterator[Pool]:
    """An asyncpg pool (BirdDog's codecs) on this test's database."""
    pool = await create_pool(database_url, min_size=1, max_size=8)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def pg_conn(database_url: str) -> AsyncIterator[Any]:
    """A plain asyncpg connection on this test's database, outside any pool."""
    conn = await asyncpg.connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def seeded(pg_pool: Pool) -> Seeded:
    """The test database, with something in every state."""
    return await seed(pg_pool, now=datetime.now(UTC))


@pytest.fixture
async def console(pg_pool: Pool, seeded: Seeded) -> AsyncIterator[ConsoleServer]:
    """A console with actions over the seeded database, on 127.0.0.1."""
    del seeded
    server = await start_console(pg_pool)
    yield server
    await server.runner.cleanup()
