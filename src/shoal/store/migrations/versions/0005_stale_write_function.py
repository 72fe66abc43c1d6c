"""shoal_stale_write(): how a one-statement batch refuses a stale row (PostgreSQL only)

A runtime batch on PostgreSQL is one statement outside any explicit transaction (ADR 0023).
When one of its version-checked updates finds fewer rows than it should, the statement calls
this function, which raises a serialization failure and so rolls the whole statement back.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 20:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION shoal_stale_write(what text) RETURNS integer "
        "LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION '%', what USING ERRCODE = 'serialization_failure'; "
        "END $$"
    )


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS shoal_stale_write(text)")
