"""events never reuse a sequence number (SQLite AUTOINCREMENT)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 18:30:00.000000

Deleting a task deletes its events; when they were the newest, SQLite (without AUTOINCREMENT)
gives their numbers to the next events, which readers that resume after a number (clients
with `since`, the notifier) would never see. PostgreSQL's sequence never goes back.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("events", recreate="always",
                              table_kwargs={"sqlite_autoincrement": True}):
        pass


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("events", recreate="always",
                              table_kwargs={"sqlite_autoincrement": False}):
        pass
