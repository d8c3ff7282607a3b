"""Leave room in outbox pages so lease and outcome updates stay on the page (HOT updates).

Every claim rewrites its rows (claim token, lease) and every outcome rewrites them again;
with free space on the page PostgreSQL updates in place without new index entries, which
keeps the daemon's claim flat under a large backlog (bench/results/experiment/schema_ddl).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE birddog.outbox SET (fillfactor = 80)")


def downgrade() -> None:
    op.execute("ALTER TABLE birddog.outbox RESET (fillfactor)")
