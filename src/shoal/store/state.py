"""Loading task state for the engine and writing back what a decision changed.

Writes are optimistic: an update names the version it read and fails with `Conflict` when
another writer got there first, so a stale in-memory state can never overwrite a newer row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.engine.model import AttemptRecord, SubtaskRecord, TaskRecord, TaskState
from shoal.engine.workflow import Decision
from shoal.errors import Conflict
from shoal.states import LIVE_ATTEMPT, TERMINAL_TASK
from shoal.store.convert import (
    attempt_from_row,
    attempt_values,
    attempts,
    subtask_from_row,
    subtask_values,
    subtasks,
    task_from_row,
    task_values,
    tasks,
)

_LIVE = [s.value for s in LIVE_ATTEMPT]


async def insert_task(conn: AsyncConnection, task: TaskRecord) -> None:
    """Store a new task."""
    await conn.execute(sa.insert(tasks).values(task_values(task)))


async def load_task_states(
    conn: AsyncConnection, task_ids: Iterable[uuid.UUID] | None = None
) -> list[TaskState]:
    """Load tasks with their subtasks and live attempts; all unfinished tasks when no ids."""
    q = sa.select(tasks)
    if task_ids is None:
        q = q.where(tasks.c.status.not_in([s.value for s in TERMINAL_TASK]))
    else:
        q = q.where(tasks.c.id.in_(list(task_ids)))
    task_rows = (await conn.execute(q)).all()
    if not task_rows:
        return []
    ids = [r.id for r in task_rows]
    subs: dict[uuid.UUID, dict[uuid.UUID, SubtaskRecord]] = {i: {} for i in ids}
    for row in (await conn.execute(
        sa.select(subtasks).where(subtasks.c.task_id.in_(ids)).order_by(subtasks.c.created_at)
    )).all():
        subs[row.task_id][row.id] = subtask_from_row(row)
    atts: dict[uuid.UUID, dict[uuid.UUID, AttemptRecord]] = {i: {} for i in ids}
    for row in (await conn.execute(
        sa.select(attempts).where(attempts.c.task_id.in_(ids), attempts.c.status.in_(_LIVE))
    )).all():
        atts[row.task_id][row.id] = attempt_from_row(row)
    return [TaskState(task=task_from_row(r), subtasks=subs[r.id], attempts=atts[r.id])
            for r in task_rows]


async def write_decision(conn: AsyncConnection, old: TaskState, d: Decision) -> TaskState:
    """Persist what `d` changed relative to `old`; return the state with bumped versions."""
    new = d.state
    task = new.task
    if d.task_changed:
        await _update(conn, tasks, task_values(task), old.task.version)
        task = replace(task, version=old.task.version + 1)
    subs = dict(new.subtasks)
    if d.new_subtasks:
        await conn.execute(sa.insert(subtasks), [subtask_values(subs[i]) for i in d.new_subtasks])
    for sid in d.changed_subtasks:
        before = old.subtasks[sid]
        await _update(conn, subtasks, subtask_values(subs[sid]), before.version)
        subs[sid] = replace(subs[sid], version=before.version + 1)
    live = dict(new.attempts)
    fresh = [a for aid, a in d.changed_attempts.items() if aid in d.new_attempts]
    if fresh:
        await conn.execute(sa.insert(attempts), [attempt_values(a) for a in fresh])
    for aid, att in d.changed_attempts.items():
        if aid in d.new_attempts:
            continue
        await _update(conn, attempts, attempt_values(att), att.version)
        if aid in live:
            live[aid] = replace(att, version=att.version + 1)
    return TaskState(task=task, subtasks=subs, attempts=live)


async def renew_leases(
    conn: AsyncConnection, attempt_ids: Sequence[uuid.UUID], expires_at: Any
) -> None:
    """Push out the lease of live attempts (heartbeat)."""
    if attempt_ids:
        await conn.execute(
            sa.update(attempts)
            .where(attempts.c.id.in_(list(attempt_ids)), attempts.c.status.in_(_LIVE))
            .values(lease_expires_at=expires_at)
        )


async def _update(
    conn: AsyncConnection, table: sa.Table, values: dict[str, Any], version: int
) -> None:
    row_id = values.pop("id")
    values["version"] = version + 1
    result = await conn.execute(
        sa.update(table).where(table.c.id == row_id, table.c.version == version).values(values)
    )
    if result.rowcount != 1:
        raise Conflict(
            f"{table.name} row {row_id} changed underneath this writer; reload and retry.",
            code="stale_write",
        )
