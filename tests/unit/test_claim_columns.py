"""Every outbox claim returns the same columns: the engine reads one shape of claimed row."""

from __future__ import annotations

import re

from birddog.postgres.sql import queries

CLAIMS = ("outbox_claim_page", "outbox_claim_due", "outbox_claim_heads")


def returning(name: str) -> list[str]:
    """The column names after the last RETURNING of one named statement."""
    tail = queries[name].rsplit("RETURNING", 1)[1]
    return [re.split(r"\s+AS\s+|\.", part.strip())[-1] for part in tail.strip(" ;\n").split(",")]


def test_every_claim_returns_the_route_policy_with_the_row() -> None:
    """The page, due-order and recipient-heads claims return the same columns, policy included."""
    shapes = {name: returning(name) for name in CLAIMS}
    first = shapes[CLAIMS[0]]
    assert {"route_post_timeout_s", "route_max_age_s", "route_max_attempts"} <= set(first)
    for name, shape in shapes.items():
        assert shape == first, name
