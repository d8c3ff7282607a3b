"""The console over plain HTTP on 127.0.0.1: headers, sign-in, refusals, errors, read-only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest

from birddog.console import SECURITY_HEADERS
from birddog.core.digests import digest_time_text
from birddog.postgres.pool import Pool
from tests.support import enqueue, make_job
from tests.support.console import ConsoleServer, Seeded, start_console


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that keeps cookies for 127.0.0.1, as a browser does."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


async def sign_in(http: aiohttp.ClientSession, console: ConsoleServer) -> str:
    """Sign in through the printed URL; the CSRF token of the new session."""
    async with http.get(console.sign_in_url) as response:
        assert response.status == 200
        page = await response.text()
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    if match is None:
        async with http.get(console.url + "/dead") as response:
            match = re.search(r'name="csrf" value="([0-9a-f]+)"', await response.text())
    assert match is not None
    return match.group(1)


async def test_every_answer_carries_the_security_headers(
    console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    """Pages, refusals, the stylesheet and unknown paths all carry CSP, frame and referrer rules."""
    for path in ("/", "/static/console.css", "/nope"):
        async with http.get(console.url + path) as response:
            for name, value in SECURITY_HEADERS.items():
                assert response.headers.get(name) == value, (path, name)
    async with http.post(console.url + "/dead/replay", data={"key": "k"}) as refused:
        assert refused.status == 403
        assert (
            refused.headers["Content-Security-Policy"]
            == SECURITY_HEADERS["Content-Security-Policy"]
        )
    assert "script-src" not in SECURITY_HEADERS["Content-Security-Policy"]  # default-src 'none'
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]


async def test_sign_in_sets_a_strict_http_only_cookie_and_drops_the_token_from_the_url(
    console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    """The printed URL redirects to itself without the token, setting a session cookie."""
    url = f"{console.url}/pending?token={console.sessions.token}&status=held"
    async with http.get(url, allow_redirects=False) as response:
        assert response.status == 303
        assert response.headers["Location"] == "/pending?status=held"
        cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert console.sessions.token not in cookie
    async with http.get(console.url + "/pending?status=held") as page:
        assert page.status == 200
        assert "outbox:mail-job-1:reply:1" in await page.text()


async def test_a_wrong_token_or_no_session_shows_only_the_sign_in_page(
    console: ConsoleServer, http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    """Without a session no page shows data: 401 and the sign-in form; a wrong token is 403."""
    async with http.get(console.url + "/dead") as page:
        assert page.status == 401
        text = await page.text()
    assert "Sign in" in text
    assert "unknown_recipient" not in text
    async with http.get(console.url + "/?token=wrong") as wrong:
        assert wrong.status == 403
    async with http.post(
        console.url + "/login", data={"token": "wrong", "next": "/"}, allow_redirects=False
    ) as refused:
        assert refused.status == 403
    async with http.post(
        console.url + "/login",
        data={"token": console.sessions.token, "next": "//evil.example/"},
        allow_redirects=False,
    ) as signed_in:
        assert signed_in.status == 303
        assert signed_in.headers["Location"] == "/"
    del seeded


async def test_only_loopback_host_names_are_answered(
    console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    """A request naming another host (DNS rebinding) is refused before anything else."""
    async with http.get(console.sign_in_url, headers={"Host": "evil.example"}) as response:
        assert response.status == 421
        assert "Set-Cookie" not in response.headers


async def test_bad_input_and_missing_things_answer_with_a_page_not_a_traceback(
    console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    """A bad cursor or filter is 400, an unknown job 404, each with its message and no traceback."""
    csrf = await sign_in(http, console)
    for path, message in (
        ("/jobs?after=garbage", "not a cursor of this listing"),
        ("/jobs?state=bogus", "state must be one of queued, running, settled"),
        ("/pending?status=lost", "status must be one of held, in_flight, due, waiting"),
    ):
        async with http.get(console.url + path) as response:
            assert response.status == 400, path
            text = await response.text()
            assert message in text
            assert "Traceback" not in text
    async with http.post(
        console.url + "/jobs/cancel",
        data={"job_id": "no-such-job", "csrf": csrf, "back": "/jobs"},
        headers={"Origin": console.url},
    ) as missing:
        assert missing.status == 404
        assert "no job has id" in await missing.text()


async def test_actions_answer_with_a_redirect_and_a_message(
    console: ConsoleServer, http: aiohttp.ClientSession, seeded: Seeded, pg_pool: Pool
) -> None:
    """A replay posted from the page redirects back, and the next page says what was done."""
    csrf = await sign_in(http, console)
    async with http.post(
        console.url + "/dead/replay",
        data={"key": seeded.dead_key, "csrf": csrf, "back": "/dead?recipient=x"},
        headers={"Origin": console.url},
        allow_redirects=False,
    ) as response:
        assert response.status == 303
        assert response.headers["Location"] == "/dead?recipient=x"
    async with http.get(console.url + "/dead") as page:
        assert "replayed 1" in await page.text()
    async with http.get(console.url + "/dead") as again:
        assert "replayed 1" not in await again.text()
    state = await pg_pool.fetchval(
        "SELECT state FROM birddog.outbox WHERE key = $1", seeded.dead_key
    )
    assert state == "pending"


async def test_a_read_only_console_serves_no_action(
    pg_pool: Pool, seeded: Seeded, http: aiohttp.ClientSession
) -> None:
    """With --read-only, even a signed-in post with its CSRF token finds no action to run."""
    server = await start_console(pg_pool, read_only=True)
    try:
        async with http.get(server.sign_in_url) as page:
            text = await page.text()
        assert 'method="post"' not in text.split("<main>", 1)[1]
        session = next(c.value for c in http.cookie_jar if c.key.startswith("birddog_console_"))
        async with http.post(
            server.url + "/dead/replay",
            data={"key": seeded.dead_key, "csrf": server.sessions.csrf(session)},
            headers={"Origin": server.url},
        ) as refused:
            assert refused.status == 404
    finally:
        await server.runner.cleanup()
    state = await pg_pool.fetchval(
        "SELECT state FROM birddog.outbox WHERE key = $1", seeded.dead_key
    )
    assert state == "dead"


async def test_a_huge_value_written_by_sql_is_shown_bounded(
    console: ConsoleServer, http: aiohttp.ClientSession, pg_pool: Pool, seeded: Seeded
) -> None:
    """A last error of a million characters (a hand-written row) shows as its start and size."""
    await pg_pool.execute(
        "UPDATE birddog.outbox SET last_error = repeat('e', 1000000) || '<b>tail</b>' "
        "WHERE key = $1",
        seeded.held_key,
    )
    await sign_in(http, console)
    for path in ("/pending", f"/story?key={seeded.held_key}"):
        async with http.get(console.url + path) as response:
            assert response.status == 200, path
            page = await response.text()
        assert len(page) < 100_000, path
        assert "… (1,000,011 characters)" in page, path
        assert "<b>tail" not in page


async def test_a_route_post_without_its_csrf_token_or_from_elsewhere_is_refused(
    console: ConsoleServer, http: aiohttp.ClientSession, pg_pool: Pool
) -> None:
    """Signed in, a route save without the CSRF token, or from another origin, is 403; no route."""
    csrf = await sign_in(http, console)
    form = {"agent": "erin", "kind": "http", "url": "http://127.0.0.1:9/inbox"}
    async with http.post(
        console.url + "/routes/save", data=form, headers={"Origin": console.url}
    ) as no_token:
        assert no_token.status == 403
    async with http.post(
        console.url + "/routes/save",
        data={**form, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
    ) as elsewhere:
        assert elsewhere.status == 403
    assert (
        await pg_pool.fetchval("SELECT count(*) FROM birddog.routes WHERE agent_id = 'erin'") == 0
    )


async def test_a_route_saved_from_the_console_shows_its_secret_once_and_updates_in_place(
    console: ConsoleServer, http: aiohttp.ClientSession, pg_pool: Pool
) -> None:
    """Added: the secret on that answer only (not cached); saved again: URL and batch change."""
    csrf = await sign_in(http, console)
    headers = {"Origin": console.url}
    form = {"agent": "erin", "kind": "http", "url": "http://127.0.0.1:9/inbox", "csrf": csrf}
    async with http.post(console.url + "/routes/save", data=form, headers=headers) as added:
        assert added.status == 200
        assert added.headers["Cache-Control"] == "no-store"
        page = await added.text()
    stored = await pg_pool.fetchval("SELECT secret FROM birddog.routes WHERE agent_id = 'erin'")
    assert stored.startswith("whsec_")
    assert stored in page
    async with http.get(console.url + "/routes") as listed:
        assert stored not in await listed.text()
    changed = {**form, "url": "http://127.0.0.1:10/inbox", "batch": "25", "back": "/routes"}
    async with http.post(
        console.url + "/routes/save", data=changed, headers=headers, allow_redirects=False
    ) as updated:
        assert updated.status == 303
    row = await pg_pool.fetchrow(
        "SELECT url, batch_size, secret FROM birddog.routes WHERE agent_id = 'erin'"
    )
    assert row is not None
    assert (row["url"], row["batch_size"], row["secret"]) == (
        "http://127.0.0.1:10/inbox",
        25,
        stored,
    )
    mailbox = {"agent": "erin", "kind": "mailbox", "csrf": csrf}
    async with http.post(console.url + "/routes/save", data=mailbox, headers=headers) as kind:
        assert kind.status == 400
        assert "its kind stays" in await kind.text()


async def test_the_console_refuses_a_replay_whose_cause_still_holds(
    console: ConsoleServer, http: aiohttp.ClientSession, seeded: Seeded, pg_pool: Pool
) -> None:
    """With mallory's route removed again: Replay answers 400 saying to add one; the letter stays dead."""
    await pg_pool.execute("DELETE FROM birddog.routes WHERE agent_id LIKE 'mallory%'")
    csrf = await sign_in(http, console)
    async with http.post(
        console.url + "/dead/replay",
        data={"key": seeded.dead_key, "csrf": csrf},
        headers={"Origin": console.url},
    ) as refused:
        assert refused.status == 400
        assert "still has no route: add one first" in await refused.text()
    state = await pg_pool.fetchval(
        "SELECT state FROM birddog.outbox WHERE key = $1", seeded.dead_key
    )
    assert state == "dead"


async def test_a_report_waiting_for_its_digest_says_so_on_the_jobs_page_and_its_story(
    console: ConsoleServer, http: aiohttp.ClientSession, pg_pool: Pool
) -> None:
    """A queued report shows 'waiting for digest (at TIME)' beside its state, never stuck."""
    await enqueue(pg_pool, make_job("report-1", session="s-digest", kind="report"))
    due = await pg_pool.fetchval("SELECT digest_at FROM birddog.jobs WHERE job_id = 'report-1'")
    await sign_in(http, console)
    shown = f"waiting for digest (at {digest_time_text(due)})"
    for path in ("/jobs?queue=s-digest", "/story?key=mail-report-1"):
        async with http.get(console.url + path) as page:
            assert page.status == 200
            assert shown in await page.text(), path
