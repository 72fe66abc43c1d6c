"""tasks by user: newest first, queued, and by when they ended

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 16:05:00.000000

A user's task list (`GET /api/v1/tasks`, the dashboard's first page) is a page of their tasks
newest first. Found through `ix_tasks_user_id`, every task the user ever made was read and
sorted for each page: 16 ms at 50,000 tasks on SQLite, on the event loop (issue 37,
thirty-fifth round; ADR 0058). `ix_tasks_user_id_created_at` holds them in that order, so a
page reads its own rows; it serves every other lookup by user as well, and takes
`ix_tasks_user_id`'s place (a task's `created_at` never changes: no write more a step).

With it there, SQLite would find a user's queue (which each submission reads) by walking all
their tasks oldest first; `ix_tasks_queued` holds the queued tasks alone, by user and age (and
their status, so that the queue's counts read nothing else), and the queries name the status
as the literal it indexes.

`ix_tasks_user_id_completed_at` finds a user's running tasks and those that ended since a
moment, which is what the daily budget's check reads (`completed_at` is set once, when a task
ends).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

QUEUED = "status = 'queued'"  # as this revision made it, whatever comes later


def upgrade() -> None:
    op.create_index("ix_tasks_user_id_created_at", "tasks", ["user_id", "created_at"],
                    unique=False)
    op.create_index("ix_tasks_queued", "tasks", ["user_id", "created_at", "id", "status"],
                    unique=False, sqlite_where=sa.text(QUEUED), postgresql_where=sa.text(QUEUED))
    op.create_index("ix_tasks_user_id_completed_at", "tasks", ["user_id", "completed_at"],
                    unique=False)
    op.drop_index("ix_tasks_user_id", table_name="tasks")


def downgrade() -> None:
    op.create_index("ix_tasks_user_id", "tasks", ["user_id"], unique=False)
    op.drop_index("ix_tasks_user_id_completed_at", table_name="tasks")
    op.drop_index("ix_tasks_queued", table_name="tasks")
    op.drop_index("ix_tasks_user_id_created_at", table_name="tasks")
