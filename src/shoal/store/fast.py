"""Hot statements compiled once per dialect and run with plain parameter tuples.

Executing a Core statement makes SQLAlchemy look up its compiled form by cache key, build the
parameters row by row and run every value through its type's bind processor on each call —
most of the writer's time per batch on SQLite (ADR 0010). The few statements the runtime runs
on every batch (row inserts, version-checked updates, event appends) are compiled here once per
dialect; each call only applies the same bind processors to the rows and hands the SQL and
its parameter tuples to the driver through `Connection.exec_driver_sql` (still inside the
caller's transaction, with SQLAlchemy's error wrapping).

Only positional paramstyles (SQLite's `?`, asyncpg's `$n`) and statements with no Python-side
defaults to compute are prepared; anything else returns None and the caller runs the statement
the ordinary way. On PostgreSQL, where each statement is a round trip, the writer goes further
and sends a batch's updates, and its events, as one statement each (`store.state`,
`store.events`), with the converters `processor` gives.
"""

from __future__ import annotations

import functools
import json
import json.encoder
import sqlite3
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


class Reads(NamedTuple):
    """Where a prepared statement's parameters come from when its rows are not dicts keyed by
    bind name: `unpack`, a statement that names the parts of one row (`item`), say
    `r, version = item`; and each bind name's Python expression over those names. Only fixed
    expressions of the caller's own go in (the code is generated once per statement)."""

    unpack: str
    expressions: Mapping[str, str]


class Prepared:
    """One compiled statement: its SQL text and a function that turns a row (a dict keyed by
    bind name, or what `Reads` describes) into the driver's positional parameters, applying
    the dialect's converters."""

    __slots__ = ("params", "sql")

    def __init__(self, sql: str, getters: list[tuple[str, Processor]],
                 reads: Reads | None = None) -> None:
        self.sql = sql
        self.params = _row_function(getters, reads)

    def execute(self, conn: sa.Connection, rows: Sequence[Any]) -> int:
        """Run the statement once per row (one executemany); returns the driver's row count.
        A row is a dict keyed by bind name, or what the statement's `Reads` unpack."""
        if not rows:
            return 0
        params = [self.params(r) for r in rows]
        if conn.dialect.driver == "pysqlite":
            return int(_sqlite(conn, self.sql, params, many=True).rowcount)
        result = conn.exec_driver_sql(self.sql, params if len(params) != 1 else params[0])
        return int(result.rowcount)

    def scalar(self, conn: sa.Connection, row: Mapping[str, Any] | None = None) -> Any:
        """Run the statement once and return the first column of its first row."""
        params = self.params(row or {})
        if conn.dialect.driver == "pysqlite":
            found = _sqlite(conn, self.sql, params, many=False).fetchone()
            return None if found is None else found[0]
        return conn.exec_driver_sql(self.sql, params).scalar()


def run_sqlite(conn: sa.Connection, sql: str, params: Sequence[Any]) -> Any:
    """Run `sql` once on SQLite inside `conn`'s transaction: straight on the sqlite3
    connection under it (see `_sqlite`), or through `conn` for another driver. Returns
    something with `fetchall()`."""
    if conn.dialect.driver == "pysqlite":
        return _sqlite(conn, sql, params, many=False)
    return conn.exec_driver_sql(sql, tuple(params))


def _sqlite(conn: sa.Connection, sql: str, params: Any, *, many: bool) -> Any:
    """Run `sql` on the sqlite3 connection under `conn`, inside `conn`'s transaction.

    pysqlite's own statement cache keeps the statement prepared; going around SQLAlchemy's
    execution context (a cursor wrapper, result metadata, events) halves the cost of a small
    statement (ADR 0015). A driver error is wrapped as SQLAlchemy would wrap it, so callers
    (the busy check of `Database.run_write`, the runtime's rollback) see the same exceptions.
    """
    # pysqlite's DBAPI connection is the sqlite3 one itself (its dialect's
    # `get_driver_connection` returns it as is): an attribute, where `driver_connection` is
    # three calls through the pool's records. The pool's connection is `conn.connection`, read
    # from the attribute behind that property while it is set (the property is a call).
    raw: Any = (conn._dbapi_connection or conn.connection).dbapi_connection
    try:
        return raw.executemany(sql, params) if many else raw.execute(sql, params)
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


