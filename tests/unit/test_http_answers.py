"""The pure classification of a recipient's HTTP answer, case by case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from birddog.core.delivery import (
    Accepted,
    DeadReason,
    Deferred,
    DeliveryResult,
    Failed,
    Rejected,
)
from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH
from birddog.http.answers import classify

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
MAX_DEFERRAL_S = 3600.0


def run(status: int, body: bytes | None = b"", **headers: str) -> DeliveryResult:
    return classify(
        status,
        {name.replace("_", "-"): value for name, value in headers.items()},
        body,
        now=NOW,
        max_deferral_s=MAX_DEFERRAL_S,
    )


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(200, b'{"accepted": true}', id="200-accepted"),
        pytest.param(201, b'{"accepted":true,"id":"r-1"}', id="201-accepted-extra-fields"),
        pytest.param(202, b' \n{"accepted": true, "error": null}\n', id="202-null-error"),
    ],
)
def test_explicit_acknowledgement_is_accepted(status: int, body: bytes) -> None:
    """A 2xx whose JSON object says ``"accepted": true`` (and no error) is accepted."""
    assert run(status, body) == Accepted()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(200, b"", "HTTP 200 OK with an empty body", id="empty"),
        pytest.param(200, None, "HTTP 200 OK with an empty body", id="none"),
        pytest.param(204, b"", "HTTP 204 No Content with an empty body", id="204"),
        pytest.param(200, b"  \n", "HTTP 200 OK with an empty body", id="whitespace"),
        pytest.param(200, b"OK", "HTTP 200 OK with a non-JSON body: OK", id="text"),
        pytest.param(200, b"\xff\xfe", "HTTP 200 OK with a non-JSON body", id="binary"),
        pytest.param(200, b"true", "HTTP 200 OK with JSON that is not an object", id="bare-true"),
        pytest.param(200, b"[true]", "HTTP 200 OK with JSON that is not an object", id="list"),
        pytest.param(200, b'{"error": "quota exceeded"}', "error body", id="error-shaped"),
        pytest.param(
            200, b'{"accepted": true, "error": "quota"}', "error body", id="error-beats-accepted"
        ),
        pytest.param(200, b'{"errors": ["x"]}', "error body", id="errors-list"),
        pytest.param(200, b'{"accepted": false}', '"accepted": true', id="accepted-false"),
        pytest.param(200, b'{"accepted": "true"}', '"accepted": true', id="accepted-string"),
        pytest.param(200, b'{"accepted": 1}', '"accepted": true', id="accepted-one"),
        pytest.param(200, b'{"ok": true}', '"accepted": true', id="other-object"),
    ],
)
def test_2xx_without_explicit_acknowledgement_fails(
    status: int, body: bytes | None, expected: str
) -> None:
    """An empty, non-JSON, error-shaped or unaccepting 2xx body is a failure, never a receipt."""
    result = run(status, body)
    assert isinstance(result, Failed)
    assert expected in result.reason


@pytest.mark.parametrize(
    ("status", "retry_after", "wait_s"),
    [
        pytest.param(429, "17", 17, id="429-seconds"),
        pytest.param(503, "120", 120, id="503-seconds"),
        pytest.param(429, "Thu, 01 Jan 2026 12:10:00 GMT", 600, id="429-http-date"),
        pytest.param(503, "Thu, 01 Jan 2026 12:00:30 GMT", 30, id="503-http-date"),
        pytest.param(429, "999999", MAX_DEFERRAL_S, id="capped-seconds"),
        pytest.param(429, "99999999999999999999999", MAX_DEFERRAL_S, id="capped-huge"),
        pytest.param(503, "Fri, 01 Jan 2027 00:00:00 GMT", MAX_DEFERRAL_S, id="capped-date"),
        pytest.param(429, "0", 1, id="zero-floored"),
        pytest.param(429, "Wed, 31 Dec 2025 00:00:00 GMT", 1, id="past-date-floored"),
    ],
)
def test_retry_after_defers_with_caps(status: int, retry_after: str, wait_s: float) -> None:
    """429/503 with Retry-After (seconds or HTTP date) defer to that time, within [1 s, max]."""
    result = run(status, b"slow down", retry_after=retry_after)
    assert isinstance(result, Deferred)
    assert result.until == NOW + timedelta(seconds=wait_s)
    assert result.reason.startswith(f"HTTP {status}")


def test_retry_after_header_name_is_case_insensitive() -> None:
    """``Retry-After`` is found whatever the case of the header name."""
    result = classify(429, {"RETRY-AFTER": "5"}, b"", now=NOW, max_deferral_s=60)
    assert result == Deferred(
        until=NOW + timedelta(seconds=5), reason="HTTP 429 Too Many Requests, Retry-After 5"
    )


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        pytest.param(429, {}, "HTTP 429 Too Many Requests without Retry-After", id="429-none"),
        pytest.param(503, {}, "HTTP 503 Service Unavailable without Retry-After", id="503-none"),
        pytest.param(
            429, {"retry-after": "soon"}, "with an unusable Retry-After", id="429-garbage"
        ),
        pytest.param(503, {"retry-after": "-5"}, "with an unusable Retry-After", id="negative"),
    ],
)
def test_deferring_status_without_usable_retry_after_fails(
    status: int, headers: dict[str, str], expected: str
) -> None:
    """429/503 without a usable Retry-After is an ordinary failure (a strike)."""
    result = classify(status, headers, b"", now=NOW, max_deferral_s=60)
    assert isinstance(result, Failed)
    assert expected in result.reason


def test_410_is_rejected_as_gone() -> None:
    """410 Gone kills the reply at once with the ``gone`` dead reason."""
    result = run(410, b"inbox removed")
    assert result == Rejected("HTTP 410 Gone: inbox removed", dead_reason=DeadReason.GONE)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(400, b"bad signature", "HTTP 400 Bad Request: bad signature", id="400"),
        pytest.param(401, b"", "HTTP 401 Unauthorized", id="401-empty"),
        pytest.param(
            404, b"<h1>Not Found</h1>", "HTTP 404 Not Found: <h1>Not Found</h1>", id="404"
        ),
        pytest.param(500, b"boom", "HTTP 500 Internal Server Error: boom", id="500"),
        pytest.param(502, b"", "HTTP 502 Bad Gateway", id="502"),
        pytest.param(599, b"odd", "HTTP 599: odd", id="unknown-status"),
        pytest.param(101, b"", "HTTP 101 Switching Protocols", id="1xx"),
    ],
)
def test_other_statuses_fail_with_the_status_and_a_snippet(
    status: int, body: bytes, expected: str
) -> None:
    """Other 4xx/5xx answers are failures whose reason is the status and the body's head."""
    assert run(status, body) == Failed(expected)


def test_redirect_is_a_failure_naming_the_target() -> None:
    """A 3xx is not followed: it fails with the Location, so the operator can fix the route."""
    result = run(301, b"", location="https://example.test/new")
    assert result == Failed(
        "HTTP 301 Moved Permanently: redirects are not followed (to https://example.test/new)"
    )


def test_failure_reason_is_one_bounded_redacted_line() -> None:
    """A body snippet in a reason is one line, masked and cut to the diagnostic limit."""
    body = b"Authorization: Bearer abcdefghijklmnop\napi_key=sk-123\n" + b"x " * 500
    result = run(500, body)
    assert isinstance(result, Failed)
    assert "\n" not in result.reason
    assert "abcdefghijklmnop" not in result.reason
    assert "sk-123" not in result.reason
    assert len(result.reason) <= DIAGNOSTIC_MAX_LENGTH
