"""The durable event log: append inside the deciding transaction, read back by sequence."""

from __future__ import annotations

import functools
import json
import sqlite3
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.events import Event, EventType, NewEvent
from shoal.store import fast
from shoal.store.models import EventRow, table_of
from shoal.store.state import insert_rows

events = table_of(EventRow)

# On PostgreSQL, sequence values are handed out before commit, so two concurrent appenders could
# commit out of order and a reader replaying `since` would skip the late one. A transaction-scoped
# advisory lock taken before appending makes commit order equal sequence order.
EVENT_LOCK_KEY = 0x5_E0A1


_MAX_SEQ = fast.statement(sa.select(sa.func.max(events.c.seq)))


def append_events_sync(conn: sa.Connection, new: Sequence[NewEvent], now: datetime) -> list[Event]:
    """Insert `new` in order and return them with their sequence numbers."""
    if not new:
        return []
    name = conn.dialect.name
    if name == "sqlite" and _RETURNING:
        rows = event_rows(new, now)
        return stored(new, _append_sqlite(conn, rows), now, rows)
    if name == "postgresql":
        rows = event_rows(new, now)
        return stored(new, _append_postgres(conn, rows), now, rows)
    # `._value_`: the enum's `.value` without the property's two calls.
    rows = [{"type": e.type._value_, "task_id": e.task_id, "user_id": e.user_id,
             "data": e.data, "created_at": now} for e in new]
    if name == "sqlite":
        # One executemany; SQLite holds the write lock, so the new rowids are the last n.
        insert_rows(conn, events, rows)
        newest = fast.prepared(conn, "events.max_seq", _MAX_SEQ)
        last = int((newest.scalar(conn) if newest is not None else
                    conn.execute(sa.select(sa.func.max(events.c.seq))).scalar()) or 0)
        seqs = list(range(last - len(rows) + 1, last + 1))
    else:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": EVENT_LOCK_KEY})
        result = conn.execute(
            sa.insert(events).returning(events.c.seq, sort_by_parameter_order=True), rows)
        seqs = [r.seq for r in result.all()]
    return stored(new, seqs, now)


def event_rows(new: Sequence[NewEvent], now: datetime) -> list[dict[str, Any]]:
    """The rows of `new` for the statements below, each one's `data` encoded here, once, as
    the JSON text `json.dumps` gives (the statements pass it on as it is, and each stored
    event keeps it for the streams that send it: `stored`)."""
    join, chunks, dumps = "".join, fast.JSON_CHUNKS, fast.json_dumps
    # `._value_`: the enum's `.value` without the property's two calls; the C encoder itself,
    # not `json_dumps`, which is a Python frame per event.
    return [{"type": e.type._value_, "task_id": e.task_id, "user_id": e.user_id,
             "data": join(chunks(e.data, 0)) if chunks is not None else dumps(e.data),
             "created_at": now} for e in new]


def stored(new: Sequence[NewEvent], seqs: Sequence[int], now: datetime,
           rows: Sequence[dict[str, Any]] = ()) -> list[Event]:
    """`new` as the events stored with `seqs` (ascending, in order), each with its data's
    text from `rows` (`event_rows`), when given."""
    texts = [row["data"] for row in rows] if rows else [None] * len(new)
    return [Event(seq=s, type=e.type, data=e.data, timestamp=now, task_id=e.task_id,
                  user_id=e.user_id, text=text)
            for s, e, text in zip(seqs, new, texts, strict=True)]


EVENT_COLUMNS = ("type", "task_id", "user_id", "data", "created_at")
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)  # INSERT … RETURNING
_SQLITE_ROWS = 500  # rows per INSERT statement (five parameters each)
_TEXT = frozenset({"data"})  # the columns `event_rows` gives as they are to be stored


