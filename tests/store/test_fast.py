"""The writer's prepared statements store exactly what SQLAlchemy's own statements store."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg

from shoal.engine.model import SubtaskRecord
from shoal.states import SubtaskStatus
from shoal.store import fast
from shoal.store.convert import subtask_values, subtasks
from shoal.store.db import Database
from shoal.store.models import JSONType
from shoal.store.state import insert_rows

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _subtask(key: str, task_id: uuid.UUID) -> SubtaskRecord:
    return SubtaskRecord(
        id=uuid.uuid4(), task_id=task_id, key=key, role="coder", name=key, description="d",
        status=SubtaskStatus.QUEUED, created_at=NOW, dependencies=(uuid.uuid4(),),
        options={"a": [1, {"b": None}]}, output=None, evaluation={}, not_before=None,
    )


async def test_prepared_insert_stores_what_sqlalchemy_stores(db: Database) -> None:
    """Same raw column values (UUIDs, timestamps, JSON null and empty) either way."""
    task_id = uuid.uuid4()
    ours, theirs = _subtask("ours", task_id), _subtask("theirs", task_id)

    def write(conn: sa.Connection) -> list[Any]:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        else:
            conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
        conn.execute(sa.insert(subtasks), [subtask_values(theirs)])
        insert_rows(conn, subtasks, [subtask_values(ours)])
        return list(conn.exec_driver_sql("SELECT * FROM subtasks ORDER BY key").all())

    rows = await db.run_write(write)
    assert [r[2] for r in rows] == ["ours", "theirs"]
    differ = {name for name, a, b in zip(subtasks.columns.keys(), rows[0], rows[1], strict=True)
              if a != b}
    assert differ == {"id", "key", "name", "dependencies"}


def test_json_processor_matches_the_dialects() -> None:
    """The JSON converter with its cached empty values encodes like the dialect's own."""
    for dialect in (sqlite.dialect(), asyncpg.dialect()):
        ours = fast.processor(JSONType, dialect)
        theirs = JSONType.dialect_impl(dialect).bind_processor(dialect)
        assert ours is not None
        assert theirs is not None
        for value in (None, {}, [], {"a": 1}, [1], 0, "", False, {"": None}):
            assert ours(value) == theirs(value)


def test_row_function_applies_converters_in_order() -> None:
    """A generated row function reads every key, converting where asked."""
    row = fast._row_function([("a", None), ("b'c", str.upper), ("d", None)])
    assert row({"a": 1, "b'c": "x", "d": None}) == (1, "X", None)
    assert fast._row_function([("only", None)])({"only": 5}) == (5,)
