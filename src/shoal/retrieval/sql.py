"""Read-only SQL over a task's data sources (CSV, Parquet, SQLite, Excel files), in DuckDB.

`open_catalog(files)` makes one in-memory DuckDB database where each data file is a table named
after the file (`sales.csv` → `sales`): a CSV or Parquet file is a view that reads it, and each
table of a SQLite database (read with Python's `sqlite3`, read-only, since DuckDB's SQLite
extension is not bundled) is copied into a schema named after the file (`shop.db` →
`shop.orders`); each worksheet of an Excel workbook (read by openpyxl:
`shoal.artifacts.office`, its header row found or its columns named A, B, …) is copied likewise
(`sales.xlsx`'s sheet "2024" → `sales.sheet_2024`). Then the database is closed to the world:
file access is allowed only to those files (`allowed_paths`), external access is disabled
(`enable_external_access = false`), no extension is installed or loaded, nothing spills to disk,
and `lock_configuration` keeps it so.

`query_data(catalog, sql)` runs one statement if `check_statement` lets it: exactly one
`SELECT` (or `WITH … SELECT`, `FROM …`, `VALUES`, `DESCRIBE`), found with DuckDB's own parser
(`extract_statements`, and `json_serialize_sql` for the tree), reading only the catalog's tables,
its own CTEs and `range`/`generate_series`/`unnest`: no file, no `ATTACH`, `COPY`, `PRAGMA`,
`SET`, no writes. It is interrupted after `seconds`, and returns at most `row_limit` rows, saying
whether they are ordered (an ORDER BY at the top level), the LIMIT, and the tables read.
A refusal or a failed query is `InvalidInput` whose message tells the agent what to send instead;
a query past its time is `ToolError` (code `query_timeout`).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import decimal
import json
import math
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote

import duckdb

from shoal.artifacts.office import read_workbook
from shoal.artifacts.sources import SourceKind
from shoal.errors import InvalidInput, ShoalError, ToolError
from shoal.retrieval.sentences import shorten

DATA_KINDS = frozenset({SourceKind.csv, SourceKind.parquet, SourceKind.sqlite,
                        SourceKind.xlsx})
"""The kinds of source `query_data` reads."""

ROW_LIMIT = 200
"""The most rows a query returns (the rest are counted as cut)."""

SECONDS = 10.0
"""How long a query may run before it is interrupted."""

MAX_COPIED_ROWS = 1_000_000
"""The most rows copied from one SQLite table or worksheet."""

MAX_CELL_CHARS = 1000
"""Longer text values are shortened in results (at a sentence or word, with `…`), so that a
row stays readable."""

_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
_SYSTEM_SCHEMAS = frozenset({"information_schema", "pg_catalog"})
_FILE_FUNCTION = re.compile(r"^(read_|parquet_|sniff_|glob$|json_execute|sqlite_|query$|"
                            r"query_table$|getenv$)")
_DESCRIBED = {"SET": "SET", "VARIABLE_SET": "SET", "PRAGMA": "PRAGMA", "ATTACH": "ATTACH",
              "DETACH": "DETACH", "COPY": "COPY", "COPY_DATABASE": "COPY", "EXPORT": "EXPORT",
              "LOAD": "LOAD or INSTALL", "EXTENSION": "LOAD or INSTALL", "CALL": "CALL",
              "EXPLAIN": "EXPLAIN", "MULTI": "PIVOT (and other multi-step)"}


@dataclass(frozen=True, slots=True)
class DataFile:
    """A data source in the workspace: its name, where it is, and its kind."""

    name: str
    path: Path
    kind: SourceKind


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a table and its DuckDB type."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class Table:
    """A table the agent can query: its name as written in SQL, the file it comes from, its
    columns and row count; `note` says what was left out (rows past `MAX_COPIED_ROWS`)."""

    name: str
    source: str
    columns: tuple[Column, ...]
    rows: int
    note: str = ""


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What a query answered: the SQL that ran, its columns, rows (JSON-ready values), whether
    rows past `row_limit` were cut, and how long it took; whether its rows are ordered (an
    ORDER BY at the statement's top level), its top-level LIMIT (when a constant), and the
    tables it reads (with their sizes)."""

    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool
    seconds: float
    ordered: bool = False
    limit: int | None = None
    tables: tuple[Table, ...] = ()


