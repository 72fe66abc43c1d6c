"""What a user has spent: tokens and dollars of their attempts that finished since a moment
(their day so far, for the daily budget), and their own limits an admin set."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.store.models import Attempt, Task, User, table_of

attempts = table_of(Attempt)
tasks = table_of(Task)
users = table_of(User)


async def spent_since(conn: AsyncConnection, user_id: uuid.UUID,
                      since: datetime) -> tuple[int, float]:
    """Tokens and dollars of `user_id`'s attempts that finished at or after `since`.

    Only the attempts of the user's tasks that have not ended, or ended at or after `since`,
    are read: an ended task's attempts all ended by the decision that ended it, which set its
    `completed_at`. The index of a user's tasks by `completed_at` finds both kinds (migration
    0013), so a check costs what the user's day holds, not every attempt they ever ran.
    """
    day = sa.union_all(
        sa.select(tasks.c.id).where(tasks.c.user_id == user_id, tasks.c.completed_at.is_(None)),
        sa.select(tasks.c.id).where(tasks.c.user_id == user_id, tasks.c.completed_at >= since))
    if conn.dialect.name == "postgresql":
        # Each of the day's tasks' attempts through their task's index: joined by `IN`, the
        # planner could take the day's share of all attempts for large and read every one.
        found = day.subquery("day")
        spent = (sa.select(attempts.c.usage)
                 .where(attempts.c.task_id == found.c.id, attempts.c.finished_at >= since)
                 .lateral("spent"))
        q = _sums(spent.c.usage).select_from(found.join(spent, sa.true()))
    else:
        q = _sums(attempts.c.usage).where(attempts.c.task_id.in_(day),
                                          attempts.c.finished_at >= since)
    row = (await conn.execute(q)).one()
    return int(row[0]) + int(row[1]), float(row[2])


def _sums(usage: Any) -> sa.Select[Any]:
    """The sums of input tokens, output tokens and dollars over the `usage` JSON column."""
    return sa.select(sa.func.coalesce(sa.func.sum(usage["input_tokens"].as_integer()), 0),
                     sa.func.coalesce(sa.func.sum(usage["output_tokens"].as_integer()), 0),
                     sa.func.coalesce(sa.func.sum(usage["cost_usd"].as_float()), 0.0))


async def set_limits(conn: AsyncConnection, user_id: uuid.UUID,
                     changes: dict[str, Any]) -> bool:
    """Change a user's own limits (`max_active_tasks`, `daily_budget`); False: no such user."""
    done = await conn.execute(sa.update(users).where(users.c.id == user_id).values(**changes))
    return done.rowcount > 0
