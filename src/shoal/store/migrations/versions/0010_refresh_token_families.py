"""refresh tokens: families of single-use refresh tokens, a reused one revoking its family

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00.000000

Until now a refresh token was checked by its signature alone, and could be traded again and
again until it expired. From here each refresh token is used once: its `jti` is kept with the
family (the sign-in) it descends from, and one presented a second time revokes the family.
Refresh tokens issued before this migration are in no family, so they are refused: everyone
signs in once more.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import shoal.store.models

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TIME = shoal.store.models.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "refresh_families",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.Column("revoked_at", TIME, nullable=True),
        sa.Column("revoked_reason", sa.String(length=20), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"],
                                name=op.f("fk_refresh_families_user_id_users"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_refresh_families")),
    )
    op.create_index(op.f("ix_refresh_families_user_id"), "refresh_families", ["user_id"],
                    unique=False)
    op.create_index(op.f("ix_refresh_families_expires_at"), "refresh_families", ["expires_at"],
                    unique=False)
    op.create_table(
        "refresh_tokens",
        sa.Column("jti", sa.String(length=64), nullable=False),
        sa.Column("family_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("issued_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.Column("used_at", TIME, nullable=True),
        sa.ForeignKeyConstraint(["family_id"], ["refresh_families.id"],
                                name=op.f("fk_refresh_tokens_family_id_refresh_families"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("jti", name=op.f("pk_refresh_tokens")),
    )
    op.create_index(op.f("ix_refresh_tokens_family_id"), "refresh_tokens", ["family_id"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_refresh_tokens_family_id"), table_name="refresh_tokens")
    op.drop_table("refresh_tokens")
    op.drop_index(op.f("ix_refresh_families_expires_at"), table_name="refresh_families")
    op.drop_index(op.f("ix_refresh_families_user_id"), table_name="refresh_families")
    op.drop_table("refresh_families")