class DataCatalog:
    """The task's data files as tables in one locked-down, in-memory DuckDB database."""

    def __init__(self, db: duckdb.DuckDBPyConnection, tables: list[Table],
                 problems: list[str]) -> None:
        self._db = db
        self.tables = tuple(tables)
        self.problems = tuple(problems)
        """Data files that could not be read, each with the reason."""

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to the database (same data, same locked settings)."""
        return self._db.cursor()

    def names(self) -> set[tuple[str, str]]:
        """Every (schema, table) a query may read; `main` is the schema of CSV/Parquet ones."""
        return {_split_name(t.name) for t in self.tables}


def table_names(files: Sequence[DataFile]) -> dict[str, str]:
    """The SQL name of each data file (by file name): its stem in lower case, `[a-z0-9_]`, not
    starting with a digit; `_2`, `_3`… when two files would share one."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for file in files:
        base = re.sub(r"[^a-z0-9_]+", "_", PurePath(file.name).stem.lower()).strip("_") or "data"
        if base[0].isdigit():
            base = f"t_{base}"
        name, n = base, 1
        while name in taken or name in _SYSTEM_SCHEMAS or name == "main":
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        out[file.name] = name
    return out


async def open_catalog(files: Sequence[DataFile]) -> DataCatalog:
    """The data files (others are ignored) as tables; a file that cannot be read is left out and
    named in `DataCatalog.problems`."""
    return await asyncio.to_thread(_open, [f for f in files if f.kind in DATA_KINDS])


def _open(files: list[DataFile]) -> DataCatalog:
    db = duckdb.connect(":memory:", config={
        "autoinstall_known_extensions": False, "autoload_known_extensions": False,
        "allow_community_extensions": False, "allow_persistent_secrets": False,
        "python_enable_replacements": False, "memory_limit": "2GB", "threads": 2})
    tables: list[Table] = []
    problems: list[str] = []
    readable: list[str] = []
    names = table_names(files)
    for file in files:
        name = names[file.name]
        try:
            if file.kind is SourceKind.sqlite:
                tables.extend(_copy_sqlite(db, name, file))
            elif file.kind is SourceKind.xlsx:
                tables.extend(_copy_workbook(db, name, file))
            else:
                tables.append(_file_view(db, name, file))
                readable.append(str(file.path.resolve()))
        except (duckdb.Error, sqlite3.Error, OSError, ShoalError) as exc:
            problems.append(f"{file.name}: {_first_line(exc)}")
    # Order matters: each setting below may no longer be changed once external access is off.
    db.execute("SET temp_directory = ''")
    db.execute(f"SET allowed_paths = [{', '.join(_literal(p) for p in readable)}]")
    db.execute("SET enable_external_access = false")
    db.execute("SET lock_configuration = true")
    return DataCatalog(db, tables, problems)


def _file_view(db: duckdb.DuckDBPyConnection, name: str, file: DataFile) -> Table:
    reader = "read_parquet" if file.kind is SourceKind.parquet else "read_csv"
    db.execute(f"CREATE VIEW {_ident(name)} AS SELECT * FROM "
               f"{reader}({_literal(str(file.path.resolve()))})")
    return _described(db, name, file.name)


def _described(db: duckdb.DuckDBPyConnection, name: str, source: str, note: str = "") -> Table:
    quoted = ".".join(_ident(part) for part in name.split("."))
    columns = tuple(Column(str(row[0]), str(row[1]))
                    for row in db.execute(f"DESCRIBE {quoted}").fetchall())
    count = db.execute(f"SELECT count(*) FROM {quoted}").fetchone()
    return Table(name, source, columns, int(count[0]) if count else 0, note)


