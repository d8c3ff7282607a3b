"""What a recipient's HTTP answer means: the pure classification of one response.

Only an explicit acknowledgement is a receipt: a 2xx whose JSON object says
``"accepted": true``. An empty, non-JSON or error-shaped 2xx is a failure, because an
outage message is not an answer. ``429``/``503`` with ``Retry-After`` defer without a
strike, ``410 Gone`` dies at once, and everything else is a failure that costs a strike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from http import HTTPStatus

import orjson

from birddog.core.batch import batch_results, spread
from birddog.core.delivery import (
    Accepted,
    DeadReason,
    Deferred,
    DeliveryResult,
    Failed,
    Rejected,
)
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.egress import redact_url

DEFERRING_STATUSES = frozenset({HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.SERVICE_UNAVAILABLE})
"""Statuses that defer (no strike) when they name a time to come back."""

MIN_DEFERRAL_S = 1.0
"""The shortest deferral: ``Retry-After: 0`` must not turn the drain into a busy loop."""

_SNIPPET_BYTES = 1024
"""Only the head of a body is decoded for a diagnostic; the diagnostic is cut at 200 anyway."""


def classify(
    status: int,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    now: datetime,
    max_deferral_s: float,
    min_deferral_s: float = MIN_DEFERRAL_S,
    acknowledged_by_status: bool = False,
) -> DeliveryResult:
    """Classify one HTTP answer to a posted reply.

    Args:
        status: the response status code.
        headers: the response headers; names are matched case-insensitively.
        body: the response body (already bounded by the caller), or None when there was
            none.
        now: the time the answer came, for ``Retry-After``.
        max_deferral_s: the longest a ``Retry-After`` may defer the reply.
        min_deferral_s: the shortest deferral (a ``Retry-After`` of 0 or in the past).
        acknowledged_by_status: any 2xx accepts, whatever its body (an A2A push receiver
            acknowledges so: the protocol gives its answer no body).

    Returns:
        :class:`Accepted` only for a 2xx JSON object with ``"accepted": true`` and no
        error (any 2xx with ``acknowledged_by_status``); :class:`Deferred` for 429/503
        with a usable ``Retry-After``;
        :class:`Rejected` (``gone``) for 410; otherwise :class:`Failed` with a bounded,
        redacted reason such as ``HTTP 500 Internal Server Error: <body snippet>``.
    """
    head = _status_line(status)
    if 200 <= status < 300:
        return Accepted() if acknowledged_by_status else _acknowledgement(head, body)
    if status == HTTPStatus.GONE:
        return Rejected(_reason(head, body), dead_reason=DeadReason.GONE)
    if status in DEFERRING_STATUSES:
        retry_after = header(headers, "retry-after")
        until = _retry_at(retry_after, now=now) if retry_after is not None else None
        if until is None:
            missing = "without" if retry_after is None else "with an unusable"
            return Failed(_reason(f"{head} {missing} Retry-After", body))
        earliest = now + timedelta(seconds=min_deferral_s)
        latest = now + timedelta(seconds=max_deferral_s)
        until = min(max(until, earliest), latest)
        return Deferred(until=until, reason=_reason(f"{head}, Retry-After {retry_after}", body))
    if 300 <= status < 400:
        location = header(headers, "location") or "(none)"
        return Failed(
            bounded_diagnostic(f"{head}: redirects are not followed (to {redact_url(location)})")
        )
    return Failed(_reason(head, body))


def classify_batch(
    status: int,
    headers: Mapping[str, str],
    body: bytes | None,
    keys: Sequence[str],
    *,
    now: datetime,
    max_deferral_s: float,
    min_deferral_s: float = MIN_DEFERRAL_S,
) -> list[DeliveryResult]:
    """Classify one HTTP answer to a posted batch: one result per reply.

    A 2xx JSON object without an error acknowledges per key
    (:func:`~birddog.core.batch.batch_results`: ``"accepted": true`` takes all, a list
    takes the keys it names, every other reply failed); any other answer means for every
    reply what it means for one (:func:`classify`): a deferral moves the whole batch.

    Args:
        status: the response status code.
        headers: the response headers.
        body: the response body (bounded by the caller), or None.
        keys: the batch's reply keys, in the order posted.
        now: the time the answer came, for ``Retry-After``.
        max_deferral_s: the longest a ``Retry-After`` may defer the batch.
        min_deferral_s: the shortest deferral.

    Returns:
        One result per key, in order.
    """
    if not 200 <= status < 300:
        result = classify(
            status,
            headers,
            body,
            now=now,
            max_deferral_s=max_deferral_s,
            min_deferral_s=min_deferral_s,
        )
        return spread(result, len(keys))
    head = _status_line(status)
    answer = _answer_object(head, body)
    if not isinstance(answer, dict):
        return spread(answer, len(keys))
    return batch_results(keys, answer.get("accepted"), status=status, head=head)


def _acknowledgement(head: str, body: bytes | None) -> DeliveryResult:
    answer = _answer_object(head, body)
    if not isinstance(answer, dict):
        return answer
    if answer.get("accepted") is True:
        return Accepted()
    return Failed(_reason(f'{head} without "accepted": true', body))


def _answer_object(head: str, body: bytes | None) -> dict[str, object] | Failed:
    """A 2xx body as a JSON object without an error, or the failure it is instead."""
    if not body or not body.strip():
        return Failed(f'{head} with an empty body, not {{"accepted": true}}')
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:  # invalid UTF-8 too
        return Failed(_reason(f"{head} with a non-JSON body", body))
    if not isinstance(answer, dict):
        return Failed(_reason(f"{head} with JSON that is not an object", body))
    if _error_shaped(answer):
        return Failed(_reason(f"{head} with an error body", body))
    return answer


def _error_shaped(answer: dict[str, object]) -> bool:
    """An error field with a value wins over any ``accepted``: an outage is not an answer."""
    return any(answer.get(name) not in (None, False, "", [], {}) for name in ("error", "errors"))


def _retry_at(value: str, *, now: datetime) -> datetime | None:
    """Read ``Retry-After``: delay seconds or an HTTP date; None when it is neither."""
    text = value.strip()
    if text.isascii() and text.isdigit():
        # A huge delay is capped by the caller; clamp first so timedelta cannot overflow.
        return now + timedelta(seconds=min(int(text), 10**9))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" dates come back naive; HTTP dates are always GMT
        when = when.replace(tzinfo=now.tzinfo)
    return when


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value by its lower-case name, from any mapping, whatever its case."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, item in headers.items():
        if key.lower() == name:
            return item
    return None


def _status_line(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _reason(head: str, body: bytes | None) -> str:
    snippet = body[:_SNIPPET_BYTES].decode("utf-8", "replace").strip() if body else ""
    return bounded_diagnostic(f"{head}: {snippet}" if snippet else head)
