"""Where a job's turn runs: host, boot and the supervisor's pid and start time.

A worker that starts a process for a job records its supervisor on the job
(``jobs_record_turn``), so that a worker starting on that host can end a turn whose
worker was killed before the job runs again. All four columns are NULL until a turn is
recorded; a later claim's record replaces them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"
COLUMNS = (
    ("turn_host", sa.Text),
    ("turn_boot_id", sa.Text),
    ("turn_pid", sa.Integer),
    ("turn_start_ticks", sa.BigInteger),
)


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("jobs", sa.Column(name, kind, nullable=True), schema=SCHEMA)


def downgrade() -> None:
    for name, _ in reversed(COLUMNS):
        op.drop_column("jobs", name, schema=SCHEMA)
