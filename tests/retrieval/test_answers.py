"""Data answers that mean what they say, on a CSV of this machine's installed packages
(`dpkg-query`): sizes told, unordered rows warned about with the ORDER BY that would rank them,
a finding cited by its SQL and rows, and its SQL run again for a check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shoal.artifacts.sources import SourceKind
from shoal.errors import InvalidInput
from shoal.retrieval.answers import (
    data_label,
    described,
    figures,
    numbers,
    order_warning,
    rerun,
    sql_of,
)
from shoal.retrieval.sql import DataCatalog, DataFile, open_catalog, query_data
from tests.artifacts.real_files import write_packages_csv, write_xlsx

DASH, EM_DASH = "\u2013", "\u2014"
PackageRows = list[tuple[str, int, str]]


@pytest.fixture
def sources(tmp_path: Path) -> tuple[Path, PackageRows]:
    """A task's sources/ holding packages.csv (every installed package) and a note."""
    folder = tmp_path / "sources"
    folder.mkdir()
    rows = write_packages_csv(folder / "packages.csv")
    (folder / "notes.md").write_text("# Notes\n\nNot data.\n", encoding="utf-8")
    return folder, rows


@pytest.fixture
async def catalog(sources: tuple[Path, PackageRows]) -> AsyncIterator[DataCatalog]:
    opened = await open_catalog([DataFile("packages.csv", sources[0] / "packages.csv",
                                          SourceKind.csv)])
    yield opened
    opened.close()


async def test_rows_without_order_by_are_told_to_be_in_no_order(
        catalog: DataCatalog, sources: tuple[Path, PackageRows]) -> None:
    """`SELECT * … LIMIT 5` for "which packages are largest": 5 of N rows, unordered, and a
    warning naming the ORDER BY that answers the question."""
    rows = sources[1]
    result = await query_data(catalog, 'SELECT * FROM "packages" LIMIT 5')
    said = described(result, question="Which packages are largest?")
    assert (said["returned"], said["ordered"]) == (5, False)
    assert said["tables"] == [{"table": "packages", "rows": len(rows), "source": "packages.csv"}]
    assert said["about"] == (f"5 rows of the {len(rows):,} in packages (LIMIT 5), in no "
                             "particular order.")
    assert said["warning"].startswith("LIMIT 5 without ORDER BY picks 5 rows arbitrarily. "
                                      "These rows are in no particular order")
    assert "do not present them as the largest, most, least, first or top" in said["warning"]
    assert said["warning"].endswith('To answer which are the largest, run it again with '
                                    'ORDER BY "installed_kib" DESC LIMIT 5.')
    fewest = order_warning(result, question="the packages that take the least space")
    assert fewest.endswith('ORDER BY "installed_kib" ASC LIMIT 5.')
    assert 'e.g. one of "installed_kib"' in order_warning(result)


async def test_ordered_rows_and_a_single_row_carry_no_warning(
        catalog: DataCatalog, sources: tuple[Path, PackageRows]) -> None:
    """With ORDER BY at the top the rows are ranked (and truly the largest); one row of an
    aggregate needs no order; GROUP BY alone and an ORDER BY inside a CTE are no order."""
    rows = sources[1]
    ranked = await query_data(catalog, "SELECT package, installed_kib FROM packages "
                                       "ORDER BY installed_kib DESC, package LIMIT 3")
    assert ranked.ordered
    assert "warning" not in described(ranked, question="largest")
    largest = sorted(rows, key=lambda r: (-r[1], r[0]))[:3]
    assert [list(r) for r in ranked.rows] == [[name, size] for name, size, _ in largest]
    counted = await query_data(catalog, "SELECT count(*) FROM packages")
    assert order_warning(counted) == ""
    for sql in ("SELECT section, count(*) FROM packages GROUP BY section",
                "WITH big AS (SELECT * FROM packages ORDER BY installed_kib DESC) "
                "SELECT package FROM big LIMIT 3"):
        result = await query_data(catalog, sql)
        assert not result.ordered
        assert "no particular order" in order_warning(result), sql


async def test_a_finding_is_cited_by_its_sql_and_rows(catalog: DataCatalog) -> None:
    """The citation is the SQL and the rows; `sql_of` takes the SQL back out of it (or of a
    bare `SQL: …`), and is None for a passage's label."""
    sql = "SELECT package, installed_kib FROM packages ORDER BY installed_kib DESC LIMIT 5"
    result = await query_data(catalog, sql)
    assert data_label(result) == f"SQL: {sql} {EM_DASH} rows 1{DASH}5 of 5"
    assert data_label(result, 2, 2) == f"SQL: {sql} {EM_DASH} row 2 of 5"
    assert described(result)["citation"] == data_label(result)
    assert sql_of(data_label(result)) == sql
    assert sql_of(data_label(result).replace(DASH, "-")) == sql
    assert sql_of("SQL: SELECT 1") == "SELECT 1"
    assert sql_of('guide.md, "Fares", lines 3\u20139') is None


async def test_rerun_gives_back_rows_a_sentences_numbers_are_checked_against(
        sources: tuple[Path, PackageRows]) -> None:
    """Run again over the task's sources/, the SQL gives the same rows; the numbers of a
    sentence written from them are among the rows' figures, a changed one is not; SQL that
    query_data refuses is refused again."""
    folder, rows = sources
    name, size, _ = max(rows, key=lambda r: (r[1], r[0]))
    sql = "SELECT package, installed_kib FROM packages ORDER BY installed_kib DESC LIMIT 1"
    again = await rerun(folder, sql)
    assert again.rows == ((name, size),)
    found = figures(again.rows)
    sentence = f"The largest package, {name}, takes {size:,} KiB."
    assert set(numbers(sentence)) - set(numbers(name)) <= found
    assert str(size + 1) not in found
    with pytest.raises(InvalidInput, match="refused"):
        await rerun(folder, "DROP TABLE packages")


def test_numbers_are_compared_in_one_form() -> None:
    """Separators, trailing zeros and floats written as integers come to one form."""
    assert numbers("1,148 call-outs, 24.30 \u00b0C, 17.8 %, -3, 2024") == [
        "1148", "24.3", "17.8", "-3", "2024"]
    assert {"24.3", "24", "1148", "43"} <= figures([(24.299999, 1148.0, "43 heat days")])
    assert figures([(True, None)]) == set()


async def test_a_finding_from_a_workbook_names_its_sheet(tmp_path: Path) -> None:
    """Rows read from an Excel sheet are cited with the workbook, sheet and sheet rows."""
    write_xlsx(tmp_path / "packages.xlsx")
    result = await rerun(tmp_path, "SELECT count(*) FROM packages.packages")
    assert data_label(result).startswith("SQL: SELECT count(*) FROM packages.packages "
                                         f"{EM_DASH} row 1 of 1 (packages.xlsx (sheet "
                                         '"packages", rows 4')