def _append_sqlite(conn: sa.Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert `rows` (`event_rows`: their data encoded) with one multi-row `INSERT …
    RETURNING seq` per chunk; their seqs, in order. Rows of one statement get ascending seqs
    in the order they are listed, whatever order RETURNING reports them in, so sorting pairs
    them up."""
    stmt = fast.prepared(conn, ("insert", "events", EVENT_COLUMNS, "text"),
                         fast.insert(events, EVENT_COLUMNS), raw=_TEXT)
    assert stmt is not None  # a plain insert with positional parameters always prepares
    seqs: list[int] = []
    for at in range(0, len(rows), _SQLITE_ROWS):
        chunk = rows[at:at + _SQLITE_ROWS]
        params = [value for row in chunk for value in stmt.params(row)]
        found = fast.run_sqlite(conn, _multi_row_sql(stmt.sql, len(chunk)), params).fetchall()
        seqs.extend(sorted(r[0] for r in found))
    return seqs


@functools.lru_cache(maxsize=64)
def _multi_row_sql(single: str, n: int) -> str:
    """`INSERT … VALUES (?, …)` for one row, turned into one for `n` rows with RETURNING."""
    values = single[single.rindex("VALUES ") + len("VALUES "):]
    return single + f", {values}" * (n - 1) + " RETURNING seq"


def _append_postgres(conn: sa.Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Take the event lock and insert `rows` (`event_rows`) in one round trip; their seqs,
    in order."""
    cache = fast.cache_of(conn.dialect)
    plan: tuple[str, list[Any]] | None = cache.get("events.append")
    if plan is None:
        lock, insert, procs = append_sql(conn.dialect, 1)
        plan = cache["events.append"] = (f"WITH {lock} {insert}", procs)
    sql, procs = plan
    arrays = fast.column_arrays(EVENT_COLUMNS, rows, procs)
    return sorted(r[0] for r in conn.exec_driver_sql(sql, (EVENT_LOCK_KEY, *arrays)).all())


def append_sql(dialect: sa.Dialect, first: int) -> tuple[str, str, list[fast.ArrayParam]]:
    """PostgreSQL: the event lock's CTE (`lock AS …`, parameter `$first` is EVENT_LOCK_KEY) and
    the `INSERT … RETURNING seq` of the events (one array per EVENT_COLUMNS from `$first+1`,
    each as the parameter returned makes it; `data` is taken as JSON text, as `event_rows`
    gives it).

    The lock's CTE must produce its row before the join can emit any, so every `nextval` comes
    after the lock; rows are inserted in parameter order, so their seqs ascend in that order
    and sorting what RETURNING gives back pairs them up whatever order it uses.
    """
    params = [fast.array_param(events.c[c].type, dialect, raw=c in _TEXT) for c in EVENT_COLUMNS]
    arrays = ", ".join(f"${i}{p.cast}" for i, p in enumerate(params, first + 1))
    names = ", ".join(EVENT_COLUMNS)
    lock = f"lock AS MATERIALIZED (SELECT pg_advisory_xact_lock(${first}::BIGINT))"
    insert = (f"INSERT INTO events ({names}) SELECT {', '.join('v.' + c for c in EVENT_COLUMNS)} "
              f"FROM lock, unnest({arrays}) WITH ORDINALITY AS v({names}, n) "
              "ORDER BY v.n RETURNING seq")
    return lock, insert, params


async def append_events(
    conn: AsyncConnection, new: Sequence[NewEvent], now: datetime
) -> list[Event]:
    """`append_events_sync` on an async connection."""
    result: list[Event] = await conn.run_sync(append_events_sync, new, now)
    return result


async def events_since(
    conn: AsyncConnection,
    since: int,
    *,
    user_id: uuid.UUID,
    task_id: uuid.UUID | None = None,
    limit: int = 1000,
) -> list[Event]:
    """Events after `since` that `user_id` may see, oldest first, at most `limit`. On SQLite,
    where the data is stored as the text it was encoded to, each event keeps that text for
    the streams that send it (`event_from_row`)."""
    as_text = conn.dialect.name == "sqlite"
    q: sa.Select[Any] = (sa.select(*(c for c in events.c if c.key != "data"),
                               sa.type_coerce(events.c.data, sa.Text).label("data"))
                         if as_text else sa.select(events))
    q = q.where(events.c.seq > since)
    if task_id is not None:
        q = q.where(events.c.task_id == task_id)
    q = q.where(sa.or_(events.c.user_id == user_id, events.c.user_id.is_(None)))
    rows = (await conn.execute(q.order_by(events.c.seq).limit(limit))).all()
    return [event_from_row(r, as_text=as_text) for r in rows]


async def last_seq(conn: AsyncConnection) -> int:
    """The newest sequence number, 0 when the log is empty."""
    value = (await conn.execute(sa.select(sa.func.max(events.c.seq)))).scalar()
    return int(value or 0)


def event_from_row(row: sa.Row[Any], *, as_text: bool = False) -> Event:
    """An event value from an `events` row, whose `data` is decoded or (`as_text`) the JSON
    text it was stored as."""
    m = row._mapping
    data = m["data"]
    text = data if as_text else None
    return Event(seq=m["seq"], type=EventType(m["type"]),
                 data=json.loads(text) if text is not None else data,
                 timestamp=m["created_at"], task_id=m["task_id"], user_id=m["user_id"],
                 text=text)
