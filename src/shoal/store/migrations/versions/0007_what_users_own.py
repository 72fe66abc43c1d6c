"""what users own: active-task slots, per-user limits, uploads, share links, the file sweep

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 17:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import shoal.store.models

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = shoal.store.models.UTCDateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slot", sa.Integer(), nullable=True))
        batch_op.create_unique_constraint(op.f("uq_tasks_user_id_slot"), ["user_id", "slot"])
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_active_tasks", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("daily_budget", JSON, nullable=True))
    op.create_table(
        "uploads",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("text_sha256", sa.String(length=64), nullable=True),
        sa.Column("text_chars", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_uploads_user_id_users"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uploads")),
    )
    op.create_index(op.f("ix_uploads_user_id"), "uploads", ["user_id"], unique=False)
    op.create_table(
        "task_sources",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("upload_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"],
                                name=op.f("fk_task_sources_task_id_tasks"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["upload_id"], ["uploads.id"],
                                name=op.f("fk_task_sources_upload_id_uploads"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("task_id", "upload_id", name=op.f("pk_task_sources")),
    )
    op.create_index(op.f("ix_task_sources_upload_id"), "task_sources", ["upload_id"],
                    unique=False)
    op.create_table(
        "shares",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("last_used_at", TIME, nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_shares_task_id_tasks"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shares")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_shares_token_hash")),
    )
    op.create_index(op.f("ix_shares_task_id"), "shares", ["task_id"], unique=False)
    op.create_table(
        "file_sweep",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("queued_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_file_sweep")),
    )


def downgrade() -> None:
    op.drop_table("file_sweep")
    op.drop_index(op.f("ix_shares_task_id"), table_name="shares")
    op.drop_table("shares")
    op.drop_index(op.f("ix_task_sources_upload_id"), table_name="task_sources")
    op.drop_table("task_sources")
    op.drop_index(op.f("ix_uploads_user_id"), table_name="uploads")
    op.drop_table("uploads")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("daily_budget")
        batch_op.drop_column("max_active_tasks")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("uq_tasks_user_id_slot"), type_="unique")
        batch_op.drop_column("slot")
