"""Loading task state for the engine and writing back what a decision changed.

Writes are optimistic: an update names the version it read and fails with `Conflict` when
another writer got there first, so a stale in-memory state can never overwrite a newer row.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.engine.model import (
    AttemptRecord,
    CheckpointRecord,
    SubtaskRecord,
    TaskRecord,
    TaskState,
    changed_fields,
    evolve,
)
from shoal.engine.step import Decision
from shoal.errors import Conflict
from shoal.states import LIVE_ATTEMPT_VALUES, TERMINAL_TASK
from shoal.store import fast
from shoal.store.convert import (
    RECORD_TABLES,
    attempt_from_row,
    attempt_values,
    attempts,
    checkpoint_from_row,
    checkpoint_values,
    checkpoints,
    column_expression,
    column_values,
    subtask_from_row,
    subtask_values,
    subtasks,
    task_from_row,
    task_values,
    tasks,
)

_LIVE = list(LIVE_ATTEMPT_VALUES)


def insert_task_sync(
    conn: sa.Connection, task: TaskRecord, *, owner: str | None = None,
    owner_expires_at: datetime | None = None,
) -> None:
    """Store a new task, claimed by control-plane copy `owner` until `owner_expires_at`."""
    values = task_values(task)
    if owner is not None:
        values.update(owner_id=owner, owner_expires_at=owner_expires_at)
    insert_rows(conn, tasks, [values])


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

    Updates are optimistic: each row is updated only where it still has the version the
    decision was based on, in one statement per table, and a row count short of the rows
    staged raises `Conflict` so the surrounding transaction rolls back.
    """

    def __init__(self) -> None:
        self._inserts: dict[str, list[dict[str, Any]]] = {}
        self._updates: dict[str, list[_Update]] = {}
        self._reset()

    def _reset(self) -> None:
        self._inserts = {"tasks": [], "subtasks": [], "attempts": [], "checkpoints": []}
        self._updates = {"tasks": [], "subtasks": [], "attempts": [], "checkpoints": []}
        self._records: dict[str, list[dict[str, Any]]] = {}

    def stage(self, old: TaskState, d: Decision) -> TaskState:
        """Queue what `d` changed relative to `old`; return the state with bumped versions.

        An update writes only the columns some row of its table changed (and the version):
        one statement per table, and JSON nobody touched is not encoded again.
        """
        new = d.state
        task = new.task
        if d.task_changed:
            self._updates["tasks"].append((task, _changed(old.task, task), old.task.version))
            task = evolve(task, version=old.task.version + 1)
        subs = dict(new.subtasks)
        if d.new_subtasks:  # (tested first: a generator is two calls even when empty)
            self._inserts["subtasks"].extend(subtask_values(subs[i]) for i in d.new_subtasks)
        for sid in d.changed_subtasks:
            before = old.subtasks[sid]
            after = subs[sid]
            self._updates["subtasks"].append((after, _changed(before, after), before.version))
            subs[sid] = evolve(after, version=before.version + 1)
        live = dict(new.attempts)
        for aid, att in d.changed_attempts.items():
            if aid in d.new_attempts:
                self._inserts["attempts"].append(attempt_values(att))
                continue
            self._updates["attempts"].append(
                (att, _changed(old.attempts.get(aid), att), att.version))
            if aid in live:
                live[aid] = evolve(att, version=att.version + 1)
        pending = dict(new.checkpoints)
        for cid, cp in d.changed_checkpoints.items() if d.changed_checkpoints else ():
            if cid in d.new_checkpoints:
                self._inserts["checkpoints"].append(
                    {**checkpoint_values(cp), "user_id": task.user_id})
                continue
            self._updates["checkpoints"].append(
                (cp, _changed(old.checkpoints.get(cid), cp), cp.version))
            if cid in pending:
                pending[cid] = evolve(cp, version=cp.version + 1)
        for record in d.records:
            self._records.setdefault(record.table, []).append(dict(record.values))
        return TaskState(task=task, subtasks=subs, attempts=live, checkpoints=pending,
                         dependents=new.dependents, agents=new.agents, rounds=new.rounds)

    def stage_new(self, old: TaskState, d: Decision, **columns: Any) -> TaskState:
        """`stage` for a task not stored yet: its row is inserted with the values `d` left it
        with, plus `columns` (its claim), rather than inserted as submitted and then updated,
        so a new task goes in with its first subtasks in one statement (ADR 0023)."""
        state = self.stage(old, d)
        updates = self._updates["tasks"]
        if updates and updates[-1][0].id == state.task.id:
            updates.pop()  # the update `stage` queued for it: the insert carries its values
        self._inserts["tasks"].append({**task_values(state.task), **columns})
        return state

    def staged(self) -> tuple[list[tuple[str, list[dict[str, Any]]]],
                              list[tuple[sa.Table, list[dict[str, Any]]]],
                              list[tuple[str, list[_Update]]]]:
        """What `flush` would write: (table, rows) to insert, in order (inserts first: attempts
        refer to new subtasks), record rows by table, and (table, updates)."""
        inserts = [(name, self._inserts[name]) for name in _INSERT_ORDER if self._inserts[name]]
        records = [(RECORD_TABLES[name], rows) for name, rows in self._records.items() if rows]
        updates = [(name, self._updates[name])
                   for name in ("tasks", "subtasks", "attempts", "checkpoints")
                   if self._updates[name]]
        return inserts, records, updates

    def clear(self) -> None:
        """Forget what was staged (it has been written another way)."""
        self._reset()

    def flush(self, conn: sa.Connection) -> None:
        """Write everything staged (inserts first, parents first: attempts refer to new
        subtasks, subtasks to new tasks)."""
        for name in _INSERT_ORDER:
            if self._inserts[name]:
                insert_rows(conn, _TABLES[name], self._inserts[name])
        for table_name, values in self._records.items():
            conn.execute(sa.insert(RECORD_TABLES[table_name]), values)
        updates = [(name, self._updates[name])
                   for name in ("tasks", "subtasks", "attempts", "checkpoints")
                   if self._updates[name]]
        if conn.dialect.name == "postgresql":
            if updates:
                _update_postgres(conn, updates)
        else:
            for name, rows in updates:
                _update_rows(conn, name, rows)
        self._reset()


