"""`query_data` over a real CSV, Parquet file and SQLite database in DuckDB: good SELECTs
answer, every forbidden statement is refused with a message an agent can act on, a slow query
is interrupted, and the database itself refuses files even if a check were skipped."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import duckdb
import pytest

from shoal.artifacts.sources import SourceKind
from shoal.errors import InvalidInput, ToolError
from shoal.retrieval.sql import DataCatalog, DataFile, open_catalog, query_data, table_names
from tests.retrieval.samples import SALES_ROWS, write_data

KINDS = {"sales.csv": SourceKind.csv, "targets.parquet": SourceKind.parquet,
         "shop.db": SourceKind.sqlite}


@pytest.fixture
async def catalog(tmp_path: Path) -> AsyncIterator[DataCatalog]:
    files = write_data(tmp_path / "sources")
    opened = await open_catalog([DataFile(n, p, KINDS[n]) for n, p in files.items()])
    yield opened
    opened.close()


async def test_a_select_over_a_csv_answers_its_rows(catalog: DataCatalog) -> None:
    """An aggregate over the CSV's table returns the rows and the SQL that ran."""
    result = await query_data(catalog, "SELECT region, sum(revenue) AS total FROM sales "
                                       "GROUP BY region ORDER BY total DESC;")
    assert result.columns == ("region", "total")
    assert result.rows == (("north", 2550), ("south", 1750), ("west", 400))
    assert result.sql == ("SELECT region, sum(revenue) AS total FROM sales GROUP BY region "
                          "ORDER BY total DESC")
    assert not result.truncated


async def test_a_with_query_joins_the_csv_and_the_parquet_file(catalog: DataCatalog) -> None:
    """A WITH … SELECT reads the Parquet file's table beside the CSV's."""
    result = await query_data(catalog, """
        WITH totals AS (SELECT region, sum(revenue) AS revenue FROM sales GROUP BY region)
        SELECT t.region, round(totals.revenue / t.target, 2) AS share
        FROM targets t JOIN totals USING (region) ORDER BY t.region""")
    assert result.rows == (("north", 1.02), ("south", 0.88), ("west", 0.44))


async def test_a_sqlite_file_is_a_schema_of_its_tables(catalog: DataCatalog) -> None:
    """Each table of the SQLite file is `<file>.<table>`, joinable like any other."""
    result = await query_data(catalog, "SELECT c.city, sum(o.total) FROM shop.orders o "
                                       "JOIN shop.customers c ON c.name = o.customer "
                                       "GROUP BY c.city ORDER BY c.city")
    assert result.rows == (("Arlington", 30.0), ("London", 19.75))


async def test_the_schema_names_every_table_its_columns_and_rows(catalog: DataCatalog) -> None:
    """The catalog lists each table with its source, columns and row count."""
    tables = {t.name: t for t in catalog.tables}
    assert sorted(tables) == ["sales", "shop.customers", "shop.orders", "targets"]
    assert [(c.name, c.type) for c in tables["sales"].columns] == [
        ("region", "VARCHAR"), ("month", "VARCHAR"), ("revenue", "BIGINT")]
    assert tables["sales"].rows == len(SALES_ROWS)
    assert tables["shop.orders"].source == "shop.db (orders)"
    assert [c.type for c in tables["shop.orders"].columns] == ["BIGINT", "VARCHAR", "DOUBLE"]


