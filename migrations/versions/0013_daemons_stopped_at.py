"""A daemon or worker that stops cleanly says so: ``daemons.stopped_at``.

Until now a clean stop deleted the process's row, so ``birddog check`` could not tell a
daemon that stopped (someone ran ``systemctl stop``) from one that vanished (killed, or
its host gone), and said "last daemon beat never" either way. The row now stays, marked
with the time it stopped; a stopped row never counts as running.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"
CHECK = "daemons_times_finite_check"


def upgrade() -> None:
    op.add_column(
        "daemons", sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True), schema=SCHEMA
    )
    # Every stored time is finite (revision 0005): the new one too.
    op.drop_constraint(CHECK, "daemons", schema=SCHEMA, type_="check")
    op.create_check_constraint(
        CHECK,
        "daemons",
        "isfinite(started_at) AND isfinite(seen_at) AND isfinite(stopped_at)",
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_constraint(CHECK, "daemons", schema=SCHEMA, type_="check")
    # What stopped is gone again, as a clean stop used to leave it.
    op.execute(f"DELETE FROM {SCHEMA}.daemons WHERE stopped_at IS NOT NULL")  # noqa: S608
    op.drop_column("daemons", "stopped_at", schema=SCHEMA)
    op.create_check_constraint(
        CHECK, "daemons", "isfinite(started_at) AND isfinite(seen_at)", schema=SCHEMA
    )
