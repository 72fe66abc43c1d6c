"""The writer's prepared statements store exactly what SQLAlchemy's own statements store."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg

from shoal.engine.model import SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.states import SubtaskStatus
from shoal.store import fast
from shoal.store.convert import subtask_values, subtasks
from shoal.store.db import Database
from shoal.store.models import JSONType, UTCDateTime
from shoal.store.state import insert_rows

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _subtask(key: str, task_id: uuid.UUID) -> SubtaskRecord:
    return SubtaskRecord(
        id=uuid.uuid4(), task_id=task_id, key=key, role="coder", name=key, description="d",
        status=SubtaskStatus.QUEUED, created_at=NOW, dependencies=(uuid.uuid4(),),
        options=StepOptions(tool={"a": [1, {"b": None}]}), output=None, evaluation={},
        not_before=None,
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


def test_a_statement_fed_records_gives_what_it_gives_fed_dicts() -> None:
    """`fast.Reads`: the parameters read from a record by expressions are the tuple its row
    of values gives, converters and all, on both dialects."""
    stmt = (sa.update(subtasks).where(subtasks.c.id == sa.bindparam("b_id"))
            .values(status=sa.bindparam("b_status"), output=sa.bindparam("b_output"),
                    dependencies=sa.bindparam("b_deps"), created_at=sa.bindparam("b_at")))
    reads = fast.Reads("r, n = item", {
        "b_id": "r.id", "b_status": "r.status._value_", "b_output": "r.output",
        "b_deps": "[str(d) for d in r.dependencies]", "b_at": "r.created_at + n"})
    record = _subtask("k", uuid.uuid4())
    values = {"b_id": record.id, "b_status": "queued", "b_output": None,
              "b_deps": [str(d) for d in record.dependencies],
              "b_at": record.created_at + timedelta(seconds=1)}
    for dialect in (sqlite.dialect(), asyncpg.dialect()):
        compiled = stmt.compile(dialect=dialect)
        by_dict, by_record = fast._prepare(compiled, dialect), fast._prepare(compiled, dialect,
                                                                          reads=reads)
        assert by_dict is not None
        assert by_record is not None
        assert by_record.params((record, timedelta(seconds=1))) == by_dict.params(values)


def test_json_dumps_writes_what_json_dumps_writes() -> None:
    """The engines' serializer gives `json.dumps`'s exact text, and its error for a value JSON
    cannot hold."""
    values: list[Any] = [
        None, 0, -1.5, 1e-7, float("nan"), float("inf"), True, "", "héllo \"q\"\n\t\x00",
        [], {}, [1, "a", None, [2.5]], {"a": {"b": [None, False]}, "c": "é"}, {1: "int key"},
        {"text": "x" * 300, "files": [{"path": "a.py", "size": 3, "sha256": "0" * 64}]},
    ]
    for value in values:
        assert fast.json_dumps(value) == json.dumps(value)
    with pytest.raises(TypeError, match="UUID is not JSON serializable"):
        fast.json_dumps({"id": uuid.uuid4()})


async def test_every_engine_serializes_json_with_it(db: Database) -> None:
    """Reads and writes, and the writer's own engine, all encode JSON the fast way."""
    engines = [db.engine.sync_engine, db._write_engine.sync_engine]
    if db._sync_engine is not None:
        engines.append(db._sync_engine)
    assert all(e.dialect._json_serializer is fast.json_dumps for e in engines)  # type: ignore[attr-defined]