RowFunction = Callable[[Any], tuple[Any, ...]]


def _row_function(getters: list[tuple[str, Processor]], reads: Reads | None = None) -> RowFunction:
    """`def fn(row): return (p0(row["a"]), row["b"], …)`, generated once per statement:
    cheaper per row than a loop over the getters. Only bind names (quoted with repr) go into
    the code, or with `reads`, its fixed expressions.

    The converters `processor` makes are written into the expression itself (see `_inline`),
    so the common values (a UUID, a timestamp already formatted, an empty or null JSON value)
    cost no call at all."""
    env: dict[str, Any] = {}
    items = [_inline(i, f"row[{name!r}]" if reads is None else f"({reads.expressions[name]})",
                     proc, env)
             for i, (name, proc) in enumerate(getters)]
    body = ", ".join(items) + ("," if len(items) == 1 else "")
    unpack = "row = item" if reads is None else reads.unpack
    exec(f"def fn(item):\n    {unpack}\n    return ({body})", env)
    fn: RowFunction = env["fn"]
    return fn


def _inline(i: int, read: str, proc: Processor, env: dict[str, Any]) -> str:
    """The expression that converts `read` (a parameter's value) with `proc`, `p{i}`.

    A UUID becomes its hex digits without a call; a remembered timestamp's text is read from
    the converter's dict, a call only for one not seen yet; a JSON null or empty container is
    its text encoded once. Anything else calls `proc`."""
    if proc is None:
        return read
    env[f"p{i}"] = proc
    v = f"v{i}"
    if proc is _uuid_hex:
        return f'(None if ({v} := {read}) is None else f"{{{v}.int:032x}}")'
    if isinstance(proc, _Timestamp):  # an aware UTC datetime itself (not a date, a subclass)
        env["UTC"], env["DATETIME"] = UTC, datetime
        utc = f"{v}.__class__ is DATETIME and {v}.tzinfo is UTC"
        if proc.text:  # SQLite's text: remembered for a UTC instant seen lately, else made
            return (f"(None if ({v} := {read}) is None else d{i}[{v}] if {utc}"
                    f" and {v} in (d{i} := p{i}.seen) else p{i}({v}))")
        return f"({v} if ({v} := {read}) is None or {utc} else p{i}({v}))"
    if isinstance(proc, _Remembered):
        return f"(d{i}[{v}] if ({v} := {read}) in (d{i} := p{i}.seen) else p{i}({v}))"
    if isinstance(proc, _Json) and proc.direct:  # the converter is `json_dumps`: its C part
        env["JOIN"], env["ENCODE"] = "".join, _C_ENCODER
        return (f"(p{i}.null if ({v} := {read}) is None"
                f" else (JOIN(ENCODE({v}, 0)) if {v} else p{i}.empty_dict) if {v}.__class__ is dict"
                f" else (JOIN(ENCODE({v}, 0)) if {v} else p{i}.empty_list) if {v}.__class__ is list"
                f" else p{i}.encode({v}))")
    if isinstance(proc, _Json):
        return (f"(p{i}.null if ({v} := {read}) is None else p{i}.encode({v}) if {v}"
                f" else p{i}.empty_dict if {v}.__class__ is dict"
                f" else p{i}.empty_list if {v}.__class__ is list else p{i}.encode({v}))")
    return f"p{i}({read})"


def cache_of(dialect: sa.Dialect) -> dict[Hashable, Any]:
    """A cache of compiled things for `dialect`, kept on the dialect itself: dropped with it
    (an engine's dialect lives as long as the engine), and found without a weak mapping's
    lookup (three calls) on every statement of every batch."""
    try:
        cache: dict[Hashable, Any] = dialect._shoal_cache  # type: ignore[attr-defined]
    except AttributeError:
        cache = dialect._shoal_cache = {}  # type: ignore[attr-defined]
    return cache


