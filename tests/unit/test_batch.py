"""The batch rules: ids, bodies, and what an answer means for each reply of a batch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from birddog.core.batch import (
    NOT_IN_BATCH_ACK,
    batch_body,
    batch_id,
    batch_results,
    spread,
)
from birddog.core.delivery import Accepted, DeadReason, Deferred, Failed, Rejected
from birddog.http.answers import classify_batch

KEYS = ["outbox:a:reply:0", "outbox:b:reply:0", "outbox:c:reply:1"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_batch_id_names_the_set_of_keys_whatever_their_order() -> None:
    """The same keys in any order give one id; another set gives another."""
    assert batch_id(KEYS) == batch_id(list(reversed(KEYS)))
    assert batch_id(KEYS) != batch_id(KEYS[:2])
    assert batch_id(KEYS).startswith("batch:")
    assert len(batch_id(KEYS)) == len("batch:") + 64


def test_a_batch_body_wraps_each_reply_as_it_is() -> None:
    """The body is {"replies": [...]} around the replies' own JSON bytes."""
    bodies = [b'{"key": "outbox:a:reply:0"}', b'{"key":"outbox:b:reply:0","x":[1]}']
    assert json.loads(batch_body(bodies)) == {
        "replies": [{"key": "outbox:a:reply:0"}, {"key": "outbox:b:reply:0", "x": [1]}]
    }


def test_true_accepts_every_reply() -> None:
    """``"accepted": true`` acknowledges the whole batch."""
    assert batch_results(KEYS, True, status=200, head="HTTP 200 OK") == [Accepted(200)] * 3


def test_a_list_accepts_the_keys_it_names_and_fails_the_rest() -> None:
    """Listed keys are accepted; a key not listed fails alone; unknown keys are ignored."""
    results = batch_results(KEYS, [KEYS[2], "outbox:z:reply:0"], status=200, head="HTTP 200 OK")
    missing = Failed(NOT_IN_BATCH_ACK, 200)
    assert results == [missing, missing, Accepted(200)]


@pytest.mark.parametrize("accepted", [None, False, "yes", 1, [1, 2], {"a": True}])
def test_anything_else_accepts_nothing(accepted: object) -> None:
    """Any other ``accepted`` value fails every reply, saying what was expected."""
    results = batch_results(KEYS, accepted, status=200, head="HTTP 200 OK")
    assert all(isinstance(result, Failed) for result in results)
    assert all(isinstance(r, Failed) and "a list of the keys taken" in r.reason for r in results)


def test_an_answer_that_is_no_acceptance_applies_to_every_reply() -> None:
    """A failure, a deferral or a rejection is spread over the batch."""
    until = NOW + timedelta(seconds=30)
    assert spread(Deferred(until=until), 2) == [Deferred(until=until)] * 2


def test_classify_batch_reads_a_partial_acknowledgement() -> None:
    """A 200 listing some keys accepts those, fails the others."""
    body = json.dumps({"accepted": [KEYS[0]]}).encode()
    results = classify_batch(200, {}, body, KEYS, now=NOW, max_deferral_s=3600)
    assert results[0] == Accepted(200)
    assert results[1:] == [Failed(NOT_IN_BATCH_ACK, 200)] * 2


def test_classify_batch_defers_the_whole_batch_on_retry_after() -> None:
    """429 with Retry-After defers every reply to the same time, without a strike."""
    results = classify_batch(429, {"Retry-After": "60"}, b"", KEYS, now=NOW, max_deferral_s=3600)
    assert [type(result) for result in results] == [Deferred] * 3
    assert {result.until for result in results if isinstance(result, Deferred)} == {
        NOW + timedelta(seconds=60)
    }


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, b"", Failed),
        (200, b"not json", Failed),
        (200, b'{"accepted": true, "error": "db down"}', Failed),
        (500, b"oops", Failed),
        (410, b"", Rejected),
    ],
)
def test_classify_batch_spreads_everything_else(status: int, body: bytes, kind: type) -> None:
    """Empty, non-JSON, error-shaped, 5xx and 410 answers mean the same for every reply."""
    results = classify_batch(status, {}, body, KEYS, now=NOW, max_deferral_s=3600)
    assert [type(result) for result in results] == [kind] * 3
    if kind is Rejected:
        assert all(isinstance(r, Rejected) and r.dead_reason is DeadReason.GONE for r in results)