def test_inlined_converters_give_what_calling_them_gives() -> None:
    """A row function writes the UUID, timestamp and JSON converters into its code: the same
    parameters as calling each converter, past the timestamps' memory too."""
    dialect = sqlite.dialect()
    convert = [("id", fast.processor(sa.Uuid(), dialect)),
               ("at", fast.processor(sa.DateTime(timezone=True), dialect)),
               ("doc", fast.processor(JSONType, dialect))]
    row_function = fast._row_function(convert)
    docs: list[Any] = [None, {}, [], {"a": 1}, [1], 0, "", False]
    ids: list[uuid.UUID | None] = [None, uuid.uuid4(), uuid.UUID(int=1)]
    for n in range(150):
        row = {"id": ids[n % 3], "at": datetime(2026, 1, 1, n // 60, n % 60, tzinfo=UTC)
               if n % 7 else None, "doc": docs[n % len(docs)]}
        expected = tuple(row[key] if proc is None else proc(row[key]) for key, proc in convert)
        assert row_function(row) == expected
        assert row_function(row) == expected  # remembered the second time


class _Later(datetime):
    """A datetime of another class, whose text the row function must not guess."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "later"


def test_timestamps_and_json_are_converted_as_sqlalchemy_converts_them() -> None:
    """The row functions' own forms of the timestamp and JSON converters (`isoformat`, the C
    encoder) give SQLAlchemy's parameters on both dialects, for every kind of value; the
    converters called as functions do too."""
    east = timezone(timedelta(hours=5, minutes=30))
    stamps: list[datetime | None] = [
        None, NOW, NOW.replace(microsecond=0), datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime(2026, 3, 4, 5, 6, 7),
        datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=east), NOW.replace(fold=1)]
    docs: list[Any] = [None, {}, [], {"a": [1, 2.5, "é\n\x00", None, True]}, [{"b": {}}], 0, "",
                       False, {"": None}, "text", 3.25]
    # The same instant in another zone after a UTC one: a plain DateTime column on SQLite
    # writes each zone's own wall time, so a remembered text must not answer for it.
    plain: list[Any] = [*stamps, date(2026, 3, 4), _Later(2026, 3, 4, 5, 6, 7, 8, tzinfo=UTC),
                        NOW, NOW.astimezone(east), NOW.astimezone(east).replace(tzinfo=None)]
    for dialect in (sqlite.dialect(), asyncpg.dialect()):
        cases = [(UTCDateTime(), stamps), (JSONType, docs), (sa.DateTime(timezone=True), plain)]
        for type_, values in cases:
            ours = fast.processor(type_, dialect)
            theirs = type_.dialect_impl(dialect).bind_processor(dialect)
            if theirs is None:
                assert ours is None
                continue
            assert ours is not None
            row_function = fast._row_function([("v", ours)])
            for value in [*values, *values]:  # the second time, what was remembered
                assert row_function({"v": value}) == (theirs(value),), (dialect.name, value)
                assert ours(value) == theirs(value)
    sqlite_stamp = fast.processor(UTCDateTime(), sqlite.dialect())
    sqlite_json = fast.processor(JSONType, sqlite.dialect())
    assert isinstance(sqlite_stamp, fast._Timestamp)
    assert sqlite_stamp.text
    assert isinstance(sqlite_json, fast._Json)
    assert sqlite_json.direct


async def test_the_sqlite_path_runs_on_the_driver_connection(db: Database) -> None:
    """On pysqlite, the DBAPI connection the writer runs its statements on directly is the
    sqlite3 connection itself (what `driver_connection` gives, without its calls)."""

    def raw_connections(conn: sa.Connection) -> tuple[str, Any, Any]:
        return (conn.dialect.driver, conn.connection.dbapi_connection,
                conn.connection.driver_connection)

    driver, dbapi, native = await db.run_write(raw_connections)
    if driver != "pysqlite":
        pytest.skip(f"the direct path is pysqlite's only, not {driver}")
    assert dbapi is native


_NASTY_TEXT = ["", "plain", 'a "quoted" word', "back\\slash\\", "\\\"", "{braces},comma", "NULL",
               "null", "  spaced  ", "line\nbreak\ttab", "é ü 中文 \u2028 🐟", "'single'", None]
_ARRAY_CASES: list[tuple[sa.types.TypeEngine[Any], list[Any]]] = [
    (sa.Uuid(), [uuid.uuid4(), None, uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]),
    (sa.Integer(), [0, -1, 2**31 - 1, -(2**31), None, True]),
    (sa.BigInteger(), [2**62, -(2**63), None]),
    (sa.Boolean(), [True, False, None]),
    (sa.Float(), [0.0, -0.0, 1e-07, 1.5e300, -2.25, 0.1 + 0.2, float("inf"), float("-inf"),
                  float("nan"), None]),
    (UTCDateTime(), [NOW, datetime(1, 1, 1, tzinfo=UTC),
                     datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                     NOW.astimezone(timezone(timedelta(hours=-7, minutes=-30))), None]),
    (sa.DateTime(timezone=True), [datetime(2026, 1, 2, 3, 4, 5), NOW, datetime.max,
                                  datetime.min.replace(tzinfo=UTC), None]),
    (sa.String(20), _NASTY_TEXT),
    (sa.Text(), _NASTY_TEXT),
    (JSONType, [{"a": 'x"y\\z', "b": [1, None, "é\n"]}, [], {}, None, "text", 3.5, [{"k": "}"}]]),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("type_", "values"), _ARRAY_CASES, ids=lambda c: getattr(
    c, "__visit_name__", None) or type(c).__name__)
async def test_an_array_literal_stores_what_the_array_stores(
    pg_db: Database, type_: sa.types.TypeEngine[Any], values: list[Any]
) -> None:
    """A column's values sent as one array literal in text (`ArrayParam`) reach PostgreSQL as
    the same values as when asyncpg encodes them as an array, element by element: quotes,
    backslashes, braces, commas, the word NULL, spaces, non-ASCII, extreme numbers and
    instants, other offsets. An empty array too."""
    param = fast.array_param(type_, pg_db.engine.dialect)
    assert param.literal is not None, "each of these types goes as a literal"
    as_array = fast.ArrayParam(type_.compile(dialect=pg_db.engine.dialect), param.proc, None)
    for sample in (values, []):
        literal_value, = fast.column_arrays(["v"], [{"v": v} for v in sample], [param])
        array_value, = fast.column_arrays(["v"], [{"v": v} for v in sample], [as_array])
        assert isinstance(literal_value, str)
        assert isinstance(array_value, list)
        got = await pg_db.fetch_row_autocommit(
            f"SELECT $1{param.cast}::text, $2{as_array.cast}::text, "
            f"$1{param.cast} IS NOT DISTINCT FROM $2{as_array.cast}", [literal_value, array_value])
        assert got[0] == got[1]
        assert got[2] is True  # (PostgreSQL's NaN equals NaN)


@pytest.mark.parametrize(("type_", "values"), _ARRAY_CASES, ids=lambda c: getattr(
    c, "__visit_name__", None) or type(c).__name__)
def test_a_one_row_batch_gives_the_element_a_longer_one_does(
    type_: sa.types.TypeEngine[Any], values: list[Any]
) -> None:
    """A batch of one row has a path of its own in the generated `column_arrays`: each value
    alone gives the element it gives among others (the test above checks those against
    PostgreSQL), and a column that goes as an array gives a one-element list."""
    dialect = asyncpg.dialect()
    param = fast.array_param(type_, dialect)
    as_array = fast.ArrayParam(type_.compile(dialect=dialect), param.proc, None)
    rows = [{"v": v} for v in values]
    many, many_list = fast.column_arrays(["v", "v"], rows, [param, as_array])
    elements = []
    for row in rows:
        one, one_list = fast.column_arrays(["v", "v"], [row], [param, as_array])
        assert one.startswith("{")
        assert one.endswith("}")
        assert len(one_list) == 1
        elements.append(one[1:-1])
    assert many == "{" + ",".join(elements) + "}"
    assert len(many_list) == len(values)


def test_columns_keep_their_order_and_their_own_converters() -> None:
    """Each parameter is its own key's, converted by its own column's converter."""
    dialect = asyncpg.dialect()
    ids = [uuid.uuid4(), uuid.uuid4()]
    params = [fast.array_param(t, dialect) for t in (sa.Uuid(), sa.Integer(), sa.Text())]
    rows = [{"id": ids[0], "n": 1, "t": 'a"b'}, {"id": ids[1], "n": None, "t": None}]
    assert fast.column_arrays(["t", "id", "n"], rows, [params[2], params[0], params[1]]) == [
        '{"a\\"b",NULL}', f"{{{ids[0].hex},{ids[1].hex}}}", "{1,NULL}"]
    assert fast.column_arrays(["n", "t"], rows[:1], [params[1], params[2]]) == [
        "{1}", '{"a\\"b"}']
    with pytest.raises(ValueError, match="2 keys for 1 parameters"):
        fast.column_arrays(["n", "t"], rows, [params[1]])


def test_a_type_with_no_literal_goes_as_an_array() -> None:
    """A type the literals do not cover is sent as an array, cast as before."""
    dialect = asyncpg.dialect()
    param = fast.array_param(sa.Date(), dialect)
    assert param.literal is None
    assert param.cast == "::DATE[]"
    assert param.value([date(2026, 1, 2)]) == [date(2026, 1, 2)]
    naive = fast.array_param(sa.DateTime(), dialect)  # without a time zone: as before
    assert naive.literal is None
