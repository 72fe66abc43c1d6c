"""Which control-plane copy drives which unfinished task: claims with a time to live.

A copy claims unfinished tasks that nobody holds, that it held before, or whose holder let the
claim run out (`tasks.owner_id`, `tasks.owner_expires_at`), and renews what it holds well before
the claim expires. On PostgreSQL the claim selects its rows `FOR UPDATE SKIP LOCKED`, so copies
claiming at the same moment split the tasks between them instead of waiting for each other or
taking the same ones; SQLite has one writer at a time, so there the lock clause is left out.
A claim changes no `version`: it says who may change a task, not what the task is.

The functions take a synchronous connection: they run on the store's writer, inside the
transaction of `Database.run_write` or of a runtime batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from shoal.states import TERMINAL_TASK, TaskStatus
from shoal.store.convert import attempts, tasks
from shoal.store.models import UNFINISHED_TASK


@dataclass(frozen=True, slots=True)
class Claim:
    """Who holds a task, and until when."""

    task_id: uuid.UUID
    finished: bool
    owner: str | None
    expires_at: datetime | None

    def held_by_other(self, owner: str, now: datetime) -> bool:
        """Whether a copy other than `owner` holds this unfinished task at `now`."""
        return (not self.finished and self.owner is not None and self.owner != owner
                and self.expires_at is not None and self.expires_at >= now)


def claim_tasks(
    conn: sa.Connection, owner: str, *, now: datetime, ttl: float, limit: int | None = None,
    task_ids: Collection[uuid.UUID] | None = None,
) -> list[uuid.UUID]:
    """Claim for `owner` until `now + ttl` seconds the unfinished tasks it may take; their ids.

    It may take the tasks nobody holds, those it holds already, and those whose claim expired
    before `now` — at most `limit` (oldest first), and only among `task_ids` when given. Tasks
    another transaction has locked are skipped, not waited for (PostgreSQL).
    """
    free = sa.or_(tasks.c.owner_id.is_(None), tasks.c.owner_id == owner,
                  tasks.c.owner_expires_at < now)
    pick = sa.select(tasks.c.id).where(UNFINISHED_TASK, free)
    if task_ids is not None:
        pick = pick.where(tasks.c.id.in_(list(task_ids)))
    if limit is not None:
        # Oldest first only where it matters: ordered by `created_at`, SQLite reads every task
        # ever made through that column's index instead of the unfinished ones through theirs
        # (a renewal's 23 ms at 50,000 ended tasks, every `claim_interval`, on the loop).
        pick = pick.order_by(tasks.c.created_at).limit(limit)
    if conn.dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True)
    claimed = conn.execute(
        sa.update(tasks).where(tasks.c.id.in_(pick))
        .values(owner_id=owner, owner_expires_at=now + timedelta(seconds=ttl))
        .returning(tasks.c.id)
    )
    return list(claimed.scalars())


def renew_claims(conn: sa.Connection, owner: str, *, now: datetime, ttl: float) -> set[uuid.UUID]:
    """Extend to `now + ttl` seconds every claim `owner` still holds; the ids of those tasks.

    A task another copy took over after `owner`'s claim expired is not among them: `owner` must
    stop driving it.
    """
    renewed = conn.execute(
        sa.update(tasks).where(tasks.c.owner_id == owner, UNFINISHED_TASK)
        .values(owner_expires_at=now + timedelta(seconds=ttl))
        .returning(tasks.c.id)
    )
    return set(renewed.scalars())


def release_claims(conn: sa.Connection, owner: str) -> int:
    """Give up every claim `owner` holds (graceful shutdown); how many tasks it held."""
    released = conn.execute(
        sa.update(tasks).where(tasks.c.owner_id == owner, UNFINISHED_TASK)
        .values(owner_id=None, owner_expires_at=None)
    )
    return released.rowcount


def claim_of(conn: sa.Connection, task_id: uuid.UUID) -> Claim | None:
    """Who holds task `task_id` (None: there is no such task)."""
    row = conn.execute(
        sa.select(tasks.c.status, tasks.c.owner_id, tasks.c.owner_expires_at)
        .where(tasks.c.id == task_id)
    ).first()
    if row is None:
        return None
    return Claim(task_id=task_id, finished=TaskStatus(row.status) in TERMINAL_TASK,
                 owner=row.owner_id, expires_at=row.owner_expires_at)


def owners_of_attempts(
    conn: sa.Connection, attempt_ids: Collection[uuid.UUID], *, now: datetime
) -> dict[uuid.UUID, str]:
    """The copy holding a live claim on each attempt's unfinished task (attempts of tasks no
    live copy holds are left out)."""
    rows = conn.execute(
        sa.select(attempts.c.id, tasks.c.owner_id)
        .join(tasks, tasks.c.id == attempts.c.task_id)
        .where(attempts.c.id.in_(list(attempt_ids)), tasks.c.owner_id.is_not(None),
               tasks.c.owner_expires_at >= now,
               tasks.c.status.not_in([s.value for s in TERMINAL_TASK]))
    )
    return {row.id: row.owner_id for row in rows}
