"""The console in a real browser: every page, the buttons, the refusals, hostile text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from birddog.postgres.pool import Pool
from tests.support import job_row
from tests.support.browser import PageWatch, open_page
from tests.support.console import (
    HISTORY,
    HOSTILE_AGENT,
    HOSTILE_ERROR,
    HOSTILE_JOB,
    ConsoleServer,
    Seeded,
)

PAGES = [
    ("/", "Overview", "overview"),
    ("/pending", "Pending", "pending"),
    ("/dead", "Dead letters", "dead"),
    ("/routes", "Routes", "routes"),
    ("/jobs", "Jobs", "jobs"),
    ("/story?key=outbox:mail-job-1:reply:0", "Story", "story"),
]


async def row_state(pool: Pool, key: str) -> str | None:
    """The outbox state of a reply (None once it is a receipt or gone)."""
    state: str | None = await pool.fetchval("SELECT state FROM birddog.outbox WHERE key = $1", key)
    return state


async def test_every_page_loads_and_is_saved_as_a_screenshot(
    browser: Any, console: ConsoleServer, watch: PageWatch, screenshots: Path
) -> None:
    """Each page renders its heading with the stylesheet applied, no error, no script."""
    page = await open_page(browser, console, watch)
    for path, heading, name in PAGES:
        response = await page.goto(console.url + path)
        assert response is not None
        assert response.status == 200, path
        assert await page.locator("h1").inner_text() == heading
        assert await page.locator("script").count() == 0
        # The stylesheet loaded (no CSP refusal): the header is dark, not the default white.
        color = await page.locator("header.top").evaluate(
            "e => getComputedStyle(e).backgroundColor"
        )
        assert color == "rgb(23, 32, 44)", path
        await page.screenshot(path=screenshots / f"{name}.png", full_page=True)
    overview = await page.goto(console.url + "/")
    assert overview is not None
    assert await page.locator("svg rect.bar.delivered").count() > 10
    assert f"{HISTORY + 1} deliveries and 1 dead letters" in (
        await page.locator("svg title").first.text_content() or ""
    )
    await page.context.close()


async def test_replaying_a_dead_letter_makes_it_pending(
    browser: Any, console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """The Replay button puts the dead letter back to pending, and the pending page shows it."""
    page = await open_page(browser, console, watch)
    await page.goto(console.url + "/dead")
    row = page.locator("tbody tr", has_text="unknown_recipient")
    await row.get_by_role("button", name="Replay").click()
    await page.wait_for_url(console.url + "/dead")
    assert await page.locator(".flash").inner_text() == f"replayed 1 ({seeded.dead_key})"
    assert await page.locator("tbody tr").count() == 0
    assert await row_state(pg_pool, seeded.dead_key) == "pending"

    await page.goto(console.url + "/pending")
    replayed = page.locator("tbody tr", has_text=HOSTILE_AGENT)
    assert await replayed.locator(".badge").inner_text() in {"due", "in_flight", "waiting"}
    await page.context.close()


async def test_replaying_all_dead_letters_of_an_agent(
    browser: Any, console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """Filtered to one recipient, one button replays every dead letter of that recipient."""
    page = await open_page(browser, console, watch)
    await page.goto(console.url + "/dead")
    await page.get_by_role("link", name=HOSTILE_AGENT).click()
    await page.get_by_role("button", name=f"Replay all dead letters of {HOSTILE_AGENT}").click()
    assert "replayed 1 (all dead letters of" in await page.locator(".flash").inner_text()
    assert await row_state(pg_pool, seeded.dead_key) == "pending"
    await page.context.close()


async def test_holding_and_releasing_a_route(
    browser: Any, console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """Release turns carol's held reply due; Hold holds alice; the secret never shows."""
    page = await open_page(browser, console, watch)
    await page.goto(console.url + "/routes")
    assert "whsec_" not in await page.content()
    assert "hunter2" not in await page.content()
    carol = page.locator("tbody tr", has_text="carol")
    assert await carol.locator(".badge").inner_text() == "held"
    await carol.get_by_role("button", name="Release").click()
    assert await page.locator(".flash").inner_text() == "released carol"
    assert (
        await page.locator("tbody tr", has_text="carol").locator(".badge").inner_text() == "enabled"
    )
    await page.goto(console.url + "/pending?recipient=carol")
    assert await page.locator(f"tbody tr >> text={seeded.held_key}").count() == 1
    assert await page.locator("tbody .badge.held").count() == 0

    await page.goto(console.url + "/routes")
    await page.locator("tbody tr", has_text="alice").get_by_role("button", name="Hold").click()
    assert await page.locator(".flash").inner_text() == "held alice"
    alice = page.locator("tbody tr", has_text="alice")
    assert await alice.locator(".badge").inner_text() == "held"
    assert await alice.get_by_role("button", name="Release").count() == 1
    enabled = await pg_pool.fetchval("SELECT enabled FROM birddog.routes WHERE agent_id = 'alice'")
    assert enabled is False
    await page.context.close()


