"""Data answers that mean what they say: what a query's rows are, how to cite them, and how to
check them again.

- `described(result, question=…)`: what `query_data` says beside the rows: the tables read and
  their sizes, how many rows came back of how many, whether they are ordered (an ORDER BY at
  the statement's top level), and, when they are not and more than one came back, a plain
  warning that they are in no particular order and must not be presented as the largest,
  most, least, first or top; with the ORDER BY that would rank them, its direction taken from
  the question when one was asked ("largest" → DESC, "fewest" → ASC) and its column from the
  question's words, else the table's one numeric column.
- `data_label(result)`: a data finding's citation, its SQL and rows:
  `SQL: SELECT … — rows 1\u20135 of 5` (and the workbook's sheet when it reads one); `sql_of(label)`
  takes the SQL back out (also of `SQL: …` alone).
- `rerun(data_dir, sql)`: the SQL run again, read-only and checked as `query_data` checks it,
  over the data files of a task's `sources/` folder: a check's way to see the rows a finding
  rests on. `figures(rows)` and `numbers(text)` put the numbers of the rows and of a sentence
  in one canonical form (`1,148` and `1148.0` are `1148`; `24.30` is `24.3`), so that a check
  can ask whether every number of a sentence is among the rows'.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shoal.retrieval.folder import source_files
from shoal.retrieval.sql import (
    DATA_KINDS,
    DataFile,
    QueryResult,
    open_catalog,
    query_data,
)

DASH = "\u2013"
_EM_DASH = "\u2014"
_DESCENDING = frozenset({"largest", "biggest", "most", "highest", "top", "greatest", "maximum",
                         "max", "longest", "heaviest", "best", "hottest", "costliest"})
_ASCENDING = frozenset({"smallest", "least", "lowest", "fewest", "minimum", "min", "shortest",
                        "lightest", "worst", "coldest", "cheapest", "bottom"})
_NUMERIC = re.compile(r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|"
                      r"UBIGINT|FLOAT|DOUBLE|REAL|DECIMAL.*|NUMERIC.*)$", re.IGNORECASE)
_LABEL = re.compile(rf"^SQL:\s*(?P<sql>.*?)"
                    rf"(?:\s+{_EM_DASH}\s+(?:no rows|rows?\s+\d+(?:[{DASH}-]\d+)?)\s+of\s.*)?$",
                    re.DOTALL)
_WRITTEN_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:[,\u202f\u00a0 ]\d{3})+(?:\.\d+)?(?!\d)"
                             r"|(?<![\w.])-?\d+(?:\.\d+)?(?!\d)")


def described(result: QueryResult, *, question: str = "") -> dict[str, Any]:
    """What to say beside `result`'s rows (see the module's docstring), as JSON-ready fields:
    `tables`, `returned`, `ordered`, `about`, `citation` and, when due, `warning`."""
    out: dict[str, Any] = {
        "tables": [{"table": t.name, "rows": t.rows, "source": t.source} for t in result.tables],
        "returned": len(result.rows), "ordered": result.ordered, "about": _about(result),
        "citation": data_label(result)}
    if warning := order_warning(result, question=question):
        out["warning"] = warning
    return out


def _about(result: QueryResult) -> str:
    """`5 rows of the 925 in packages (LIMIT 5), in no particular order`."""
    count = f"{'more than ' if result.truncated else ''}{_rows(len(result.rows))}"
    sizes = ", ".join(f"{t.rows:,} in {t.name}" for t in result.tables)
    of = f" of the {sizes}" if len(result.tables) == 1 else f" from tables of {sizes}" \
        if sizes else ""
    limit = f" (LIMIT {result.limit})" if result.limit is not None else ""
    order = "ordered by its ORDER BY" if result.ordered else "in no particular order"
    return f"{count}{of}{limit}, {order}."


def order_warning(result: QueryResult, *, question: str = "") -> str:
    """The warning for rows that are not ordered (see the module's docstring); empty when
    they are ordered, or fewer than two came back."""
    if result.ordered or len(result.rows) < 2:
        return ""
    subset = (f"LIMIT {result.limit} without ORDER BY picks {_rows(len(result.rows))} "
              "arbitrarily. " if result.limit is not None else "")
    warning = (f"{subset}These rows are in no particular order (the SQL has no ORDER BY at its "
               "top level): do not present them as the largest, most, least, first or top of "
               "anything, and do not rank them.")
    return f"{warning} {_ranking(result, question)}".strip()


def _ranking(result: QueryResult, question: str) -> str:
    """The ORDER BY that would rank the rows as the question asks, or how to write one."""
    words = set(re.findall(r"[a-z]+", question.lower()))
    direction = "DESC" if words & _DESCENDING else "ASC" if words & _ASCENDING else ""
    numeric = [c.name for t in result.tables for c in t.columns
               if _NUMERIC.match(c.type) and not _is_key(c.name)]
    named = [c for c in numeric if set(re.split(r"[^a-z0-9]+", c.lower())) & words]
    column = (named or (numeric if len(numeric) == 1 else []) or [""])[0]
    limit = f" LIMIT {result.limit or len(result.rows)}"
    if direction and column:
        return (f"To answer which are the {_superlative(words, direction)}, run it again with "
                f'ORDER BY "{column}" {direction}{limit}.')
    if numeric:
        listed = ", ".join(f'"{c}"' for c in dict.fromkeys(numeric))
        return (f"To rank them, add ORDER BY a column DESC (largest first) or ASC (smallest "
                f"first), e.g. one of {listed}.")
    return "To rank them, add ORDER BY the column to rank by."


def _superlative(words: set[str], direction: str) -> str:
    chosen = sorted(words & (_DESCENDING if direction == "DESC" else _ASCENDING))
    return chosen[0] if chosen else ("largest" if direction == "DESC" else "smallest")


def _is_key(name: str) -> bool:
    lowered = name.lower()
    return lowered in ("id", "rowid", "year", "month", "day") or lowered.endswith("_id")


def _rows(count: int) -> str:
    return f"{count:,} row" + ("" if count == 1 else "s")


# --- citations ------------------------------------------------------------------------------


def data_label(result: QueryResult, first: int = 1, last: int | None = None) -> str:
    """The citation of rows `first` to `last` (from 1; default all) of `result`:
    `SQL: SELECT … — rows 1\u20135 of 5`, and the sheet of a workbook it reads."""
    count = len(result.rows)
    last = count if last is None else min(last, count)
    rows = "no rows" if not count else f"row {first}" if first == last \
        else f"rows {first}{DASH}{last}"
    total = f"more than {count:,}" if result.truncated else f"{count:,}"
    sheets = [t.source for t in result.tables if ".xlsx (sheet " in t.source]
    where = f" ({'; '.join(sheets)})" if sheets else ""
    return f"SQL: {result.sql} {_EM_DASH} {rows} of {total}{where}"


def sql_of(label: str) -> str | None:
    """The SQL of a data citation (`SQL: … — rows 1\u20135 of 5`, or `SQL: …` alone); None for
    any other label."""
    found = _LABEL.match(label.strip())
    return found.group("sql").strip() or None if found else None


async def rerun(data_dir: Path, sql: str) -> QueryResult:
    """`sql` run again over the data files of `data_dir` (a task's `sources/`), read-only
    and checked as `query_data` checks it; its `InvalidInput` or `ToolError` passes through."""
    files = [DataFile(f.name, f.path, f.kind) for f in await asyncio.to_thread(
        source_files, data_dir) if f.kind is not None and f.kind in DATA_KINDS]
    catalog = await open_catalog(files)
    try:
        return await query_data(catalog, sql)
    finally:
        catalog.close()


# --- numbers --------------------------------------------------------------------------------


def numbers(text: str) -> list[str]:
    """The numbers written in `text`, each in canonical form (`1,148` → `1148`, `24.30` →
    `24.3`, `-3` stays)."""
    return [_canonical(m.group()) for m in _WRITTEN_NUMBER.finditer(text)]


def figures(rows: Iterable[Iterable[Any]]) -> set[str]:
    """Every number in `rows`, in `numbers`' canonical form: each number as stored, rounded
    to 0, 1 and 2 decimals (a sentence rounds), and the numbers written inside text values."""
    found: set[str] = set()
    for row in rows:
        for value in row:
            if isinstance(value, bool) or value is None:
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                found.add(_canonical(repr(float(value)) if isinstance(value, float)
                                     else str(value)))
                found.update(_canonical(f"{value:.{d}f}") for d in (0, 1, 2))
            else:
                found.update(numbers(str(value)))
    return found


def _canonical(number: str) -> str:
    digits = re.sub(r"[,\u202f\u00a0 ]", "", number)
    if "e" in digits.lower():
        digits = f"{float(digits):f}"
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    if digits in ("-0", ""):
        digits = "0"
    return digits

