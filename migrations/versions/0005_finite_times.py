"""Every time BirdDog stores is finite: no ``infinity`` or ``-infinity`` timestamps.

PostgreSQL accepts ``'infinity'`` for a ``timestamptz``; Python has no such datetime, and
the driver hands it over as a naive ``datetime.max`` (or ``min``) that no arithmetic of
the daemon, the worker or the command line can use. A row written that way by hand (or by
another program on a shared bus) is refused by these checks instead. Rows that already
hold one get ``now()`` in its place first: the time becomes "now" (a row due now, a lease
or a hold that ends now), which the daemon and the worker then handle as usual.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"

TIMES: dict[str, tuple[str, ...]] = {
    "outbox": ("created_at", "updated_at", "due_at", "dead_at", "lease_expires_at"),
    "receipts": ("delivered_at",),
    "wake": ("wake_at",),
    "routes": ("created_at", "updated_at", "held_at", "previous_secret_until"),
    "jobs": (
        "created_at",
        "updated_at",
        "started_at",
        "lease_expires_at",
        "cancel_requested_at",
        "settled_at",
    ),
    "mailbox": ("delivered_at", "read_at"),
    "daemons": ("started_at", "seen_at"),
}
"""Every timestamp column of every table, by table."""


def finite_check(columns: Sequence[str]) -> str:
    """The check for one table: NULL passes, as in any CHECK; an infinity does not."""
    return " AND ".join(f"isfinite({column})" for column in columns)


def upgrade() -> None:
    for table, columns in TIMES.items():
        fixes = ", ".join(
            f"{column} = CASE WHEN isfinite({column}) IS FALSE THEN now() ELSE {column} END"
            for column in columns
        )
        found = " OR ".join(f"isfinite({column}) IS FALSE" for column in columns)
        # Names from the constant above only: no outside text reaches this statement.
        op.execute(f"UPDATE {SCHEMA}.{table} SET {fixes} WHERE {found}")  # noqa: S608
        op.create_check_constraint(
            f"{table}_times_finite_check", table, finite_check(columns), schema=SCHEMA
        )


def downgrade() -> None:
    for table in TIMES:
        op.drop_constraint(f"{table}_times_finite_check", table, schema=SCHEMA, type_="check")
