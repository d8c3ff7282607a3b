"""The console's gatekeeping as pure functions: tokens, sessions, CSRF, origins, redirects."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from importlib import resources

import pytest
from markupsafe import Markup

from birddog.console.app import make_templates
from birddog.console.auth import (
    MAX_SESSIONS,
    Sessions,
    host_is_loopback,
    safe_next,
    same_origin,
)
from birddog.console.chart import PLOT_BOTTOM, PLOT_TOP, activity_chart

HOST = "127.0.0.1:9465"


def test_only_the_start_up_token_opens_a_session() -> None:
    """A wrong, empty or missing token opens nothing; the right one opens a fresh session."""
    sessions = Sessions(token="right")
    assert sessions.sign_in("wrong") is None
    assert sessions.sign_in("") is None
    assert sessions.sign_in(None) is None
    first, second = sessions.sign_in("right"), sessions.sign_in("right")
    assert first
    assert second
    assert first != second
    assert sessions.is_live(first)
    assert not sessions.is_live("made-up")
    assert "right" not in repr(sessions)


def test_csrf_tokens_belong_to_one_live_session() -> None:
    """A session's CSRF token passes for it alone, never for another or a dead session."""
    sessions = Sessions(token="t")
    one, two = sessions.sign_in("t"), sessions.sign_in("t")
    assert one
    assert two
    assert sessions.csrf_ok(one, sessions.csrf(one))
    assert not sessions.csrf_ok(two, sessions.csrf(one))
    assert not sessions.csrf_ok(one, None)
    assert not sessions.csrf_ok("not-a-session", sessions.csrf("not-a-session"))
    assert sessions.csrf(one) != Sessions(token="t").csrf(one)  # keys differ per process


def test_the_oldest_sessions_are_forgotten_beyond_the_limit() -> None:
    """Signing in more than MAX_SESSIONS times forgets the oldest sessions first."""
    sessions = Sessions(token="t")
    opened = [sessions.sign_in("t") for _ in range(MAX_SESSIONS + 2)]
    assert not sessions.is_live(opened[0])
    assert not sessions.is_live(opened[1])
    assert sessions.is_live(opened[-1])


def test_flash_messages_show_once() -> None:
    """What an action did is shown on the next page only."""
    sessions = Sessions(token="t")
    session = sessions.sign_in("t")
    assert session
    sessions.flash(session, "replayed 1")
    assert sessions.take_flash(session) == "replayed 1"
    assert sessions.take_flash(session) is None


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:9465", True),
        ("localhost:9465", True),
        ("LOCALHOST", True),
        ("[::1]:9465", True),
        ("evil.example:9465", False),
        ("127.0.0.1.evil.example", False),
        ("", False),
        (None, False),
    ],
)
def test_only_loopback_host_names_are_served(host: str | None, ok: bool) -> None:
    """Requests naming another host (DNS rebinding) are told apart from loopback ones."""
    assert host_is_loopback(host) is ok


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ({"Origin": "http://127.0.0.1:9465"}, True),
        ({"Origin": "http://127.0.0.1:9466"}, False),
        ({"Origin": "http://evil.example"}, False),
        ({"Origin": "https://127.0.0.1:9465"}, False),
        ({"Origin": "null", "Sec-Fetch-Site": "same-origin"}, True),
        ({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, False),
        ({"Origin": "null"}, False),
        ({"Sec-Fetch-Site": "same-site"}, False),
        ({}, True),
    ],
)
def test_actions_must_come_from_the_console_itself(headers: dict[str, str], ok: bool) -> None:
    """Origin, or Sec-Fetch-Site under no-referrer, must name the console's own origin."""
    assert same_origin(headers, HOST) is ok


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/pending?status=held", "/pending?status=held"),
        ("//evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("pending", "/"),
        ("/a\r\nSet-Cookie: x", "/"),
        (None, "/"),
    ],
)
def test_redirects_stay_on_the_console(path: str | None, expected: str) -> None:
    """After an action or a sign-in the browser goes to a local path, never elsewhere."""
    assert safe_next(path) == expected


def test_templates_escape_and_neutralise_every_value() -> None:
    """Any {{ value }} is HTML-escaped and its control and bidi characters shown as escapes."""
    template = make_templates().from_string("<p title='{{ v }}'>{{ v }}</p>{{ m }}{{ n }}")
    out = template.render(v="<b>'\"&\x1b\u202e", m=Markup("<i>ours</i>"), n=None)
    assert out == (
        "<p title='&lt;b&gt;&#39;&#34;&amp;\\x1b\\u202e'>&lt;b&gt;&#39;&#34;&amp;\\x1b\\u202e</p>"
        "<i>ours</i>-"
    )


def test_the_chart_scales_bars_to_the_busiest_minute() -> None:
    """Each minute gets a delivered and a dead bar; the busiest reaches the top of the plot."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    chart = activity_chart([(start, 4, 0), (start + timedelta(minutes=1), 2, 1)])
    assert (chart.peak, chart.delivered, chart.dead) == (4, 6, 1)
    assert [bar.kind for bar in chart.bars] == ["delivered", "dead", "delivered", "dead"]
    tallest = chart.bars[0]
    assert (tallest.y, tallest.y + tallest.height) == (PLOT_TOP, PLOT_BOTTOM)
    assert chart.bars[1].height == 0
    assert chart.bars[2].height == pytest.approx((PLOT_BOTTOM - PLOT_TOP) / 2)
    assert chart.bars[3].label == "00:01: 1 dead"
    assert activity_chart([]).bars == []


def test_every_template_compiles_and_its_static_files_ship_in_the_package() -> None:
    """Each page template parses, and every /static/ file a template names is package data."""
    env = make_templates()
    names = env.list_templates()
    assert {"overview.html", "pending.html", "dead.html", "routes.html", "jobs.html"} <= set(names)
    assert {"story.html", "login.html", "error.html"} <= set(names)
    static = resources.files("birddog.console") / "static"
    for name in names:
        env.get_template(name)
        source = (resources.files("birddog.console") / "templates" / name).read_text()
        for asset in re.findall(r'"/static/([^"]+)"', source):
            assert (static / asset).is_file(), (name, asset)
