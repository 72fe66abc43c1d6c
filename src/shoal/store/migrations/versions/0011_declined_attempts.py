"""declined attempts: a subtask counts the attempts a worker declined for want of room

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 09:00:00.000000

A worker with no free slot (two copies placed on its last one at once) or on its way out
declines an attempt instead of failing it. Such an attempt never ran, so it spends none of the
subtask's tries: `attempts` counts the tries spent, `declines` the declined attempts, and the next
attempt's fence is their sum plus one (fences stay unique per subtask).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subtasks") as batch_op:
        batch_op.add_column(
            sa.Column("declines", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("subtasks") as batch_op:
        batch_op.drop_column("declines")
