"""drop indexes no query uses

Every row change pays for each index on its table: on SQLite a W2 step wrote 20 pages to the
WAL, four of them for these. `subtasks.status` and `subtasks.assigned_worker` are never
searched on; `subtasks.task_id` and `attempts.subtask_id` lead the unique indexes of
(task_id, key) and (subtask_id, fence), which serve those lookups and the cascading deletes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 20:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

DROPPED = (
    ("subtasks", "ix_subtasks_status", "status"),
    ("subtasks", "ix_subtasks_assigned_worker", "assigned_worker"),
    ("subtasks", "ix_subtasks_task_id", "task_id"),
    ("attempts", "ix_attempts_subtask_id", "subtask_id"),
)


def upgrade() -> None:
    for table, name, _column in DROPPED:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for table, name, column in DROPPED:
        op.create_index(name, table, [column], unique=False)
