"""Word documents (`.docx`) and Excel workbooks (`.xlsx`): checked as the zips they are, then
read with python-docx and openpyxl.

Both formats are zips of XML parts. `validate_docx` and `validate_xlsx` open the zip, refuse a
password-protected member, a package without its main part (`word/document.xml`,
`xl/workbook.xml`) and an archive bomb (`shoal.artifacts.compression`: the parts' declared sizes,
overlaps and ratios, before any part is read), then open the file with its library: a file
that does not open is refused (422) saying so. An encrypted Office file is not a zip at all but
an OLE container, which `shoal.artifacts.sources.sniff` refuses by its first bytes.

- `docx_text`: the body in order: headings (styles Title, Heading 1 to 9) as Markdown headings,
  paragraphs one to a line block, list paragraphs as `- ` lines, tables as Markdown tables.
  Headers, footers and comments are left out, as a reader of the page skips them.
- `read_workbook`: each worksheet as a table: its first row of text in every cell (below at
  most five title rows) is the header when it looks like one (distinct names, and a column
  below holds a number or date, or none of the names recurs below), else the columns are named
  by their letters (A, B, …); title rows above the header and empty rows are left out; at
  most `max_rows` rows are kept (the rest counted). `xlsx_text` lists the sheets, their sizes
  and first rows, for a model to read.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docx
import openpyxl
from docx.table import Table as DocxTable
from docx.text.paragraph import Paragraph
from openpyxl.utils import get_column_letter

from shoal.artifacts.compression import check_declared
from shoal.artifacts.html import markdown_table
from shoal.errors import InvalidInput

MAX_PARTS = 10_000
"""The most parts (zip members) a document or workbook may have."""

MAX_UNPACKED_BYTES = 1 << 30
"""The most its parts may declare unpacked, in all."""

MAX_RATIO = 200.0
"""Unpacked bytes per compressed byte a part may declare (past 1 MiB): XML of repeated cells
compresses better than the files in a zip of sources."""

PREVIEW_ROWS = 20
"""How many rows of each sheet `xlsx_text` shows."""

_TITLE_ROWS = 5  # a sheet's header may sit below this many title rows

_DOCX = ("a Word document", "word/document.xml")
_XLSX = ("an Excel workbook", "xl/workbook.xml")
_SAVE_AGAIN = "Open it in its program, save it again and upload the new file."


# --- checking -------------------------------------------------------------------------------


def validate_docx(path: Path) -> None:
    """Check that `path` is a Word document python-docx can read; `InvalidInput` if not."""
    _check_package(path, *_DOCX)
    try:
        docx.Document(str(path))
    except Exception as exc:  # python-docx parses hostile XML: any failure is a broken file
        raise InvalidInput(f"The Word document cannot be read ({_reason(exc)}); it may be "
                           f"damaged. {_SAVE_AGAIN}") from None


def validate_xlsx(path: Path) -> None:
    """Check that `path` is an Excel workbook openpyxl can read, with a worksheet;
    `InvalidInput` if not."""
    _check_package(path, *_XLSX)
    try:
        with _workbook(path) as book:
            sheets = len(book.worksheets)
    except Exception as exc:  # openpyxl parses hostile XML: any failure is a broken file
        raise InvalidInput(f"The Excel workbook cannot be read ({_reason(exc)}); it may be "
                           f"damaged. {_SAVE_AGAIN}") from None
    if not sheets:
        raise InvalidInput("The Excel workbook has no worksheet (only charts). Add the data "
                           "as a worksheet and upload it again.")


def _check_package(path: Path, article: str, main_part: str) -> None:
    what = article.removeprefix("a ").removeprefix("an ")
    try:
        with zipfile.ZipFile(path) as package:
            entries = [info for info in package.infolist() if not info.is_dir()]
            if any(info.flag_bits & 0x1 for info in entries):
                raise InvalidInput(f"The {what} is password-protected. Remove the password, "
                                   "save it and upload it again.")
            if main_part not in package.NameToInfo:
                raise InvalidInput(f"The file is named like {article} but is a zip of other "
                                   f"files (it has no {main_part}). Upload the {what} itself.")
            if len(entries) > MAX_PARTS:
                raise InvalidInput(f"The {what} holds {len(entries):,} parts; at most "
                                   f"{MAX_PARTS:,} are read. {_SAVE_AGAIN}")
            check_declared(package, entries, path.stat().st_size,
                           max_total_bytes=MAX_UNPACKED_BYTES, max_ratio=MAX_RATIO,
                           what=f"The {what}", advice="Upload the document Office saved.")
    except zipfile.BadZipFile as exc:
        raise InvalidInput(f"The {what} cannot be read as one ({exc}); it may be damaged or "
                           f"cut short. {_SAVE_AGAIN}") from None


def _reason(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


# --- Word -----------------------------------------------------------------------------------


def docx_text(path: Path, max_chars: int) -> str:
    """The text of the Word document at `path` (see the module's docstring), stopping once it
    passes `max_chars`."""
    blocks: list[str] = []
    size = 0
    listed = False
    for block in docx.Document(str(path)).iter_inner_content():
        text, is_item = _table(block) if isinstance(block, DocxTable) else _paragraph(block)
        if not text:
            continue
        joint = "\n" if is_item and listed else "\n\n"
        blocks.append((joint if blocks else "") + text)
        listed = is_item
        size += len(blocks[-1])
        if size > max_chars:
            break
    return "".join(blocks) or "[This Word document has no text.]"


def _paragraph(paragraph: Paragraph) -> tuple[str, bool]:
    """A paragraph as Markdown-like text, and whether it is a list item."""
    text = "\n".join(" ".join(line.split()) for line in paragraph.text.splitlines()).strip()
    if not text:
        return "", False
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if style == "Title":
        return f"# {' '.join(text.split())}", False
    if style.startswith("Heading ") and style[8:].isdigit():
        return f"{'#' * min(int(style[8:]), 6)} {' '.join(text.split())}", False
    numbered = paragraph._p.pPr is not None and paragraph._p.pPr.numPr is not None
    if numbered or style.startswith("List"):
        return f"- {' '.join(text.split())}", True
    return text, False


def _table(table: DocxTable) -> tuple[str, bool]:
    return markdown_table([[" ".join(cell.text.split()) for cell in row.cells]
                           for row in table.rows]), False


# --- Excel ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sheet:
    """One worksheet as a table: its name, the sheet row of its header (None: no header row,
    columns named by letter), its column names, its rows (empty ones left out) with the sheet
    row each came from, and how many rows it has in all (more than `rows` when cut)."""

    name: str
    header_row: int | None
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    sheet_rows: tuple[int, ...]
    total: int

    def span(self) -> str:
        """Where its rows are in the sheet, as a person says it: `rows 2\u20131,001`."""
        if not self.sheet_rows:
            return "no rows"
        first, last = self.sheet_rows[0], self.sheet_rows[-1]
        return f"row {first:,}" if first == last else f"rows {first:,}\u2013{last:,}"


def read_workbook(path: Path, *, max_rows: int) -> list[Sheet]:
    """Every worksheet of the workbook at `path` (validated), at most `max_rows` rows each."""
    with _workbook(path) as book:
        return [_sheet(sheet.title, sheet.iter_rows(values_only=True), max_rows)
                for sheet in book.worksheets]


@contextlib.contextmanager
def _workbook(path: Path) -> Iterator[openpyxl.Workbook]:
    """A workbook opened read-only (streamed, formulas as their cached values), closed after;
    openpyxl's warnings about what it drops (data validation, extensions) silenced."""
    # From an open file: given a path, openpyxl refuses a name not ending in .xlsx, as an
    # upload's scratch file is named.
    with warnings.catch_warnings(), path.open("rb") as file:
        warnings.simplefilter("ignore", UserWarning)
        book = openpyxl.load_workbook(file, read_only=True, data_only=True)
        try:
            yield book
        finally:
            book.close()


def _sheet(name: str, values: Iterator[tuple[Any, ...]], max_rows: int) -> Sheet:
    kept: list[tuple[int, tuple[Any, ...]]] = []
    total = 0
    for number, row in enumerate(values, start=1):
        if all(_blank(v) for v in row):
            continue
        total += 1
        if len(kept) <= max_rows:
            kept.append((number, tuple(_plain(v) for v in row)))
    width = max((_width(row) for _, row in kept), default=0)
    kept = [(n, row[:width] + (None,) * (width - len(row[:width]))) for n, row in kept]
    at = _header_at([row for _, row in kept])
    if at is not None:
        (header_row, header), body = kept[at], kept[at + 1:]
        columns = tuple(str(v).strip() for v in header)
        total -= at + 1
    else:
        header_row, body = None, kept
        columns = tuple(get_column_letter(i) for i in range(1, width + 1))
    body = body[:max_rows]
    return Sheet(name, header_row, columns, tuple(row for _, row in body),
                 tuple(n for n, _ in body), total)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _width(row: tuple[Any, ...]) -> int:
    return max((i + 1 for i, v in enumerate(row) if not _blank(v)), default=0)


def _plain(value: Any) -> Any:
    """A cell's value as the table holds it (text stripped of its edges' white space)."""
    if isinstance(value, str):
        return value.strip() or None
    return value


def _header_at(rows: list[tuple[Any, ...]]) -> int | None:
    """Which of the first rows names the columns, if one does: the first row of text in every
    cell, below at most a few title rows (less than half full), when `_is_header` says so."""
    for at, row in enumerate(rows[:_TITLE_ROWS + 1]):
        if all(isinstance(v, str) for v in row):
            return at if _is_header(rows[at:]) else None
        if sum(not _blank(v) for v in row) * 2 >= len(row):  # a row of data, not a title
            return None
    return None


def _is_header(rows: list[tuple[Any, ...]]) -> bool:
    """Whether the first row names the columns: every cell a distinct text, and below it a
    column holds a number or date, or none of the names recurs in its column."""
    first, below = rows[0], rows[1:]
    if not below or len({v.lower() for v in first}) < len(first):
        return False
    typed = any(v is not None and not isinstance(v, str) for row in below for v in row)
    recurs = any(row[i] == name for row in below for i, name in enumerate(first))
    return typed or not recurs


def xlsx_text(path: Path, max_chars: int) -> str:
    """The workbook for a model to read: each sheet's size, columns and first
    `PREVIEW_ROWS` rows (as CSV), stopping once it passes `max_chars`."""
    sheets = read_workbook(path, max_rows=PREVIEW_ROWS)
    lines = [f"Excel workbook: {plural(len(sheets), 'sheet')}; each is a table for "
             "query_data."]
    for sheet in sheets:
        lines.append(_preview(sheet))
        if sum(len(line) for line in lines) > max_chars:
            break
    return "\n\n".join(lines)


def _preview(sheet: Sheet) -> str:
    header = (f"header in row {sheet.header_row}" if sheet.header_row is not None
              else "no header row: columns named by their letters")
    head = (f'Sheet "{sheet.name}": {plural(sheet.total, "row")}'
            f"{' after the header' if sheet.header_row else ''}, "
            f"{plural(len(sheet.columns), 'column')} ({header}).")
    if not sheet.columns:
        return head
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(sheet.columns)
    writer.writerows([_cell(v) for v in row] for row in sheet.rows)
    shown = len(sheet.rows)
    return "\n".join([head, f"Columns: {', '.join(sheet.columns)}",
                      f"The columns and the first {plural(shown, 'row')} ({sheet.span()}), "
                      "as CSV:", out.getvalue().rstrip("\n")])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)


def plural(count: int, noun: str) -> str:
    """`count` and `noun`, in the plural unless it is one: `1 row`, `1,000 rows`."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")