def _copy_sqlite(db: duckdb.DuckDBPyConnection, schema: str, file: DataFile) -> list[Table]:
    """Copy each table and view of a SQLite file into `schema`, typed by its values."""
    tables: list[Table] = []
    uri = f"file:{quote(str(file.path.resolve()))}?mode=ro&immutable=1"
    with closing(sqlite3.connect(uri, uri=True)) as source:
        source.execute("PRAGMA trusted_schema = OFF")  # its views and triggers call nothing
        names = [str(n) for (n,) in source.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE "
            "'sqlite\\_%' ESCAPE '\\' ORDER BY name")]
        db.execute(f"CREATE SCHEMA {_ident(schema)}")
        taken: set[str] = set()
        for original in names:
            table = _unique(re.sub(r"\W+", "_", original).strip("_").lower() or "t", taken)
            cursor = source.execute(f"SELECT * FROM {_ident(original)}")
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchmany(MAX_COPIED_ROWS + 1)
            note = (f"only the first {MAX_COPIED_ROWS:,} rows were read"
                    if len(rows) > MAX_COPIED_ROWS else "")
            _insert_columns(db, f"{schema}.{table}", columns, rows[:MAX_COPIED_ROWS])
            tables.append(_described(db, f"{schema}.{table}",
                                     f"{file.name} ({original})", note))
    return tables


def _copy_workbook(db: duckdb.DuckDBPyConnection, schema: str, file: DataFile) -> list[Table]:
    """Copy each worksheet of an Excel workbook into `schema`, typed by its values; a sheet's
    source names the sheet and the rows it came from (`sales.xlsx (sheet "2024", rows 2-9)`)."""
    try:
        sheets = read_workbook(file.path, max_rows=MAX_COPIED_ROWS)
    except Exception as exc:  # openpyxl on a file that changed since it was validated
        raise InvalidInput(f"the workbook cannot be read ({_first_line(exc)})") from None
    db.execute(f"CREATE SCHEMA {_ident(schema)}")
    taken: set[str] = set()
    tables: list[Table] = []
    for sheet in sheets:
        table = re.sub(r"\W+", "_", sheet.name).strip("_").lower() or "sheet"
        table = _unique(f"sheet_{table}" if table[0].isdigit() else table, taken)
        note = (f"only the first {MAX_COPIED_ROWS:,} of its {sheet.total:,} rows were read"
                if sheet.total > len(sheet.rows) else "")
        _insert_columns(db, f"{schema}.{table}", list(sheet.columns), list(sheet.rows))
        tables.append(_described(db, f"{schema}.{table}",
                                 f'{file.name} (sheet "{sheet.name}", {sheet.span()})', note))
    return tables


def _insert_columns(db: duckdb.DuckDBPyConnection, name: str, columns: list[str],
                    rows: list[tuple[Any, ...]]) -> None:
    """Create table `name` and fill it column by column (`unnest` of one list per column)."""
    quoted = ".".join(_ident(part) for part in name.split("."))
    values = [list(column) for column in zip(*rows, strict=True)] if rows else [
        [] for _ in columns]
    typed = [_typed_column(column) for column in values]
    names = _unique_columns(columns)
    db.execute(f"CREATE TABLE {quoted} ("
               + ", ".join(f"{_ident(n)} {kind}" for n, (kind, _) in zip(names, typed,
                                                                          strict=True)) + ")")
    if rows:
        selects = ", ".join(f"unnest(${i + 1}::{kind}[])" for i, (kind, _) in enumerate(typed))
        db.execute(f"INSERT INTO {quoted} SELECT {selects}", [column for _, column in typed])


def _typed_column(values: list[Any]) -> tuple[str, list[Any]]:
    """The DuckDB type for a column's values from SQLite or a worksheet (either lets one column
    hold several types: such a column becomes text), and the values converted to it."""
    kinds = {type(v) for v in values if v is not None}
    if kinds and kinds <= {bool}:
        return "BOOLEAN", values
    if kinds and kinds <= {dt.datetime}:
        return "TIMESTAMP", values
    if kinds and kinds <= {dt.date}:
        return "DATE", values
    if kinds and kinds <= {dt.time}:
        return "TIME", values
    if kinds <= {int} and all(v is None or -(2**63) <= v < 2**63 for v in values):
        return "BIGINT", values
    if kinds <= {int, float}:
        return "DOUBLE", [None if v is None else float(v) for v in values]
    if kinds == {bytes}:
        return "BLOB", values
    return "VARCHAR", [None if v is None else v.hex() if isinstance(v, bytes) else str(v)
                       for v in values]