# An update: the record as the decision left it, the columns it changed (None: unknown, every
# column) and the version it expects to find. Its parameters are made from the record when the
# batch is written, only for the columns some row of its table changed (JSON costs the most).
_Update = tuple[Any, "frozenset[str] | None", int]
_INSERT_ORDER = ("tasks", "subtasks", "attempts", "checkpoints")  # parents first


def _changed(before: Any, after: Any) -> frozenset[str] | None:
    """The columns whose fields differ between records `before` and `after` (None: all)."""
    if before is None:
        return None
    names = tuple(changed_fields(before, after))
    found = _CHANGED.get(names)
    if found is None:  # a few distinct sets: one frozenset each, its hash computed once
        found = _CHANGED[names] = frozenset(_COLUMN_OF.get(name, name) for name in names
                                            if name != "version")
    return found


_CHANGED: dict[tuple[str, ...], frozenset[str]] = {}


def table_named(name: str) -> sa.Table:
    """The table of `tasks`, `subtasks`, `attempts` or `checkpoints`."""
    return _TABLES[name]


def update_columns(name: str, rows: list[_Update]) -> tuple[str, ...]:
    """The columns some row of `rows` changed (all when one says None), in table order."""
    table = _TABLES[name]
    if len(rows) == 1:  # the common case: a chain's step touches one row per table
        touched = rows[0][1]
        changed = frozenset(touched if touched is not None else table.columns.keys())
    else:  # a loop, not comprehensions: each of those is a call (Python 3.11)
        seen: dict[Any, None] = {}
        every: set[str] = set()
        for record, touched, _ in rows:
            if record.id in seen:
                raise Conflict(f"One {name} row was staged twice in one batch.",
                               code="stale_write")
            seen[record.id] = None
            every |= touched if touched is not None else frozenset(table.columns.keys())
        changed = frozenset(every)
    key = (name, changed)
    try:
        return _COLUMNS_FOR[key]
    except KeyError:
        columns = _COLUMNS_FOR[key] = tuple(
            c.name for c in table.columns if c.name in changed and c.name not in ("id", "version"))
    return columns


_COLUMNS_FOR: dict[tuple[str, frozenset[str]], tuple[str, ...]] = {}  # few distinct sets


def _update_rows(conn: sa.Connection, name: str, rows: list[_Update]) -> None:
    """One version-checked executemany of `rows` of table `name`; `Conflict` if any is stale.

    Each row's parameters come straight from its record, by a function generated once per
    table and columns (`_update_reads`): no dict of values between the record and the
    driver's tuple."""
    columns = update_columns(name, rows)
    update = _update_statement(name, columns)
    stmt = fast.prepared(conn, ("update", name, columns), fast.statement(update),
                         reads=_update_reads(name, columns))
    if stmt is not None:
        count = stmt.execute(conn, rows)
    else:  # a dialect with named parameters: dicts, through SQLAlchemy
        values = _values_of(name, columns)
        params = []
        for record, _, version in rows:
            row = {f"b_{c}": v for c, v in values(record).items()}
            row.update(b_version=version + 1, b_expected=version)
            params.append(row)
        count = conn.execute(update, params).rowcount
    if count != len(rows):
        raise Conflict(f"A {name} row changed underneath this writer; reload and retry.",
                       code="stale_write")


@functools.cache
def _update_reads(name: str, columns: tuple[str, ...]) -> fast.Reads:
    """Where `_update_statement(name, columns)`'s parameters come from in an `_Update`."""
    expressions = {f"b_{c}": column_expression(name, c) for c in columns}
    expressions.update(b_id="r.id", b_version="version + 1", b_expected="version")
    return fast.Reads("r, _, version = item", expressions)


