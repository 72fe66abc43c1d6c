"""checkpoints name their task's user, and are indexed by user, newest first

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 16:15:00.000000

A user's checkpoint list (`GET /api/v1/checkpoints`) found their checkpoints through their
tasks: every task the user ever made, then each one's checkpoints, for a page of 20 (20 to 39
ms at 50,000 tasks on SQLite, by the index the planner took, on the event loop; issue 37,
thirty-fifth round; ADR 0058). A checkpoint now
carries its task's `user_id`, written with it, and `ix_checkpoints_user_id_created_at` holds a
user's checkpoints in the list's order. The rows already there take their task's user.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("checkpoints", sa.Column("user_id", sa.Uuid(), nullable=True))
    op.execute("UPDATE checkpoints SET user_id = "
               "(SELECT tasks.user_id FROM tasks WHERE tasks.id = checkpoints.task_id)")
    op.create_index("ix_checkpoints_user_id_created_at", "checkpoints", ["user_id", "created_at"],
                    unique=False)


def downgrade() -> None:
    op.drop_index("ix_checkpoints_user_id_created_at", table_name="checkpoints")
    with op.batch_alter_table("checkpoints") as batch_op:
        batch_op.drop_column("user_id")
