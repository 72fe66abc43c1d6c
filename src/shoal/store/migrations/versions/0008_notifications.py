"""notifications: webhooks, email settings, the notifier's cursor and the deliveries

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import shoal.store.models

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = shoal.store.models.UTCDateTime(timezone=True)
PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("secret", sa.String(length=255), nullable=False),
        sa.Column("events", JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("disabled_at", TIME, nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_webhooks_user_id_users"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(op.f("ix_webhooks_user_id"), "webhooks", ["user_id"], unique=False)
    op.create_table(
        "email_settings",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("address", sa.String(length=254), nullable=False),
        sa.Column("events", JSON, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"],
                                name=op.f("fk_email_settings_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_email_settings")),
    )
    cursor = op.create_table(
        "notifier_cursor",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("seq_created_at", TIME, nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifier_cursor")),
    )
    # The notifier starts at the end of the log: events from before notifications existed
    # have nobody subscribed to them.
    events = sa.table("events", sa.column("seq", sa.BigInteger()), sa.column("created_at", TIME))
    newest = op.get_bind().execute(sa.select(events.c.seq, events.c.created_at)
                                   .order_by(events.c.seq.desc()).limit(1)).first()
    op.bulk_insert(cursor, [{"id": 1, "seq": int(newest.seq) if newest else 0,
                             "seq_created_at": newest.created_at if newest else None,
                             "updated_at": shoal.store.models.utcnow()}])
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("webhook_id", sa.Uuid(), nullable=True),
        sa.Column("target", sa.String(length=2048), nullable=False),
        sa.Column("event_seq", sa.BigInteger(), nullable=True),
        sa.Column("event_type", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TIME, nullable=False),
        sa.Column("last_attempt_at", TIME, nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("delivered_at", TIME, nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"],
                                name=op.f("fk_deliveries_user_id_users"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhooks.id"],
                                name=op.f("fk_deliveries_webhook_id_webhooks"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
    )
    op.create_index("ix_deliveries_due", "deliveries", ["next_attempt_at"], unique=False,
                    postgresql_where=PENDING, sqlite_where=PENDING)
    op.create_index("ix_deliveries_user_id_created_at", "deliveries", ["user_id", "created_at"],
                    unique=False)
    op.create_index(op.f("ix_deliveries_webhook_id"), "deliveries", ["webhook_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_deliveries_webhook_id"), table_name="deliveries")
    op.drop_index("ix_deliveries_user_id_created_at", table_name="deliveries")
    op.drop_index("ix_deliveries_due", table_name="deliveries")
    op.drop_table("deliveries")
    op.drop_table("notifier_cursor")
    op.drop_table("email_settings")
    op.drop_index(op.f("ix_webhooks_user_id"), table_name="webhooks")
    op.drop_table("webhooks")
