"""Find a job by the key of the mail it carries (the story of one mail).

``birddog show KEY`` and the console's story page look a job up by its mail key
(``payload -> mail -> key``); without this index that is a scan of every job ever kept.
Only jobs that carry mail are indexed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"
MAIL_KEY = "(payload #>> '{mail,key}')"


def upgrade() -> None:
    op.create_index(
        "jobs_mail_key_idx",
        "jobs",
        [sa.text(MAIL_KEY)],
        schema=SCHEMA,
        postgresql_where=sa.text(f"{MAIL_KEY} IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("jobs_mail_key_idx", table_name="jobs", schema=SCHEMA)
