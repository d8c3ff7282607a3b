"""Fragments of queries.sql: written out at load, checked at load, invisible to the planner.

The claims and outbox_next_claimable_at share their lease and their claimable conditions
as fragments; the planner must see what it saw when each was spelled out by hand, so
their loaded texts are held to those texts' digests, byte for byte. A deliberate change
to one of them changes its digest here too (print ``queries[name]`` and read it first).
"""

from __future__ import annotations

import hashlib

import pytest

from birddog.postgres.sql import parse_queries, queries

# SHA-256 of each statement's loaded text (UTF-8) as it was when spelled out by hand, on
# the commit before the fragments: 4 statements, checked to the byte.
WRITTEN_OUT = {
    "outbox_claim_page": "6aa4ec68a9c8e3e0076ef5aae8774692fc09aa0757f253197938a9f95371ca37",
    "outbox_claim_due": "873a15700619fc8e8ae368f5ed2a7124cd17ca2dc3cab864ddab687b22a578e9",
    "outbox_claim_heads": "9ee11c050697b82eb4573e0e4d4b01d86687c014a6ae81f73cda57f2f57e9c8d",
    "outbox_next_claimable_at": "7f0657c90e299540c2d73be79003ce955222c8e2a4336442ff86e44baebc73e3",
}


FRAGMENT = (
    "-- fragment: free\n-- Not leased at $1.\n-- params: $1 now timestamptz\n"
    "AND (lease IS NULL\n    OR lease <= $1::timestamptz)\n"
)


@pytest.mark.parametrize("name", sorted(WRITTEN_OUT))
def test_statements_with_fragments_are_the_texts_written_out(name: str) -> None:
    """Each statement that names fragments loads as exactly the text it had spelled out."""
    sql = queries[name]
    assert hashlib.sha256(sql.encode()).hexdigest() == WRITTEN_OUT[name], sql


def test_no_loaded_statement_keeps_a_fragment_use() -> None:
    """Every fragment a statement names is written out when the file is loaded."""
    assert not [name for name, sql in queries.items() if "{{" in sql or "}}" in sql]


def test_a_fragment_takes_the_parameters_and_indentation_of_its_use() -> None:
    """A fragment's $1 becomes the $n its use gives, its lines indented like the use."""
    parsed = parse_queries(
        FRAGMENT + "-- name: a\n-- Does a.\n-- params: $1 key text, $2 now timestamptz\n"
        "SELECT 1\nWHERE key = $1\n  {{free($2)}};\n"
    )
    assert parsed["a"].sql == (
        "SELECT 1\nWHERE key = $1\n  AND (lease IS NULL\n      OR lease <= $2::timestamptz);"
    )
    assert "free" not in parsed


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            FRAGMENT + "-- name: a\n-- A.\n-- params: none\nSELECT {{gone}};",
            "unknown fragment 'gone'",
        ),
        (FRAGMENT + "-- name: a\n-- A.\n-- params: none\nSELECT 1;", "no statement uses fragment"),
        (
            FRAGMENT + "-- name: a\n-- A.\n-- params: $1 a, $2 b\nSELECT {{free($1, $2)}};",
            "gives fragment 'free'",
        ),
        (
            FRAGMENT + "-- name: a\n-- A.\n-- params: none\nSELECT {{free(now())}};",
            "gives fragment",
        ),
        (FRAGMENT + "-- name: a\n-- A.\n-- params: $1 a\nSELECT {{free}};", "gives fragment"),
        (
            "-- fragment: f\n-- F.\n-- params: $1 x int\n$2\n"
            "-- name: a\n-- A.\n-- params: $1 x int\nSELECT {{f($1)}};",
            r"uses \$2",
        ),
        (
            FRAGMENT + "-- fragment: g\n-- G.\n-- params: $1 x\n{{free($1)}}\n"
            "-- name: a\n-- A.\n-- params: $1 x\nSELECT {{g($1)}};",
            "do not nest",
        ),
        (FRAGMENT + "-- name: a\n-- A.\n-- params: $1 a\nSELECT {{free($1)};", "malformed"),
        (FRAGMENT + "-- name: free\n-- A.\n-- params: none\nSELECT 1;", "twice"),
    ],
)
def test_fragment_uses_are_checked_at_load(text: str, problem: str) -> None:
    """Unknown, unused, nested or wrongly called fragments are refused when the file is read."""
    with pytest.raises(ValueError, match=problem):
        parse_queries(text)