def prepared(
    conn: sa.Connection, key: Hashable, build: Callable[[sa.Dialect], SQLCompiler],
    raw: frozenset[str] = frozenset(), reads: Reads | None = None,
) -> Prepared | None:
    """The statement `build(dialect)` compiles to, prepared once per dialect and `key`. The
    parameters named in `raw` are passed to the driver as given, not converted (JSON the
    caller has encoded already, say). With `reads`, its rows are what `reads` unpacks (a
    record, say), not dicts: `key` must then name what `reads` is made from too."""
    dialect = conn.dialect
    try:  # `cache_of`, inline: this runs for every statement of every batch
        cache: dict[Hashable, Any] = dialect._shoal_cache  # type: ignore[attr-defined]
    except AttributeError:
        cache = cache_of(dialect)
    try:
        found: Prepared | None = cache[("prepared", key)]
    except KeyError:
        found = cache[("prepared", key)] = _prepare(build(conn.dialect), conn.dialect, raw,
                                                    reads)
    return found


def _prepare(compiled: SQLCompiler, dialect: sa.Dialect, raw: frozenset[str] = frozenset(),
             reads: Reads | None = None) -> Prepared | None:
    if not compiled.positional or compiled.positiontup is None:
        return None
    if compiled.insert_prefetch or compiled.update_prefetch:
        return None  # Python-side defaults would have to be computed per row
    binds = compiled.binds
    getters: list[tuple[str, Processor]] = []
    for name in compiled.positiontup:
        param = binds[name]
        if param.expanding or param.literal_execute or param.callable is not None:
            return None
        getters.append((param.key, None if param.key in raw else processor(param.type, dialect)))
    return Prepared(compiled.string, getters, reads)


def processor(type_: sa.types.TypeEngine[Any], dialect: sa.Dialect) -> Processor:
    """The dialect's bind processor for `type_`; for JSON, one that encodes the common empty
    values (None, {}, []) once instead of on every row."""
    impl = type_.dialect_impl(dialect)
    proc = impl.bind_processor(dialect)
    if (proc is not None and isinstance(impl, sa.Uuid) and impl.as_uuid
            and (not dialect.supports_native_uuid or not impl.native_uuid)):
        return _uuid_hex  # what SQLAlchemy's gives, without the `hex` property's frame
    if proc is not None and isinstance(getattr(impl, "impl", impl), sa.DateTime):
        return _Timestamp.of(proc) or _Remembered(proc)
    if proc is None or not isinstance(impl, sa.JSON):
        return proc
    return _Json(proc)


def _uuid_hex(value: Any) -> Any:
    """A UUID as 32 hex digits (SQLite's text column), as `UUID.hex` gives it."""
    return None if value is None else f"{value.int:032x}"


class _Timestamp:
    """A timestamp converter whose answer for an aware UTC datetime is known without calling
    it: SQLite's text, "2026-11-28 15:47:31.000007" (the UTC instant, naive, with its
    microseconds), which `isoformat` gives in one C call where the converter takes eight
    Python ones; or, on a driver that takes datetimes (asyncpg), the value itself. Which of
    the two (if either) is found by asking the converter, once, about a sample instant.

    The text of the UTC instants made lately is kept (`seen`, one for every column of every
    table: the same text by construction): a batch stamps its rows with a few of them (its
    now on every event and most changes, a lease, a dispatch time from the batch before), and
    looking one up costs a twentieth of `isoformat`. Only exact UTC datetimes are kept and
    looked up: an equal instant in another zone may have another text (a plain `DateTime`
    column on SQLite writes the zone's own wall time)."""

    __slots__ = ("proc", "text")

    _SAMPLE = datetime(2001, 2, 3, 4, 5, 6, 7, tzinfo=UTC)
    seen: ClassVar[dict[datetime, str]] = {}

    def __init__(self, proc: Callable[[Any], Any], *, text: bool) -> None:
        self.proc, self.text = proc, text

    @classmethod
    def of(cls, proc: Callable[[Any], Any]) -> _Timestamp | None:
        """The fast form of `proc`, or None when it answers neither way."""
        answer, sample = proc(cls._SAMPLE), cls._SAMPLE
        if answer == sample.isoformat(" ", "microseconds")[:26]:
            return cls(proc, text=True)
        if isinstance(answer, datetime) and answer == sample and answer.tzinfo is not None:
            return cls(proc, text=False)
        return None

    def __call__(self, value: Any) -> Any:
        if value is None or value.__class__ is not datetime or value.tzinfo is not UTC:
            return self.proc(value)
        if not self.text:
            return value
        seen = self.seen
        text = seen.get(value)
        if text is None:
            text = value.isoformat(" ", "microseconds")[:26]
            if len(seen) >= 64:  # a fresh dict, as `_Remembered` makes (a reader may hold it)
                _Timestamp.seen = seen = {}
            seen[value] = text
        return text