def _unique(name: str, taken: set[str]) -> str:
    base, n = name, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _unique_columns(columns: list[str]) -> list[str]:
    taken: set[str] = set()
    return [_unique(c or "column", taken) for c in columns]


# ---- checking a statement ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Statement:
    """A checked statement: its SQL, whether it orders its rows and limits them (at its top
    level), and the catalog's tables it reads."""

    query: str
    ordered: bool
    limit: int | None
    reads: frozenset[tuple[str, str]]


def check_statement(catalog: DataCatalog, sql: str) -> str:
    """The one statement of `sql` if `query_data` may run it, else `InvalidInput` saying why
    and what to send instead."""
    return _checked(catalog, sql).query


def _checked(catalog: DataCatalog, sql: str) -> _Statement:
    db = catalog.cursor()
    try:
        statements = db.extract_statements(sql)
    except duckdb.Error as exc:
        raise InvalidInput(f"The SQL does not parse: {_first_line(exc)}. Send one SELECT "
                           f"statement over the tables {_listed(catalog)}.") from None
    if len(statements) != 1:
        raise InvalidInput(f"Send exactly one statement; this SQL has {len(statements)}. Run "
                           "them one at a time, or join them into one SELECT (WITH … SELECT) "
                           f"over the tables {_listed(catalog)}.")
    statement = statements[0]
    kind = statement.type.name
    if kind != "SELECT":
        what = _DESCRIBED.get(kind, kind.replace("_", " "))
        raise InvalidInput(f"{what} statements are refused: query_data only reads, with one "
                           f"SELECT (or WITH … SELECT) over the tables {_listed(catalog)}. "
                           "Nothing can be changed, attached, copied or configured.")
    query = statement.query.strip().rstrip(";").strip()
    serialised = db.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    tree: dict[str, Any] = json.loads(serialised[0]) if serialised else {"error": True}
    if tree.get("error"):
        raise InvalidInput(f"This statement cannot be checked ({tree.get('error_message')}). "
                           "Send a plain SELECT (PIVOT: use GROUP BY with FILTER instead).")
    reads = _check_tree(catalog, tree)
    statements_json: list[dict[str, Any]] = tree.get("statements") or [{}]
    node = statements_json[0].get("node") or {}
    modifiers = [m for m in node.get("modifiers") or [] if isinstance(m, dict)]
    return _Statement(query, any(m.get("type") == "ORDER_MODIFIER" for m in modifiers),
                      next((_constant(m.get("limit")) for m in modifiers
                            if m.get("type") == "LIMIT_MODIFIER"), None), frozenset(reads))


def _constant(expression: Any) -> int | None:
    """The integer a LIMIT's expression is, when it is a constant."""
    literal = (expression or {}).get("literal") if isinstance(expression, dict) else None
    text = str((literal or {}).get("text", ""))
    return int(text) if text.isdigit() else None


def _check_tree(catalog: DataCatalog, tree: Any) -> set[tuple[str, str]]:
    """Refuse what the statement may not do; the catalog's tables it reads."""
    ctes = {str(entry["key"]).lower() for node in _nodes(tree)
            for entry in (node.get("cte_map") or {}).get("map", []) if "key" in entry}
    known = catalog.names()
    reads: set[tuple[str, str]] = set()
    for node in _nodes(tree):
        if node.get("type") == "TABLE_FUNCTION":
            function = str((node.get("function") or {}).get("function_name", "")).lower()
            if function not in _TABLE_FUNCTIONS:
                raise InvalidInput(
                    f"The function {function}() is refused: query_data reads only the task's "
                    f"tables ({_listed(catalog)}), no files or other functions. Select FROM a "
                    "table instead (e.g. FROM sales rather than read_csv('sales.csv')).")
        elif node.get("class") == "FUNCTION":
            function = str(node.get("function_name", "")).lower()
            if _FILE_FUNCTION.match(function):
                raise InvalidInput(f"The function {function}() is refused: query_data reads "
                                   f"only the task's tables ({_listed(catalog)}).")
        elif node.get("type") == "BASE_TABLE" and (
                read := _check_table(catalog, known, ctes, node)) is not None:
            reads.add(read)
    return reads


