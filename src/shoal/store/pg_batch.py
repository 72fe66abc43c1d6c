"""PostgreSQL: a runtime batch's rows and events in one statement, its own transaction (ADR 0023).

The general write path (`Database.run_write`) costs a PostgreSQL batch five round trips:
`BEGIN`, the inserts, the version-checked updates, the event append and `COMMIT`. Here the
same changes go as data-modifying CTEs of one statement, sent outside any transaction, so
PostgreSQL commits it on its own: one round trip in all, and still all or nothing.

    WITH i0 AS (INSERT INTO attempts (…) SELECT * FROM unnest($1::text::UUID[], …)),
         u0 AS (UPDATE subtasks AS t SET … FROM unnest(…) AS v(…)
                WHERE t.id = v.id AND t.version = v.b_expected RETURNING 1),
         lock AS MATERIALIZED (SELECT pg_advisory_xact_lock($k)),
         ev AS (INSERT INTO events (…) SELECT … FROM lock, unnest(…) … RETURNING seq)
    SELECT CASE WHEN (SELECT count(*) FROM u0) = $n THEN 0
                ELSE shoal_stale_write('…') END,
           ARRAY(SELECT seq FROM ev ORDER BY seq)

- An update that finds a row at another version than the one the decision read makes the
  final `SELECT` call `shoal_stale_write` (migration 0005), which raises a serialization
  failure: the statement, and so everything in it, is rolled back, and the caller gets
  `Conflict` as from the general path.
- Foreign keys are checked at the end of the statement, so an attempt may refer to a row
  another CTE of the same statement inserts.
- The event lock is taken before any event gets its sequence number (the join needs the
  lock's row first) and held until the commit, as in `store.events`.

Each column's values go as one parameter: an array literal in text that the server casts
(`$1::text::UUID[]`), for the types `fast.ArrayParam` covers, so that asyncpg encodes one
string and not every element of an array.

The statement's text depends only on which tables and columns the batch touches, so asyncpg
prepares each shape once. A new task is staged as one insert of its final values
(`BatchWriter.stage_new`), so a submission fits. A batch this cannot express (the runtime's
extra SQL steps such as a heartbeat's, a table whose rows leave a Python-side default to
compute) goes the general way: `commit` returns None for it and has written nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from shoal.errors import Conflict
from shoal.events import Event, NewEvent
from shoal.store import fast
from shoal.store.events import EVENT_COLUMNS, EVENT_LOCK_KEY, append_sql, event_rows, stored
from shoal.store.state import (
    BatchWriter,
    table_named,
    update_arrays,
    update_columns,
    update_cte,
)

STALE_SQLSTATE = "40001"  # serialization_failure, raised by shoal_stale_write
STALE_MESSAGE = "A row changed underneath this writer; reload and retry."

async def commit(
    db: Any, writer: BatchWriter, new: Sequence[NewEvent], now: datetime, *,
    rows: Sequence[tuple[sa.Table, list[dict[str, Any]]]] = (),
) -> list[Event] | None:
    """Write what `writer` staged, insert `rows` ((table, rows) pairs, e.g. a result's file
    manifest) and append `new`, in one statement; the stored events in order, or None
    (nothing written) when the batch needs the general path."""
    inserts, records, updates = writer.staged()
    extra = [(table, table_rows) for table, table_rows in rows if table_rows]
    appended = event_rows(new, now)
    parts: list[tuple[str, sa.Table, tuple[str, ...], list[Any]]] = []
    for table, table_rows in [(table_named(n), r) for n, r in inserts] + records + extra:
        cols = tuple(table_rows[0])
        if any(len(row) != len(cols) or any(c not in row for c in cols) for row in table_rows):
            return None  # rows of one table with different columns: the general path
        parts.append(("insert", table, cols, table_rows))
    for name, update_rows in updates:
        parts.append(("update", table_named(name), update_columns(name, update_rows),
                      update_rows))
    if not parts and not appended:
        writer.clear()
        return []
    dialect = db.engine.dialect
    shape = (*((kind, table, cols) for kind, table, cols, _ in parts), bool(appended))
    plan = _plan(dialect, shape)
    if plan is None:
        return None
    sql, converters = plan
    params: list[Any] = []
    expected: list[int] = []
    for (kind, table, cols, part_rows), procs in zip(parts, converters[:len(parts)],
                                                     strict=True):
        if kind == "insert":
            params.extend(fast.column_arrays(cols, part_rows, procs))
        else:
            params.extend(update_arrays(table.name, cols, part_rows, procs))
            expected.append(len(part_rows))
    if appended:
        params.append(EVENT_LOCK_KEY)
        params.extend(fast.column_arrays(EVENT_COLUMNS, appended, converters[-1]))
    params.extend(expected)
    try:
        _, seqs = await db.fetch_row_autocommit(sql, params)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == STALE_SQLSTATE:
            raise Conflict(STALE_MESSAGE, code="stale_write") from None
        raise
    writer.clear()
    return stored(new, sorted(seqs or ()), now, appended)


def _plan(dialect: sa.Dialect, shape: tuple[Any, ...]) -> tuple[str, list[Any]] | None:
    """The statement for a batch of this shape and each part's value converters (cached)."""
    cache = fast.cache_of(dialect)
    key = ("pg_batch", shape)
    if key in cache:
        found: tuple[str, list[Any]] | None = cache[key]
        return found
    quote = dialect.identifier_preparer.quote
    ctes: list[str] = []
    converters: list[Any] = []
    checks: list[str] = []
    n = 1
    *parts, with_events = shape
    for i, (kind, table, cols) in enumerate(parts):
        if kind == "insert":
            if fast.insert(table, cols)(dialect).insert_prefetch:
                cache[key] = None
                return None  # a Python-side default to compute per row: the general path
            params = [fast.array_param(table.c[c].type, dialect) for c in cols]
            arrays = ", ".join(f"${n + j}{p.cast}" for j, p in enumerate(params))
            n += len(params)
            ctes.append(f"i{i} AS (INSERT INTO {quote(table.name)} "
                        f"({', '.join(quote(c) for c in cols)}) SELECT * FROM unnest({arrays}))")
            converters.append(params)
        else:
            cte, procs, n = update_cte(dialect, f"u{i}", table, cols, n)
            ctes.append(cte)
            converters.append(procs)
            checks.append(f"u{i}")
    seqs = "ARRAY[]::BIGINT[]"
    if with_events:
        lock, insert, procs = append_sql(dialect, n)
        n += 1 + len(EVENT_COLUMNS)
        ctes += [lock, f"ev AS ({insert})"]
        converters.append(procs)
        seqs = "ARRAY(SELECT seq FROM ev ORDER BY seq)"
    conditions = " AND ".join(f"(SELECT count(*) FROM {cte}) = ${n + j}"
                              for j, cte in enumerate(checks)) or "TRUE"
    sql = (f"WITH {', '.join(ctes)} SELECT CASE WHEN {conditions} THEN 0 "
           f"ELSE shoal_stale_write('{STALE_MESSAGE}') END, {seqs}")
    plan = cache[key] = (sql, converters)
    return plan
