"""user workflows

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 09:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import shoal.store.models

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_workflows",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", shoal.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"],
                                name=op.f("fk_user_workflows_user_id_users"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_workflows")),
        sa.UniqueConstraint("user_id", "name", "version",
                            name=op.f("uq_user_workflows_user_id_name_version")),
    )


def downgrade() -> None:
    op.drop_table("user_workflows")
