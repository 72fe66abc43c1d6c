"""live attempts: their index holds the live attempts alone

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 09:40:00.000000

`ix_attempts_live` indexed every attempt ever made by status and lease, though only the live
ones (dispatched or running) are ever looked up by it and no query reads the lease from it
(the runtime keeps the leases in memory). Each step moved an entry from the live statuses'
pages to the ended ones', and each heartbeat's lease renewal moved its attempt's entry. Now it
is a partial index of the live attempts by status: a dispatch adds an entry and the attempt's
end takes it out, on the same small page (issue 37, twenty-sixth round). A query uses it when
it names the live statuses as literals, in this order (`shoal.states.LIVE_ATTEMPT_VALUES`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

LIVE = "status IN ('dispatched', 'running')"  # as this revision made it, whatever comes later


def upgrade() -> None:
    op.drop_index("ix_attempts_live", table_name="attempts")
    op.create_index("ix_attempts_live", "attempts", ["status"], unique=False,
                    sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))


def downgrade() -> None:
    op.drop_index("ix_attempts_live", table_name="attempts")
    op.create_index("ix_attempts_live", "attempts", ["status", "lease_expires_at"],
                    unique=False)