class _Remembered:
    """A converter with its recent answers kept: a batch stamps its rows with a few timestamps
    (the batch's now, leases, start times), and formatting a datetime for SQLite costs
    microseconds each time. Equal instants give equal answers, so the value is the key."""

    __slots__ = ("proc", "seen")

    def __init__(self, proc: Callable[[Any], Any]) -> None:
        self.proc = proc
        self.seen: dict[Any, Any] = {}

    def __call__(self, value: Any) -> Any:
        seen = self.seen
        try:
            return seen[value]
        except KeyError:
            pass
        answer = self.proc(value)
        if len(seen) >= 64:
            # A fresh dict rather than clearing this one: a reader in another thread that
            # found a value in the old one (`_inline`'s expression) still reads it there.
            self.seen = seen = {}
        seen[value] = answer
        return answer


class _Json:
    """The dialect's JSON converter, with the common empty values (None, {}, []) encoded once
    instead of on every row; `direct` when it gives what `json_dumps` gives (the engines'
    serializer, on a driver that takes text), so a row function can run the C encoder itself
    rather than through SQLAlchemy's converter and `json_dumps` (five calls a value)."""

    __slots__ = ("direct", "empty_dict", "empty_list", "encode", "null")

    _SAMPLE = {"a": [1, 2.5, "é\n", None, True], "b": {}}

    def __init__(self, encode: Callable[[Any], Any]) -> None:
        self.encode = encode
        self.null, self.empty_dict, self.empty_list = encode(None), encode({}), encode([])
        self.direct = _C_ENCODER is not None and encode(self._SAMPLE) == json_dumps(self._SAMPLE)

    def __call__(self, value: Any) -> Any:
        if value is None:
            return self.null
        if not value and type(value) is dict:
            return self.empty_dict
        if not value and type(value) is list:
            return self.empty_list
        return self.encode(value)


class ArrayParam:
    """How one column's values go to PostgreSQL as one parameter of an `unnest(…)`.

    For the common column types (UUID, integer, text, JSON, timestamp with time zone, float,
    boolean) the values go as one array literal in text (`{"a","b"}`) that the server casts
    (`$n::text::UUID[]`): asyncpg encodes one string. Sent as an array, asyncpg checks the
    array and every element of it against `collections.abc` classes (`isinstance`, a Python
    frame each) before encoding it; a batch statement sends some seventy elements in 45
    arrays a W2 step, and sending them so took 1.5 to 1.9 times the client CPU (ADR 0044).
    Any other type goes as an array, as before. `proc` is the dialect's converter of one value
    (`processor`), applied before either."""

    __slots__ = ("cast", "literal", "proc")

    def __init__(self, sql_type: str, proc: Processor,
                 literal: Callable[[list[Any]], str] | None) -> None:
        self.proc, self.literal = proc, literal
        self.cast = f"::text::{sql_type}[]" if literal is not None else f"::{sql_type}[]"

    def value(self, values: list[Any]) -> Any:
        """The parameter for `values` (converted with `proc` already)."""
        return values if self.literal is None else self.literal(values)


