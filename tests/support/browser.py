"""Pages of a console in a browser driven by Playwright, watched for what they must not do."""

from __future__ import annotations

from typing import Any

from tests.support.console import ConsoleServer

VIEWPORT = {"width": 1280, "height": 600}

BROWSER_TESTS = "tests/browser/"
"""Where the browser tests live (their node ids start so)."""

SCREENSHOTS = "console_screenshots"
"""The user property under which a test reports where its screenshots went."""


class PageWatch:
    """What a page did that it must not: dialogs (a script ran) and console errors (CSP)."""

    def __init__(self) -> None:
        self.dialogs: list[str] = []
        self.errors: list[str] = []

    def attach(self, page: Any) -> None:
        """Record the page's dialogs (dismissed) and console errors."""

        async def on_dialog(dialog: Any) -> None:
            self.dialogs.append(dialog.message)
            await dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on(
            "console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None
        )

    def expect_refusals(self) -> None:
        """Forget the errors the browser logs for pages refused on purpose (401, 403)."""
        assert all("401" in error or "403" in error for error in self.errors), self.errors
        self.errors.clear()


async def open_page(
    browser: Any, server: ConsoleServer, watch: PageWatch, *, signed_in: bool = True
) -> Any:
    """A fresh browser context and page; signed in through the printed URL unless told not."""
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    watch.attach(page)
    if signed_in:
        response = await page.goto(server.sign_in_url)
        assert response is not None
        assert response.status == 200
        assert page.url == f"{server.url}/"
    return page
