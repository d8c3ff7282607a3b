"""Delivery policies per route: a recipient's own post timeout, age limit and attempts.

Three nullable columns on ``birddog.routes``; NULL keeps the daemon's default
(``BIRDDOG_POST_TIMEOUT_S``, ``BIRDDOG_MAX_AGE_S``, ``BIRDDOG_MAX_ATTEMPTS``). Existing
routes keep the defaults, so delivery is unchanged until an operator sets one.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"

CHECKS = {
    "routes_post_timeout_check": "post_timeout_s > 0 AND post_timeout_s < 'infinity'",
    "routes_max_age_check": "max_age_s > 0 AND max_age_s < 'infinity'",
    "routes_max_attempts_check": "max_attempts BETWEEN 1 AND 100000",
}


def upgrade() -> None:
    op.add_column("routes", sa.Column("post_timeout_s", sa.Float, nullable=True), schema=SCHEMA)
    op.add_column("routes", sa.Column("max_age_s", sa.Float, nullable=True), schema=SCHEMA)
    op.add_column("routes", sa.Column("max_attempts", sa.Integer, nullable=True), schema=SCHEMA)
    for name, condition in CHECKS.items():
        op.create_check_constraint(name, "routes", condition, schema=SCHEMA)


def downgrade() -> None:
    for name in CHECKS:
        op.drop_constraint(name, "routes", schema=SCHEMA, type_="check")
    for column in ("max_attempts", "max_age_s", "post_timeout_s"):
        op.drop_column("routes", column, schema=SCHEMA)