def array_param(type_: sa.types.TypeEngine[Any], dialect: sa.Dialect, *,
                raw: bool = False) -> ArrayParam:
    """The `ArrayParam` of a column of `type_` on `dialect` (PostgreSQL); with `raw`, its
    values come converted already (JSON the caller encoded, say)."""
    impl = type_.dialect_impl(dialect)
    impl = getattr(impl, "impl", impl)  # a TypeDecorator's: what its converter gives
    literal: Callable[[list[Any]], str] | None = None
    if isinstance(impl, sa.Uuid):
        literal = _uuid_literal
    elif isinstance(impl, sa.Boolean):
        literal = _bool_literal
    elif isinstance(impl, sa.Integer):
        literal = _int_literal
    elif isinstance(impl, sa.Float):
        literal = _float_literal
    elif isinstance(impl, sa.DateTime) and impl.timezone:
        literal = _timestamp_literal
    elif isinstance(impl, sa.String | sa.JSON):  # Text, Enum, JSONB: text by now (`proc`)
        literal = _text_literal
    return ArrayParam(type_.compile(dialect=dialect),
                      None if raw else processor(type_, dialect), literal)


def integer_param(dialect: sa.Dialect) -> ArrayParam:
    """The `ArrayParam` of an INTEGER that is no column's (a row's expected version)."""
    return array_param(sa.Integer(), dialect)


# PostgreSQL's array literal: `{e1,e2}`, NULL unquoted; a quoted element ("…") takes any
# character, with `\` and `"` escaped by a backslash. UUIDs and numbers need no quotes; the
# rest are quoted (text may hold commas, braces, spaces or the word NULL itself). Each type's
# element is written once, below, as an expression of its value `@` (not None); its literal
# function (`ArrayParam.literal`) and `column_arrays`' generated code are both made from it.

_EDGE_YEARS = frozenset({datetime.min.year, datetime.max.year})


def _timestamp_text(v: datetime) -> str:
    aware = v if v.tzinfo is not None else v.astimezone(UTC)
    if aware == datetime.max.replace(tzinfo=UTC):
        return "infinity"
    if aware == datetime.min.replace(tzinfo=UTC):
        return "-infinity"
    return '"' + aware.isoformat() + '"'


_ELEMENT_ENV: dict[str, Any] = {"UUID": uuid.UUID, "UTC": UTC, "TS_TEXT": _timestamp_text,
                                "EDGE_YEARS": _EDGE_YEARS}
_ELEMENTS: dict[Callable[[list[Any]], str], str] = {}  # a literal function → its element


def _literal(element: str) -> Callable[[list[Any]], str]:
    """The literal of a list of values whose element is `element` (a fixed expression above)."""
    item = element.replace("@", "v")
    fn: Callable[[list[Any]], str] = eval(  # only the fixed expressions below go in
        f"lambda values: '{{' + ','.join([('NULL' if v is None else {item}) for v in values])"
        " + '}'", dict(_ELEMENT_ENV))
    _ELEMENTS[fn] = element
    return fn


# A UUID as its 32 hex digits, which PostgreSQL reads as it reads the hyphenated form.
_uuid_literal = _literal("(@ if @.__class__ is str else f'{@.int:032x}' if @.__class__ is UUID"
                         " else str(@))")
_int_literal = _literal("(f'{@}' if @.__class__ is int else str(int(@)))")
_bool_literal = _literal("('t' if @ else 'f')")
_float_literal = _literal(r"""('"' + repr(float(@)) + '"')""")
# An aware datetime in ISO form, with its offset; a naive one is taken as local time and given
# as UTC; the least and the greatest datetime as -infinity and infinity (what asyncpg's own
# encoder does with each).
_timestamp_literal = _literal(r"""(TS_TEXT(@) if @.year in EDGE_YEARS else '"' + (@ if"""
                              r""" @.tzinfo is not None else @.astimezone(UTC)).isoformat()"""
                              r""" + '"')""")
_text_literal = _literal(r"""('"' + @.replace('\\', '\\\\').replace('"', '\\"') + '"')""")