async def test_cancelling_a_queued_job(
    browser: Any, console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """Cancel with a reason settles the queued job cancelled; its replies carry the reason."""
    page = await open_page(browser, console, watch)
    await page.goto(console.url + "/jobs?state=queued")
    row = page.locator("tbody tr", has_text=seeded.queued_job)
    await row.get_by_label("reason").fill("no longer needed")
    await row.get_by_role("button", name="Cancel").click()
    assert await page.locator(".flash").inner_text() == f"{seeded.queued_job} settled cancelled"
    assert await page.locator("tbody tr").count() == 0
    stored = await job_row(pg_pool, seeded.queued_job)
    assert (stored["state"], stored["outcome"], stored["cancel_content"]) == (
        "settled",
        "cancelled",
        "no longer needed",
    )
    await page.goto(console.url + "/jobs?state=running")
    await (
        page.locator("tbody tr", has_text=seeded.running_job)
        .get_by_role("button", name="Cancel")
        .click()
    )
    assert "cancellation of job-running recorded" in await page.locator(".flash").inner_text()
    assert await page.locator("tbody .badge.warn", has_text="cancel asked").count() == 1
    await page.context.close()


async def test_actions_are_refused_without_the_token_or_the_csrf_token(
    browser: Any, console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """No session, a wrong token, no CSRF token or a foreign Origin: 401/403, nothing changes."""
    stranger = await open_page(browser, console, watch, signed_in=False)
    response = await stranger.goto(console.url + "/dead")
    assert response is not None
    assert response.status == 401
    assert await stranger.locator("h1").inner_text() == "Sign in"
    assert await stranger.locator("tbody tr").count() == 0
    refused = await stranger.context.request.post(
        console.url + "/dead/replay",
        form={"key": seeded.dead_key, "csrf": "guess"},
        max_redirects=0,
    )
    assert refused.status == 403
    wrong = await stranger.goto(console.url + "/?token=not-the-token")
    assert wrong is not None
    assert wrong.status == 403
    await stranger.context.close()
    watch.expect_refusals()

    page = await open_page(browser, console, watch)
    await page.goto(console.url + "/dead")
    csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
    assert csrf
    api = page.context.request
    no_csrf = await api.post(
        console.url + "/dead/replay", form={"key": seeded.dead_key}, max_redirects=0
    )
    assert no_csrf.status == 403
    wrong_csrf = csrf[:-1] + ("1" if csrf.endswith("0") else "0")  # never the token itself
    bad_csrf = await api.post(
        console.url + "/dead/replay",
        form={"key": seeded.dead_key, "csrf": wrong_csrf},
        max_redirects=0,
    )
    assert bad_csrf.status == 403
    cross_site = await api.post(
        console.url + "/dead/replay",
        form={"key": seeded.dead_key, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
        max_redirects=0,
    )
    assert cross_site.status == 403
    assert await row_state(pg_pool, seeded.dead_key) == "dead"

    # The same request from the console's own origin goes through: the refusals above are
    # the checks, not a broken form.
    own = await api.post(
        console.url + "/dead/replay",
        form={"key": seeded.dead_key, "csrf": csrf},
        headers={"Origin": console.url},
        max_redirects=0,
    )
    assert own.status == 303
    assert await row_state(pg_pool, seeded.dead_key) == "pending"
    await page.context.close()


async def test_signing_in_with_the_form_returns_to_the_page_asked_for(
    browser: Any, console: ConsoleServer, watch: PageWatch
) -> None:
    """A browser opened without the token signs in by pasting it and lands where it was going."""
    page = await open_page(browser, console, watch, signed_in=False)
    await page.goto(console.url + "/jobs?state=settled")
    await page.get_by_label("token").fill(console.sessions.token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(console.url + "/jobs?state=settled")
    assert await page.locator("h1").inner_text() == "Jobs"
    watch.expect_refusals()
    await page.context.close()


@pytest.mark.parametrize("path", ["/dead", f"/story?key={HOSTILE_JOB}", "/jobs", "/pending"])
async def test_hostile_values_are_shown_not_run(
    page: Any, console: ConsoleServer, seeded: Seeded, pg_pool: Pool, path: str
) -> None:
    """Markup, quotes, escape sequences and bidi overrides from outside show as text."""
    if path == "/pending":
        await pg_pool.execute(
            "UPDATE birddog.outbox SET state = 'pending', last_error = $2 WHERE key = $1",
            seeded.dead_key,
            HOSTILE_ERROR,
        )
    await page.goto(console.url + path.replace("<", "%3C").replace(">", "%3E").replace('"', "%22"))
    main = page.locator("main")
    assert await main.locator("script, img, iframe, object, embed").count() == 0
    text = await main.inner_text()
    assert "\u202e" not in text
    assert "\x1b" not in text
    if path != "/jobs":
        assert "\\x1b[2J\\u202eevil <script>alert('err')</script> & \"quoted\"" in text
        assert HOSTILE_AGENT in text
    assert HOSTILE_JOB in text or path == "/pending"


async def test_a_read_only_console_offers_and_accepts_no_action(
    browser: Any, read_only_console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """Read-only pages carry no action form, and a posted action is not served."""
    page = await open_page(browser, read_only_console, watch)
    for path, _, _ in PAGES:
        await page.goto(read_only_console.url + path)
        assert await page.locator("main form[method=post]").count() == 0, path
    assert await page.locator(".badge.ro").inner_text() == "read-only"
    refused = await page.context.request.post(
        read_only_console.url + "/dead/replay",
        form={"key": seeded.dead_key, "csrf": read_only_console.sessions.csrf("x")},
        max_redirects=0,
    )
    assert refused.status in {403, 404}
    assert await row_state(pg_pool, seeded.dead_key) == "dead"
    await page.context.close()


async def test_a_route_added_from_the_console_shows_its_secret_once_then_lists(
    browser: Any, console: ConsoleServer, watch: PageWatch, seeded: Seeded, pg_pool: Pool
) -> None:
    """The routes form adds erin's inbox (its secret on that page only), then changes her batch."""
    page = await open_page(browser, console, watch)
    await page.goto(console.url + "/routes")
    form = page.locator("form.route-edit")
    await form.locator("input[name=agent]").fill("erin")
    await form.locator("input[name=url]").fill("http://127.0.0.1:9/erin")
    await form.get_by_role("button", name="Save route").click()
    assert await page.locator("h1").inner_text() == "Route added"
    shown = await page.locator("code.secret").inner_text()
    stored = await pg_pool.fetchval("SELECT secret FROM birddog.routes WHERE agent_id = 'erin'")
    assert shown == stored
    assert shown.startswith("whsec_")

    await page.get_by_role("link", name="Back to the routes").click()
    erin = page.locator("tbody tr", has_text="erin")
    assert "http://127.0.0.1:9/erin" in await erin.inner_text()
    assert shown not in await page.content()
    await form.locator("input[name=agent]").fill("erin")
    await form.locator("input[name=batch]").fill("10")
    await form.get_by_role("button", name="Save route").click()
    await page.wait_for_url(console.url + "/routes")
    assert await page.locator(".flash").inner_text() == "updated erin"
    assert (
        await pg_pool.fetchval("SELECT batch_size FROM birddog.routes WHERE agent_id = 'erin'")
        == 10
    )

    await form.locator("input[name=agent]").fill("frank")
    await form.get_by_label("mailbox").check()
    await form.get_by_role("button", name="Save route").click()
    await page.wait_for_url(console.url + "/routes")
    assert await page.locator(".flash").inner_text() == "added frank: its replies go to its mailbox"
    assert (
        await pg_pool.fetchval("SELECT kind FROM birddog.routes WHERE agent_id = 'frank'")
        == "mailbox"
    )
    await page.context.close()
