"""Read side for the API: task lists and details straight from committed rows."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.states import LIVE_ATTEMPT_VALUES
from shoal.store.models import (
    Attempt,
    AuditEntry,
    Checkpoint,
    Correction,
    Guidance,
    Review,
    Subtask,
    Task,
    Worker,
    table_of,
)

tasks = table_of(Task)
subtasks = table_of(Subtask)
attempts = table_of(Attempt)
workers = table_of(Worker)
# The live attempts, named as literals in the order of their partial index's condition (a
# query with the statuses as parameters cannot use it: migration 0012).
LIVE = attempts.c.status.in_(sa.bindparam("live_statuses", list(LIVE_ATTEMPT_VALUES),
                                          expanding=True, literal_execute=True))


async def list_tasks(
    conn: AsyncConnection, *, user_id: uuid.UUID, status: str | None, limit: int, offset: int,
    workflow: str | None = None, search: str | None = None,
    ids: tuple[uuid.UUID, uuid.UUID] | None = None,
) -> tuple[list[sa.Row[Any]], int]:
    """A page of the user's tasks, newest first, and how many there are in all; `search`
    matches within the description, whatever the case; `ids` is a range of ids (those that
    start with a prefix: `shoal.ids.id_range`)."""
    where = [tasks.c.user_id == user_id]
    if ids is not None:
        where.append(tasks.c.id.between(*ids))
    if status:
        where.append(tasks.c.status == status)
    if workflow:
        where.append(tasks.c.workflow == workflow)
    if search:
        literal = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(tasks.c.description.ilike(f"%{literal}%", escape="\\"))
    total = (await conn.execute(sa.select(sa.func.count()).select_from(tasks).where(*where)))
    rows = await conn.execute(sa.select(tasks).where(*where)
                              .order_by(tasks.c.created_at.desc(), tasks.c.id)
                              .limit(limit).offset(offset))
    return list(rows.all()), int(total.scalar() or 0)


async def get_task(
    conn: AsyncConnection, task_id: uuid.UUID, *, user_id: uuid.UUID
) -> sa.Row[Any] | None:
    """One of the user's tasks; None for a missing id or somebody else's task."""
    q = sa.select(tasks).where(tasks.c.id == task_id, tasks.c.user_id == user_id)
    return (await conn.execute(q)).first()


async def task_subtasks(conn: AsyncConnection, task_id: uuid.UUID) -> list[sa.Row[Any]]:
    """A task's subtasks with the names of their workers, in creation order."""
    q = (sa.select(subtasks, workers.c.machine_name.label("worker_name"))
         .outerjoin(workers, workers.c.id == subtasks.c.assigned_worker)
         .where(subtasks.c.task_id == task_id)
         .order_by(subtasks.c.created_at, subtasks.c.key))
    return list((await conn.execute(q)).all())


async def get_subtask(
    conn: AsyncConnection, subtask_id: uuid.UUID, *, user_id: uuid.UUID
) -> sa.Row[Any] | None:
    """One subtask of one of the user's tasks."""
    q = (sa.select(subtasks, workers.c.machine_name.label("worker_name"))
         .join(tasks, tasks.c.id == subtasks.c.task_id)
         .outerjoin(workers, workers.c.id == subtasks.c.assigned_worker)
         .where(subtasks.c.id == subtask_id, tasks.c.user_id == user_id))
    return (await conn.execute(q)).first()


async def subtask_attempts(conn: AsyncConnection, subtask_id: uuid.UUID) -> list[sa.Row[Any]]:
    """Every attempt of a subtask, oldest first."""
    q = sa.select(attempts).where(attempts.c.subtask_id == subtask_id).order_by(attempts.c.fence)
    return list((await conn.execute(q)).all())


async def task_attempts(conn: AsyncConnection, task_id: uuid.UUID) -> list[sa.Row[Any]]:
    """Every attempt of a task's subtasks with its subtask's name and its worker's, in the
    order they were dispatched (a timeline of the run)."""
    q = (sa.select(attempts, subtasks.c.name.label("subtask_name"), subtasks.c.kind,
                   workers.c.machine_name.label("worker_name"))
         .join(subtasks, subtasks.c.id == attempts.c.subtask_id)
         .outerjoin(workers, workers.c.id == attempts.c.worker_id)
         .where(attempts.c.task_id == task_id)
         .order_by(attempts.c.dispatched_at, attempts.c.id))
    return list((await conn.execute(q)).all())


async def current_attempts(
    conn: AsyncConnection, *, owner: uuid.UUID | None
) -> dict[uuid.UUID, Any]:
    """The live attempt of each busy worker (for the worker list): of `owner`'s tasks only,
    or of anybody's with `owner` None (an admin asks)."""
    q = (sa.select(attempts.c.worker_id, attempts.c.task_id, attempts.c.subtask_id,
                   attempts.c.started_at, attempts.c.dispatched_at, subtasks.c.name)
         .join(subtasks, subtasks.c.id == attempts.c.subtask_id)
         .where(LIVE))
    if owner is not None:
        q = q.join(tasks, tasks.c.id == attempts.c.task_id).where(tasks.c.user_id == owner)
    return {r.worker_id: r for r in (await conn.execute(q)).all()}


# ---- the quality loop -------------------------------------------------------------------------

