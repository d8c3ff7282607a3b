"""${message}
% if context.get("notes"):

${context.get("notes")}
% endif

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date.date()}
"""

from __future__ import annotations

from collections.abc import Sequence

% if not context.get("frozen"):
import sqlalchemy as sa
% endif
from alembic import op
% if imports:
${imports}
% endif

revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}
% if context.get("frozen"):

${context.get("frozen")}
% endif


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