def _check_table(catalog: DataCatalog, known: set[tuple[str, str]], ctes: set[str],
                 node: dict[str, Any]) -> tuple[str, str] | None:
    name = str(node.get("table_name", ""))
    schema = str(node.get("schema_name", "")).lower()
    catalog_name = str(node.get("catalog_name", "")).lower()
    if schema in _SYSTEM_SCHEMAS and catalog_name in ("", "memory", "system"):
        return None
    if catalog_name not in ("", "memory"):
        schema = catalog_name if schema == "main" else schema  # `shop.orders` may parse so
    if (schema or "main", name.lower()) in known:
        return schema or "main", name.lower()
    if not schema and name.lower() in ctes:
        return None
    if not schema and any(ch in name for ch in "/\\.:"):
        raise InvalidInput(f"FROM '{name}' would read a file: query_data reads only the task's "
                           f"tables ({_listed(catalog)}).")
    shown = f"{schema}.{name}" if schema else name
    raise InvalidInput(f"There is no table {shown!r}. The tables are {_listed(catalog)} "
                       "(call data_schema for their columns).")


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in a serialised statement, depth first."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


# ---- running it ----------------------------------------------------------------------------


async def query_data(catalog: DataCatalog, sql: str, *, row_limit: int = ROW_LIMIT,
                     seconds: float = SECONDS) -> QueryResult:
    """Run one read-only statement over the catalog's tables: at most `row_limit` rows, and
    interrupted after `seconds`. `InvalidInput` when it is refused or fails (saying why),
    `ToolError` (code `query_timeout`) when it runs too long."""
    statement = await asyncio.to_thread(_checked, catalog, sql)
    query = statement.query
    db = catalog.cursor()
    loop = asyncio.get_running_loop()
    timer = loop.call_later(seconds, db.interrupt)
    started = time.perf_counter()
    try:
        columns, rows = await asyncio.to_thread(_fetch, db, query, row_limit)
    except duckdb.InterruptException:
        raise ToolError(f"The query ran past its limit of {seconds:g} s and was stopped. Make it "
                        "cheaper: filter or aggregate before joining, and avoid cross joins.",
                        code="query_timeout") from None
    except duckdb.Error as exc:
        raise InvalidInput(f"The query failed: {_first_line(exc)}. The tables are "
                           f"{_listed(catalog)} (call data_schema for their columns).") from None
    finally:
        timer.cancel()
        db.close()
    return QueryResult(query, columns, tuple(rows[:row_limit]), len(rows) > row_limit,
                       round(time.perf_counter() - started, 4), statement.ordered,
                       statement.limit, tuple(t for t in catalog.tables
                                              if _split_name(t.name) in statement.reads))


def _fetch(db: duckdb.DuckDBPyConnection, query: str,
           row_limit: int) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    db.execute(query)
    columns = tuple(str(d[0]) for d in db.description or ())
    rows = [tuple(_plain(v) for v in row) for row in db.fetchmany(row_limit + 1)]
    return columns, rows


def _plain(value: Any) -> Any:
    """A DuckDB value as JSON can carry it."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return shorten(value, MAX_CELL_CHARS)
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, bytes):
        return "base64:" + base64.b64encode(value[:MAX_CELL_CHARS]).decode()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, dt.timedelta | uuid.UUID):
        return str(value)
    return str(value)


def _listed(catalog: DataCatalog) -> str:
    return ", ".join(t.name for t in catalog.tables) or "(none: the task has no data files)"


def _split_name(name: str) -> tuple[str, str]:
    schema, _, table = name.rpartition(".")
    return schema or "main", table


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".!")