@pytest.mark.parametrize(("sql", "said"), [
    ("DROP TABLE sales", "DROP statements are refused: query_data only reads"),
    ("INSERT INTO sales VALUES ('east', '2024-03', 1)", "INSERT statements are refused"),
    ("ATTACH '/tmp/other.db' AS other", "ATTACH statements are refused"),
    ("COPY sales TO '/tmp/out.csv'", "COPY statements are refused"),
    ("SELECT * FROM read_csv('/etc/passwd')", "The function read_csv() is refused"),
    ("SELECT * FROM '/etc/passwd'", "FROM '/etc/passwd' would read a file"),
    ("SELECT content FROM read_text('/etc/hostname')", "The function read_text() is refused"),
    ("SELECT * FROM duckdb_settings()", "The function duckdb_settings() is refused"),
    ("PRAGMA database_list", "PRAGMA statements are refused"),
    ("SET enable_external_access = true", "SET statements are refused"),
    ("SELECT 1; SELECT 2", "Send exactly one statement; this SQL has 2"),
    ("SELECT 1; DROP TABLE sales", "Send exactly one statement"),
    ("SELECT * FROM passwords", "There is no table 'passwords'. The tables are sales"),
    ("SELEC region FROM sales", "The SQL does not parse"),
])
async def test_a_forbidden_statement_is_refused_saying_why(catalog: DataCatalog, sql: str,
                                                           said: str) -> None:
    """Writes, attachments, copies, files, settings and several statements are refused with
    a message naming what to send instead."""
    with pytest.raises(InvalidInput) as refused:
        await query_data(catalog, sql)
    assert said in refused.value.message
    assert "sales" in refused.value.message  # the tables it may read instead


async def test_a_query_that_fails_says_why_and_lists_the_tables(catalog: DataCatalog) -> None:
    """A wrong column is DuckDB's own message, with the tables beside it."""
    with pytest.raises(InvalidInput, match="Referenced column \"profit\" not found") as failed:
        await query_data(catalog, "SELECT profit FROM sales")
    assert "call data_schema" in failed.value.message


async def test_a_query_past_its_time_limit_is_interrupted(catalog: DataCatalog) -> None:
    """A cross join of billions of rows is stopped at its limit, not left running."""
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"ran past its limit of 0\.5 s") as stopped:
        await query_data(catalog, "SELECT sum(a.range * b.range) FROM range(100000000) a, "
                                  "range(100000) b", seconds=0.5)
    assert stopped.value.code == "query_timeout"
    assert time.monotonic() - started < 10
    answered = await query_data(catalog, "SELECT count(*) FROM sales")  # still usable
    assert answered.rows == ((5,),)


async def test_rows_past_the_limit_are_cut_and_said_to_be(catalog: DataCatalog) -> None:
    """Only `row_limit` rows come back, and `truncated` says there were more."""
    result = await query_data(catalog, "SELECT * FROM range(1000)", row_limit=10)
    assert len(result.rows) == 10
    assert result.truncated


async def test_the_database_refuses_files_and_settings_on_its_own(catalog: DataCatalog) -> None:
    """Even SQL that skipped the checks could read no file and change no setting."""
    db = catalog.cursor()
    with pytest.raises(duckdb.PermissionException):
        db.execute("SELECT * FROM read_csv('/etc/passwd')")
    with pytest.raises(duckdb.Error, match="locked"):
        db.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error):
        db.execute("INSTALL sqlite")
    db.close()


async def test_a_file_that_cannot_be_read_is_named_not_fatal(tmp_path: Path) -> None:
    """A broken CSV is left out with its reason; the other files still answer."""
    files = write_data(tmp_path)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really parquet PAR1")
    catalog = await open_catalog([DataFile("sales.csv", files["sales.csv"], SourceKind.csv),
                                  DataFile("broken.parquet", broken, SourceKind.parquet)])
    assert [t.name for t in catalog.tables] == ["sales"]
    assert catalog.problems[0].startswith("broken.parquet: ")
    catalog.close()


def test_tables_are_named_after_their_files() -> None:
    """Names are lower-case identifiers from the file's stem, made unique."""
    files = [DataFile(n, Path(n), SourceKind.csv)
             for n in ("Sales 2024.csv", "sales-2024.tsv", "2023.csv", "main.csv")]
    assert table_names(files) == {"Sales 2024.csv": "sales_2024",
                                  "sales-2024.tsv": "sales_2024_2", "2023.csv": "t_2023",
                                  "main.csv": "main_2"}