checkpoints = table_of(Checkpoint)
corrections = table_of(Correction)
guidance_rows = table_of(Guidance)
reviews = table_of(Review)
audit = table_of(AuditEntry)


async def active_guidance(conn: AsyncConnection, user_id: uuid.UUID) -> list[str]:
    """The guidance `user_id` asked to apply to their future subtasks, oldest first."""
    q = (sa.select(guidance_rows.c.correction_type, guidance_rows.c.guidance)
         .where(guidance_rows.c.user_id == user_id, guidance_rows.c.active.is_(True))
         .order_by(guidance_rows.c.created_at).limit(50))
    return [f"({row.correction_type}) {row.guidance}" for row in (await conn.execute(q)).all()]


async def list_checkpoints(
    conn: AsyncConnection, *, user_id: uuid.UUID, task_id: uuid.UUID | None,
    status: str | None, limit: int, offset: int,
    ids: tuple[uuid.UUID, uuid.UUID] | None = None,
) -> tuple[list[sa.Row[Any]], int]:
    """A page of the user's checkpoints, newest first, and how many there are; `ids` as
    `list_tasks`'s. A checkpoint's row names its task's user: the page is read from the
    index of a user's checkpoints, not found through every task the user ever made."""
    where = [checkpoints.c.user_id == user_id, tasks.c.user_id == user_id]
    if ids is not None:
        where.append(checkpoints.c.id.between(*ids))
    if task_id is not None:
        where.append(checkpoints.c.task_id == task_id)
    if status:
        where.append(checkpoints.c.status == status)
    joined = checkpoints.join(tasks, tasks.c.id == checkpoints.c.task_id)
    total = await conn.execute(sa.select(sa.func.count()).select_from(joined).where(*where))
    rows = await conn.execute(
        sa.select(checkpoints, tasks.c.description.label("task_description"))
        .select_from(joined).where(*where)
        .order_by(checkpoints.c.created_at.desc(), checkpoints.c.id).limit(limit).offset(offset))
    return list(rows.all()), int(total.scalar() or 0)


async def get_checkpoint(
    conn: AsyncConnection, checkpoint_id: uuid.UUID, *, user_id: uuid.UUID
) -> sa.Row[Any] | None:
    """One checkpoint of one of the user's tasks; None for a missing id or another's."""
    q = (sa.select(checkpoints, tasks.c.description.label("task_description"))
         .join(tasks, tasks.c.id == checkpoints.c.task_id)
         .where(checkpoints.c.id == checkpoint_id, tasks.c.user_id == user_id))
    return (await conn.execute(q)).first()


async def checkpoint_corrections(
    conn: AsyncConnection, checkpoint_id: uuid.UUID
) -> list[sa.Row[Any]]:
    q = (sa.select(corrections).where(corrections.c.checkpoint_id == checkpoint_id)
         .order_by(corrections.c.created_at))
    return list((await conn.execute(q)).all())


async def subtask_reviews(conn: AsyncConnection, subtask_id: uuid.UUID) -> list[sa.Row[Any]]:
    q = sa.select(reviews).where(reviews.c.subtask_id == subtask_id).order_by(reviews.c.cycle)
    return list((await conn.execute(q)).all())


async def audit_entries(
    conn: AsyncConnection, *, object_id: uuid.UUID | None = None,
    task_id: uuid.UUID | None = None,
) -> list[sa.Row[Any]]:
    where = []
    if object_id is not None:
        where.append(audit.c.object_id == object_id)
    if task_id is not None:
        where.append(audit.c.task_id == task_id)
    q = sa.select(audit).where(*where).order_by(audit.c.created_at)
    return list((await conn.execute(q)).all())


async def traced_tasks(conn: AsyncConnection, ids: list[uuid.UUID]) -> list[sa.Row[Any]]:
    """What the trace of each of these tasks shows: status, times, usage, and the control-plane
    copy that drove it (`owner_id`)."""
    c = tasks.c
    q: sa.Select[Any] = sa.select(
        c.id, c.workflow, c.status, c.error, c.input_tokens, c.output_tokens, c.cost_usd,
        c.created_at, c.completed_at, c.owner_id).where(c.id.in_(ids))
    return list((await conn.execute(q)).all())


async def traced_subtasks(conn: AsyncConnection, ids: list[uuid.UUID]) -> list[sa.Row[Any]]:
    """What the trace of each of these subtasks shows, with its task's `owner_id`."""
    c = subtasks.c
    q: sa.Select[Any] = (
        sa.select(c.id, c.task_id, c.key, c.name, c.role, c.kind, c.status, c.assigned_tool,
                  c.attempts, c.error, c.created_at, c.started_at, c.completed_at,
                  tasks.c.owner_id)
        .join(tasks, tasks.c.id == c.task_id).where(c.id.in_(ids)))
    return list((await conn.execute(q)).all())


async def attempt_usage(conn: AsyncConnection, subtask_ids: list[uuid.UUID]) -> list[sa.Row[Any]]:
    """(subtask_id, usage) of every attempt of these subtasks."""
    q: sa.Select[Any] = sa.select(attempts.c.subtask_id, attempts.c.usage).where(
        attempts.c.subtask_id.in_(subtask_ids))
    return list((await conn.execute(q)).all())
