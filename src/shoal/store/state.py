"""Loading task state for the engine and writing back what a decision changed.

Writes are optimistic: an update names the version it read and fails with `Conflict` when
another writer got there first, so a stale in-memory state can never overwrite a newer row.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.engine.model import (
    AttemptRecord,
    CheckpointRecord,
    SubtaskRecord,
    TaskRecord,
    TaskState,
)
from shoal.engine.workflow import Decision
from shoal.errors import Conflict
from shoal.states import LIVE_ATTEMPT, TERMINAL_TASK
from shoal.store.convert import (
    RECORD_TABLES,
    attempt_from_row,
    attempt_values,
    attempts,
    checkpoint_from_row,
    checkpoint_values,
    checkpoints,
    subtask_from_row,
    subtask_values,
    subtasks,
    task_from_row,
    task_values,
    tasks,
)

_LIVE = [s.value for s in LIVE_ATTEMPT]


def insert_task_sync(conn: sa.Connection, task: TaskRecord) -> None:
    """Store a new task."""
    conn.execute(sa.insert(tasks).values(task_values(task)))


async def insert_task(conn: AsyncConnection, task: TaskRecord) -> None:
    """Store a new task (async connection)."""
    await conn.run_sync(insert_task_sync, task)


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
    cps: dict[uuid.UUID, dict[uuid.UUID, CheckpointRecord]] = {i: {} for i in ids}
    for row in (await conn.execute(
        sa.select(checkpoints).where(checkpoints.c.task_id.in_(ids),
                                     checkpoints.c.status == "pending_review")
    )).all():
        cps[row.task_id][row.id] = checkpoint_from_row(row)
    return [TaskState(task=task_from_row(r), subtasks=subs[r.id], attempts=atts[r.id],
                      checkpoints=cps[r.id])
            for r in task_rows]


class BatchWriter:
    """Collects the row changes of many decisions and writes them with one statement per table.

    Updates are optimistic: before writing, the versions the decisions were based on are
    checked in one query per table (locking the rows on PostgreSQL); any mismatch raises
    `Conflict` and the surrounding transaction rolls back.
    """

    def __init__(self) -> None:
        self._inserts: dict[str, list[dict[str, Any]]] = {}
        self._updates: dict[str, list[tuple[dict[str, Any], int]]] = {}
        self._reset()

    def _reset(self) -> None:
        self._inserts = {"subtasks": [], "attempts": [], "checkpoints": []}
        self._updates = {"tasks": [], "subtasks": [], "attempts": [], "checkpoints": []}
        self._records: dict[str, list[dict[str, Any]]] = {}

    def stage(self, old: TaskState, d: Decision) -> TaskState:
        """Queue what `d` changed relative to `old`; return the state with bumped versions."""
        new = d.state
        task = new.task
        if d.task_changed:
            self._updates["tasks"].append((task_values(task), old.task.version))
            task = replace(task, version=old.task.version + 1)
        subs = dict(new.subtasks)
        self._inserts["subtasks"].extend(subtask_values(subs[i]) for i in d.new_subtasks)
        for sid in d.changed_subtasks:
            before = old.subtasks[sid].version
            self._updates["subtasks"].append((subtask_values(subs[sid]), before))
            subs[sid] = replace(subs[sid], version=before + 1)
        live = dict(new.attempts)
        for aid, att in d.changed_attempts.items():
            if aid in d.new_attempts:
                self._inserts["attempts"].append(attempt_values(att))
                continue
            self._updates["attempts"].append((attempt_values(att), att.version))
            if aid in live:
                live[aid] = replace(att, version=att.version + 1)
        pending = dict(new.checkpoints)
        for cid, cp in d.changed_checkpoints.items():
            if cid in d.new_checkpoints:
                self._inserts["checkpoints"].append(checkpoint_values(cp))
                continue
            self._updates["checkpoints"].append((checkpoint_values(cp), cp.version))
            if cid in pending:
                pending[cid] = replace(cp, version=cp.version + 1)
        for record in d.records:
            self._records.setdefault(record.table, []).append(dict(record.values))
        return TaskState(task=task, subtasks=subs, attempts=live, checkpoints=pending)

    def flush(self, conn: sa.Connection) -> None:
        """Write everything staged (inserts first: attempts refer to new subtasks)."""
        for name in ("subtasks", "attempts", "checkpoints"):
            if self._inserts[name]:
                conn.execute(sa.insert(_TABLES[name]), self._inserts[name])
        for table_name, values in self._records.items():
            conn.execute(sa.insert(RECORD_TABLES[table_name]), values)
        for name in ("tasks", "subtasks", "attempts", "checkpoints"):
            rows = self._updates[name]
            if not rows:
                continue
            if conn.dialect.name != "sqlite":  # asyncpg's executemany reports no row count
                _check_versions(conn, _TABLES[name], rows)
            result = conn.execute(_update_statement(name), [_params(v, ver) for v, ver in rows])
            if conn.dialect.name == "sqlite" and result.rowcount != len(rows):
                raise Conflict(f"A {name} row changed underneath this writer; reload and retry.",
                               code="stale_write")
        self._reset()


async def write_decision(conn: AsyncConnection, old: TaskState, d: Decision) -> TaskState:
    """Persist what `d` changed relative to `old` now; return the state with bumped versions."""
    writer = BatchWriter()
    state = writer.stage(old, d)
    await conn.run_sync(writer.flush)
    return state


def renew_leases(conn: sa.Connection, attempt_ids: Sequence[uuid.UUID], expires_at: Any) -> None:
    """Push out the lease of live attempts (heartbeat)."""
    if attempt_ids:
        conn.execute(
            sa.update(attempts)
            .where(attempts.c.id.in_(list(attempt_ids)), attempts.c.status.in_(_LIVE))
            .values(lease_expires_at=expires_at)
        )


_TABLES = {"tasks": tasks, "subtasks": subtasks, "attempts": attempts,
           "checkpoints": checkpoints}


@functools.cache
def _update_statement(name: str) -> sa.Update:
    """`UPDATE t SET every column WHERE id = :b_id AND version = :b_expected`, built once."""
    table = _TABLES[name]
    return (sa.update(table)
            .where(table.c.id == sa.bindparam("b_id", type_=table.c.id.type),
                   table.c.version == sa.bindparam("b_expected", type_=table.c.version.type))
            .values({c.name: sa.bindparam(f"b_{c.name}", type_=c.type)
                     for c in table.columns if c.name != "id"}))


def _params(values: dict[str, Any], version: int) -> dict[str, Any]:
    params = {f"b_{k}": v for k, v in values.items()}
    params["b_version"] = version + 1
    params["b_expected"] = version
    return params


def _check_versions(
    conn: sa.Connection, table: sa.Table, rows: list[tuple[dict[str, Any], int]]
) -> None:
    expected = {v["id"]: version for v, version in rows}
    if len(expected) != len(rows):
        raise Conflict(f"One {table.name} row was staged twice in one batch.", code="stale_write")
    q = sa.select(table.c.id, table.c.version).where(table.c.id.in_(list(expected)))
    if conn.dialect.name == "postgresql":
        q = q.with_for_update()
    found = {r.id: r.version for r in conn.execute(q).all()}
    stale = [str(i) for i, v in expected.items() if found.get(i) != v]
    if stale:
        raise Conflict(
            f"{len(stale)} {table.name} row(s) changed underneath this writer; reload and retry.",
            code="stale_write", details={"ids": stale[:10]},
        )
