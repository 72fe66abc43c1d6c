"""task claims

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 05:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import shoal.store.models

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The literal statuses, not shoal.states: a migration must keep meaning what it meant.
UNFINISHED = sa.text("status NOT IN ('budget_exceeded', 'cancelled', 'completed', 'failed')")


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_id", sa.String(length=255), nullable=True))
        batch_op.add_column(
            sa.Column(
                "owner_expires_at", shoal.store.models.UTCDateTime(timezone=True), nullable=True
            )
        )
        batch_op.create_index(
            "ix_tasks_unfinished_owner",
            ["owner_id", "owner_expires_at"],
            unique=False,
            postgresql_where=UNFINISHED,
            sqlite_where=UNFINISHED,
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_unfinished_owner")
        batch_op.drop_column("owner_expires_at")
        batch_op.drop_column("owner_id")
