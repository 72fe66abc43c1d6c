"""A user's active-task slots as the database holds them: which are taken, who waits.

A running task holds one of its user's numbered slots (`tasks.slot`, unique per user); a task
that finds none free waits `queued`, and the queue's order is the order of submission. These
reads let the runtime pick a free slot; the unique constraint decides a race between copies.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.states import TaskStatus
from shoal.store.models import QUEUED_TASK, Task, User, table_of

tasks = table_of(Task)
users = table_of(User)


@dataclass(frozen=True, slots=True)
class UserSlots:
    """A user's limit of active tasks, the slots their running tasks hold, and their queue
    (oldest first, at most as many as there are free slots, plus one)."""

    limit: int
    taken: frozenset[int]
    queue: tuple[uuid.UUID, ...]

    def free(self) -> list[int]:
        """The free slots, lowest first."""
        return [n for n in range(1, self.limit + 1) if n not in self.taken]


_LIMIT = sa.select(users.c.max_active_tasks).where(users.c.id == sa.bindparam("user_id"))
_TAKEN = sa.select(tasks.c.slot).where(tasks.c.user_id == sa.bindparam("user_id"),
                                       tasks.c.slot.is_not(None))
_QUEUE = (sa.select(tasks.c.id)
          .where(tasks.c.user_id == sa.bindparam("user_id"),
                 QUEUED_TASK)
          .order_by(tasks.c.created_at, tasks.c.id).limit(sa.bindparam("n")))
# (Built once: each submission reads them, and building a statement costs more than its run.)


async def user_slots(conn: AsyncConnection, user_id: uuid.UUID, *, default_limit: int) -> UserSlots:
    """What the database says of `user_id`'s slots now."""
    limit = (await conn.execute(_LIMIT, {"user_id": user_id})).scalar()
    limit = int(limit) if limit else default_limit
    taken = (await conn.execute(_TAKEN, {"user_id": user_id})).scalars()
    taken_set = frozenset(int(s) for s in taken)
    queue = (await conn.execute(
        _QUEUE, {"user_id": user_id, "n": max(0, limit - len(taken_set)) + 1})).scalars()
    return UserSlots(limit, taken_set, tuple(queue))


async def queue_position(conn: AsyncConnection, task_id: uuid.UUID) -> int | None:
    """Where a queued task stands in its user's queue (1: next to start); None if it is not
    queued."""
    me = (await conn.execute(
        sa.select(tasks.c.user_id, tasks.c.created_at, tasks.c.status)
        .where(tasks.c.id == task_id))).first()
    if me is None or me.status != TaskStatus.QUEUED.value:
        return None
    ahead = await conn.execute(
        sa.select(sa.func.count()).select_from(tasks).where(
            tasks.c.user_id == me.user_id, QUEUED_TASK,
            sa.or_(tasks.c.created_at < me.created_at,
                   sa.and_(tasks.c.created_at == me.created_at, tasks.c.id < task_id))))
    return int(ahead.scalar() or 0) + 1


async def queued_count(conn: AsyncConnection, user_id: uuid.UUID) -> int:
    """How many of `user_id`'s tasks wait in their queue."""
    found = await conn.execute(
        sa.select(sa.func.count()).select_from(tasks).where(
            tasks.c.user_id == user_id, QUEUED_TASK))
    return int(found.scalar() or 0)
