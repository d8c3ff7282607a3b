"""A2A push configs are routes of their own kind: ``a2a`` (posted as A2A StreamResponses).

A push notification config (``birddog a2a``) is a reply address: the agent id
``a2a-push:<digest>``, whose route holds the config's URL (checked against the egress
policy when it is set) and, sealed as a route secret is, its ``Authorization`` and token.
Its replies are written by the settling transaction like any other, and delivered with
the same retries, deferrals, dead letters and receipts; only the body (a StreamResponse)
and what counts as accepted (any 2xx) differ. This revision only lets the kind exist.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"


def upgrade() -> None:
    """Allow the ``a2a`` kind; like ``http``, it needs a URL and a (sealed) secret."""
    op.drop_constraint("routes_kind_check", "routes", schema=SCHEMA)
    op.drop_constraint("routes_http_check", "routes", schema=SCHEMA)
    op.create_check_constraint(
        "routes_kind_check", "routes", "kind IN ('http', 'mailbox', 'a2a')", schema=SCHEMA
    )
    op.create_check_constraint(
        "routes_http_check",
        "routes",
        "kind = 'mailbox' OR (url IS NOT NULL AND secret IS NOT NULL)",
        schema=SCHEMA,
    )


def downgrade() -> None:
    """Remove the push routes (their replies die as unknown recipients), then the kind."""
    op.execute("DELETE FROM birddog.routes WHERE kind = 'a2a'")
    op.drop_constraint("routes_kind_check", "routes", schema=SCHEMA)
    op.drop_constraint("routes_http_check", "routes", schema=SCHEMA)
    op.create_check_constraint(
        "routes_kind_check", "routes", "kind IN ('http', 'mailbox')", schema=SCHEMA
    )
    op.create_check_constraint(
        "routes_http_check",
        "routes",
        "kind <> 'http' OR (url IS NOT NULL AND secret IS NOT NULL)",
        schema=SCHEMA,
    )