def column_arrays(
    keys: Sequence[str], rows: Sequence[Mapping[str, Any]], params: Sequence[ArrayParam]
) -> list[Any]:
    """One parameter per key of `rows`' converted values, for a PostgreSQL
    `unnest($1::text::t[], …)`: each an array literal or a list (`ArrayParam`), as
    `ArrayParam.value` of each column's values converted with its `proc` would give."""
    return _arrays_function(tuple(keys), tuple(params))(rows)


@functools.lru_cache(maxsize=512)  # (keys, params): the plans' parameters, a few shapes each
def _arrays_function(
    keys: tuple[str, ...], params: tuple[ArrayParam, ...]
) -> Callable[[Sequence[Mapping[str, Any]]], list[Any]]:
    """`column_arrays` for these keys and parameters, generated once: each value converted
    and written as its literal's element (`_ELEMENTS`) inline, so that a batch of one row (a
    chain's step) costs one call in all rather than four or five a column, and a longer one a
    comprehension and a join a column rather than four calls. Only the keys (quoted with repr)
    and the fixed elements go into the code."""
    if len(keys) != len(params):
        raise ValueError(f"{len(keys)} keys for {len(params)} parameters")
    env = dict(_ELEMENT_ENV)
    one: list[str] = []  # the one-row batch: each column's parameter
    many: list[str] = []  # any other: each column's, a comprehension over the rows
    for i, (key, param) in enumerate(zip(keys, params, strict=True)):
        value = _inline(i, f"row[{key!r}]", param.proc, env)
        if param.literal is None:
            one.append(f"[{value}]")
            many.append(f"[{value} for row in rows]")
            continue
        element = _ELEMENTS[param.literal].replace("@", f"c{i}")
        item = f"('NULL' if (c{i} := {value}) is None else {element})"
        one.append("'{' + " + item + " + '}'")
        many.append("'{' + ','.join([" + item + " for row in rows]) + '}'")
    lines = ["def fn(rows):",
             "    if len(rows) == 1:",
             "        row = rows[0]",
             f"        return [{', '.join(one)}]",
             f"    return [{', '.join(many)}]"]
    exec("\n".join(lines), env)
    fn: Callable[[Sequence[Mapping[str, Any]]], list[Any]] = env["fn"]
    return fn


@functools.cache  # the same builder each time: callers make one per statement they run
def insert(table: sa.Table, keys: tuple[str, ...]) -> Callable[[sa.Dialect], SQLCompiler]:
    """A builder for `INSERT INTO table (keys) VALUES (…)`, one parameter per key."""

    def build(dialect: sa.Dialect) -> SQLCompiler:
        compiled = sa.insert(table).compile(dialect=dialect, column_keys=list(keys))
        assert isinstance(compiled, SQLCompiler)
        return compiled

    return build


@functools.cache  # a statement hashes by identity: the callers pass constants
def statement(stmt: sa.Executable) -> Callable[[sa.Dialect], SQLCompiler]:
    """A builder for a statement whose parameters are all named `bindparam`s."""

    def build(dialect: sa.Dialect) -> SQLCompiler:
        compiled = stmt.compile(dialect=dialect)  # type: ignore[attr-defined]
        assert isinstance(compiled, SQLCompiler)
        return compiled

    return build


def _unserializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder `json.dumps` builds afresh on every call, with `json.dumps`'s defaults, built
# once: the same text for the same value, without four Python frames and an encoder object per
# call. Rows carry a few small JSON values each, so this is most of what encoding them costs.
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_C_ENCODER = (_MAKE_ENCODER(None, _unserializable, json.encoder.encode_basestring_ascii, None,
                            ": ", ", ", False, False, True)
              if _MAKE_ENCODER is not None else None)


JSON_CHUNKS: Callable[[Any, int], Sequence[str]] | None = _C_ENCODER
"""The C encoder `json_dumps` joins the chunks of: `"".join(JSON_CHUNKS(value, 0))` is
`json.dumps(value)`, with no Python frame (None without the C module)."""


def json_dumps(value: Any) -> str:
    """`json.dumps(value)`, faster: the engines' JSON serializer (`Database.connect`)."""
    if _C_ENCODER is None:  # no C accelerator in this Python
        return json.dumps(value)
    return "".join(_C_ENCODER(value, 0))