@functools.cache
def _values_of(name: str, columns: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    """A record's values of `columns` of table `name`, and its id (`column_values`)."""
    return column_values(name, frozenset(columns))


def _update_postgres(conn: sa.Connection, updates: list[tuple[str, list[_Update]]]) -> None:
    """PostgreSQL: check and update the rows of every table in one round trip.

    One statement, a data-modifying CTE per table (`UPDATE t … FROM unnest(…) WHERE id = …
    AND version = expected`, each row locked as it is updated), each column's values sent as
    one array; it returns how many rows of each table still had the expected version.
    """
    parts = [(name, update_columns(name, rows), rows) for name, rows in updates]
    sql, procs = _postgres_plan(conn.dialect, tuple((name, cols) for name, cols, _ in parts))
    params: list[Any] = []
    for (name, columns, rows), converters in zip(parts, procs, strict=True):
        params.extend(update_arrays(name, columns, rows, converters))
    counts = conn.exec_driver_sql(sql, tuple(params)).one()
    for (name, _, rows), count in zip(parts, counts, strict=True):
        if count != len(rows):
            raise Conflict(f"A {name} row changed underneath this writer; reload and retry.",
                           code="stale_write")


def _postgres_plan(
    dialect: sa.Dialect, parts: tuple[tuple[str, tuple[str, ...]], ...]
) -> tuple[str, list[list[fast.ArrayParam]]]:
    """The SQL of `_update_postgres` for these (table, columns), and each array's parameter."""
    cache = fast.cache_of(dialect)
    plan: tuple[str, list[list[fast.ArrayParam]]] | None = cache.get(("update", parts))
    if plan is None:
        ctes, procs, n = [], [], 1
        for i, (name, columns) in enumerate(parts):
            cte, converters, n = update_cte(dialect, f"u{i}", _TABLES[name], columns, n)
            ctes.append(cte)
            procs.append(converters)
        counts = ", ".join(f"(SELECT count(*) FROM u{i})" for i in range(len(parts)))
        plan = cache[("update", parts)] = (f"WITH {', '.join(ctes)} SELECT {counts}", procs)
    return plan


def update_cte(
    dialect: sa.Dialect, name: str, table: sa.Table, columns: tuple[str, ...], first: int
) -> tuple[str, list[fast.ArrayParam], int]:
    """`name AS (UPDATE table … FROM unnest($first…) … RETURNING 1)`: the version-checked
    update of `columns`, fed by `update_arrays`; with the arrays' parameters (the id's, each
    column's, the expected and the new version's) and the number of the next free one."""
    quote = dialect.identifier_preparer.quote
    cols = [table.c.id, *(table.c[c] for c in columns)]
    params = [fast.array_param(c.type, dialect) for c in cols] + [fast.integer_param(dialect)] * 2
    names = [quote(c.name) for c in cols] + ["b_expected", "b_version"]
    arrays = ", ".join(f"${first + j}{p.cast}" for j, p in enumerate(params))
    sets = ", ".join([f"{quote(c)} = v.{quote(c)}" for c in columns] + ["version = v.b_version"])
    cte = (f"{name} AS (UPDATE {quote(table.name)} AS t SET {sets} "
           f"FROM unnest({arrays}) AS v({', '.join(names)}) "
           "WHERE t.id = v.id AND t.version = v.b_expected RETURNING 1)")
    return cte, params, first + len(params)


def update_arrays(
    name: str, columns: tuple[str, ...], rows: list[_Update], params: Sequence[fast.ArrayParam]
) -> list[Any]:
    """The parameters of `update_cte` for `rows` of table `name`: id and each column, then
    the expected and the new version."""
    values = _values_of(name, columns)
    out = fast.column_arrays(("id", *columns), [values(record) for record, _, _ in rows],
                             params[:-2])
    out.append(params[-2].value([version for _, _, version in rows]))
    out.append(params[-1].value([version + 1 for _, _, version in rows]))
    return out


def insert_rows(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert `rows` (dicts with the same keys) with one executemany."""
    keys = tuple(rows[0])
    stmt = fast.prepared(conn, ("insert", table.name, keys), fast.insert(table, keys))
    if stmt is None:
        conn.execute(sa.insert(table), rows)
    else:
        stmt.execute(conn, rows)


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


_COLUMN_OF = {"meta": "metadata"}  # record field → column, where the names differ


@functools.cache
def _update_statement(name: str, columns: tuple[str, ...]) -> sa.Update:
    """`UPDATE t SET columns…, version WHERE id = :b_id AND version = :b_expected`."""
    table = _TABLES[name]
    sets = [*columns, "version"]
    return (sa.update(table)
            .where(table.c.id == sa.bindparam("b_id", type_=table.c.id.type),
                   table.c.version == sa.bindparam("b_expected", type_=table.c.version.type))
            .values({c: sa.bindparam(f"b_{c}", type_=table.c[c].type) for c in sets}))


@functools.cache
def _binds(columns: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Each column's bind name in `_update_statement`, with the column."""
    return tuple((f"b_{c}", c) for c in columns)
