"""A (recipient, due time) index of pending rows: the daemon's claim reads each recipient's head.

When some recipients are left out of a claim (they hold all they may: hanging, or at
their cap), the claim reads each other recipient's earliest due rows through this index
instead of reading the due-time index past every left-out row (``bench/hanging.py``: four
of every five due rows were theirs). Partial, so dead rows cost it nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"


def upgrade() -> None:
    op.create_index(
        "outbox_pending_recipient_due_at_idx",
        "outbox",
        ["recipient_agent_id", "due_at"],
        schema=SCHEMA,
        # 'pending' said otherwise (the state is pending or dead): the claim names this
        # predicate, which the due-time index's does not imply, so the planner takes
        # this index there (queries.sql, outbox_claim_heads).
        postgresql_where=sa.text("state <> 'dead'"),
    )


def downgrade() -> None:
    op.drop_index("outbox_pending_recipient_due_at_idx", table_name="outbox", schema=SCHEMA)
