"""Headless Chromium from the OS packages, driven by Playwright, against a real console.

The tests run when a Chromium executable is found (``BIRDDOG_CHROMIUM``, else
``chromium``, ``chromium-browser``, ``google-chrome`` on PATH) and Playwright's Python
package is installed; otherwise each is skipped with the reason, and the end of the run
says so. Playwright's own browser downloads are never used. Screenshots of every page go
to a directory under the run's temporary directory, printed at the end.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from birddog.postgres.pool import Pool
from tests.support.browser import BROWSER_TESTS, SCREENSHOTS, PageWatch, open_page
from tests.support.console import ConsoleServer, Seeded, start_console

LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> str | None:
    """The Chromium to drive: ``BIRDDOG_CHROMIUM``, or the first one on PATH."""
    if configured := os.environ.get("BIRDDOG_CHROMIUM"):
        return configured if os.access(configured, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    return None


CHROMIUM = find_chromium()
if importlib.util.find_spec("playwright") is None:
    SKIP_REASON: str | None = "Playwright is not installed (make venv, or pip install --group test)"
elif CHROMIUM is None:
    SKIP_REASON = "no Chromium found (apt-get install chromium, or set BIRDDOG_CHROMIUM)"
else:
    SKIP_REASON = None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the browser tests, with the reason, when there is no browser to drive."""
    del config
    if SKIP_REASON is None:
        return
    for item in items:
        if item.nodeid.startswith(BROWSER_TESTS):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture
def screenshots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """Where this run's screenshots go (the end of the run prints it, see tests/conftest.py)."""
    where = tmp_path_factory.mktemp("console-screenshots")
    request.node.user_properties.append((SCREENSHOTS, str(where)))
    return where


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    """One headless Chromium for the whole run."""
    from playwright.async_api import async_playwright  # noqa: PLC0415 - only when present

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def read_only_console(pg_pool: Pool, seeded: Seeded) -> AsyncIterator[ConsoleServer]:
    """A read-only console over the seeded database."""
    del seeded
    server = await start_console(pg_pool, read_only=True)
    yield server
    await server.runner.cleanup()


@pytest.fixture
def watch() -> Iterator[PageWatch]:
    """Fails the test if any page opened a dialog or logged an error."""
    watched = PageWatch()
    yield watched
    assert watched.dialogs == []
    assert watched.errors == []


@pytest.fixture
async def page(browser: Any, console: ConsoleServer, watch: PageWatch) -> AsyncIterator[Any]:
    """A page signed in to :func:`console` through the URL it printed."""
    opened = await open_page(browser, console, watch)
    yield opened
    await opened.context.close()
