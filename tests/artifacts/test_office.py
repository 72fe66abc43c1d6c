"""Word documents and Excel workbooks: accepted by their name and content, checked as the zips
they are (damaged, encrypted and bombs refused with 422), read as text and as tables — on
files built from real text and data of this machine (`tests/artifacts/real_files.py`)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from shoal.artifacts.office import read_workbook
from shoal.artifacts.sources import SourceKind, extract_text, sniff, sniff_file, validate
from shoal.errors import InvalidInput, UnsupportedMedia
from shoal.retrieval.sql import DataFile, open_catalog, query_data
from tests.artifacts.real_files import write_docx, write_xlsx

MB = 1 << 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("office")


@pytest.fixture(scope="module")
def licence(folder: Path) -> tuple[Path, list[tuple[str, list[str]]]]:
    path = folder / "apache-licence.docx"
    return path, write_docx(path)


@pytest.fixture(scope="module")
def workbook(folder: Path) -> tuple[Path, list[tuple[str, int, str]]]:
    path = folder / "packages.xlsx"
    return path, write_xlsx(path)


def test_a_word_document_and_a_workbook_are_known_and_pass(
        licence: tuple[Path, object], workbook: tuple[Path, object]) -> None:
    """A .docx and a .xlsx are sources of their own kinds, not zips, and pass validation."""
    for (path, _), kind in ((licence, SourceKind.docx), (workbook, SourceKind.xlsx)):
        assert sniff_file(path, path.name) is kind
        validate(path, kind)


def test_a_word_documents_text_keeps_headings_paragraphs_lists_and_tables(
        licence: tuple[Path, list[tuple[str, list[str]]]]) -> None:
    """Title and headings become Markdown headings, each paragraph is whole on its line block,
    bulleted paragraphs are `- ` lines, and a table is a Markdown table."""
    path, sections = licence
    text = extract_text(path, SourceKind.docx, max_chars=1_000_000)
    lines = text.splitlines()
    assert lines[0] == "# Apache License, Version 2.0"
    assert len(sections) == 9
    for title, paragraphs in sections:
        assert f"# {title}" in lines
        assert all(paragraph in lines for paragraph in paragraphs)
    assert "# 7. Disclaimer of Warranty." in lines
    items = [line for line in lines if line.startswith("- ")]
    assert len(items) == 3
    assert all(line.endswith(" KiB.") for line in items)
    table = lines[lines.index("| Package | KiB | Section |"):]
    assert table[1] == "| --- | --- | --- |"
    assert len(table) == 7


def test_a_workbooks_sheets_become_tables_with_their_header_found(
        workbook: tuple[Path, list[tuple[str, int, str]]]) -> None:
    """The header below a title row names the columns; a sheet of dates and counts has no
    header (columns A, B); a text-only sheet's first row is its header."""
    path, rows = workbook
    packages, dated, sections = read_workbook(path, max_rows=1_000_000)
    assert (packages.header_row, packages.columns) == (3, ("package", "installed_kib", "section"))
    assert packages.total == len(rows)
    assert packages.rows[0] == rows[0]
    assert packages.span() == f"rows 4\u2013{len(rows) + 3:,}"
    assert (dated.header_row, dated.columns, dated.total) == (None, ("A", "B"), 3)
    assert (sections.header_row, sections.columns) == (1, ("section", "example"))


def test_a_workbooks_text_lists_its_sheets_and_sizes(
        workbook: tuple[Path, list[tuple[str, int, str]]]) -> None:
    """The preview names each sheet with its rows and columns, and shows its first rows."""
    path, rows = workbook
    text = extract_text(path, SourceKind.xlsx, max_chars=100_000)
    assert text.startswith("Excel workbook: 3 sheets; each is a table for query_data.")
    assert (f'Sheet "packages": {len(rows):,} rows after the header, 3 columns (header in '
            "row 3).") in text
    assert 'Sheet "2024": 3 rows, 2 columns (no header row: columns named by their letters).' \
        in text
    assert "\n2024-02-01,20\n" in text
    assert f"\n{rows[0][0]},{rows[0][1]},{rows[0][2]}\n" in text


async def test_each_sheet_is_a_table_for_sql(
        workbook: tuple[Path, list[tuple[str, int, str]]]) -> None:
    """query_data reads the sheets as `<file>.<sheet>` tables, typed by their values, and
    names the sheet and rows each came from."""
    path, rows = workbook
    catalog = await open_catalog([DataFile("packages.xlsx", path, SourceKind.xlsx)])
    try:
        tables = {t.name: t for t in catalog.tables}
        assert set(tables) == {"packages.packages", "packages.sheet_2024", "packages.sections"}
        assert tables["packages.packages"].rows == len(rows)
        assert tables["packages.packages"].source == \
            f'packages.xlsx (sheet "packages", rows 4\u2013{len(rows) + 3:,})'
        assert [(c.name, c.type) for c in tables["packages.sheet_2024"].columns] == [
            ("A", "TIMESTAMP"), ("B", "BIGINT")]
        largest = max(rows, key=lambda r: r[1])
        result = await query_data(catalog, "SELECT package, installed_kib FROM "
                                           "packages.packages ORDER BY installed_kib DESC LIMIT 1")
        assert result.rows == ((largest[0], largest[1]),)
    finally:
        catalog.close()


def test_a_damaged_word_document_is_refused(licence: tuple[Path, object],
                                            tmp_path: Path) -> None:
    """A .docx cut in half is a 422 saying it may be damaged."""
    path = tmp_path / "cut.docx"
    data = licence[0].read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidInput, match="damaged"):
        validate(path, SourceKind.docx)


def test_a_zip_named_like_a_workbook_is_refused(tmp_path: Path) -> None:
    """A zip of other files named .xlsx is a 422 naming the part it lacks."""
    path = tmp_path / "fake.xlsx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "not a workbook")
    assert sniff_file(path, path.name) is SourceKind.xlsx
    with pytest.raises(InvalidInput, match=r"zip of other files \(it has no xl/workbook.xml\)"):
        validate(path, SourceKind.xlsx)


def test_a_broken_part_is_refused_as_damaged(licence: tuple[Path, object],
                                              tmp_path: Path) -> None:
    """A document whose main part is not XML opens as a zip and fails in python-docx: 422."""
    path = tmp_path / "broken.docx"
    with zipfile.ZipFile(licence[0]) as source, zipfile.ZipFile(path, "w") as out:
        for info in source.infolist():
            data = b"<w:document" if info.filename == "word/document.xml" else \
                source.read(info)
            out.writestr(info, data)
    with pytest.raises(InvalidInput, match="Word document cannot be read"):
        validate(path, SourceKind.docx)


def test_an_encrypted_office_file_is_a_422_about_its_password() -> None:
    """Office encrypts a .docx into an OLE container: refused (422, not 415) saying to remove
    the password; a .doc of the same bytes stays unsupported (415)."""
    head = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    with pytest.raises(InvalidInput, match="protected by a password") as caught:
        sniff(head, "budget.xlsx")
    assert not isinstance(caught.value, UnsupportedMedia)
    with pytest.raises(UnsupportedMedia, match="old Microsoft Office"):
        sniff(head, "budget.xls")


def test_a_workbook_that_is_a_zip_bomb_is_refused(licence: tuple[Path, object],
                                                  tmp_path: Path) -> None:
    """A part of 300 MB of zeros (about 300 KB packed) is refused as an archive bomb before
    anything is read, as a zip of sources would be."""
    path = tmp_path / "bomb.docx"
    with zipfile.ZipFile(licence[0]) as source, \
            zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            out.writestr(info, source.read(info))
        with out.open("word/media/zeros.bin", "w", force_zip64=True) as part:
            for _ in range(300):
                part.write(bytes(MB))
    assert path.stat().st_size < 2 * MB
    with pytest.raises(InvalidInput, match=r"Word document is refused as an archive bomb: .*"
                                           r"\(limit 200:1\)"):
        validate(path, SourceKind.docx)


@pytest.mark.skipif(shutil.which("soffice") is None, reason="LibreOffice is not installed")
def test_a_document_libreoffice_wrote_reads(licence: tuple[Path, object],
                                            tmp_path: Path) -> None:
    """The same document saved again by LibreOffice reads with its headings."""
    subprocess.run(["soffice", "--headless", "--convert-to", "docx", "--outdir", str(tmp_path),
                    str(licence[0])], check=True, capture_output=True, timeout=120)
    path = tmp_path / licence[0].name
    validate(path, SourceKind.docx)
    assert "# 1. Definitions." in extract_text(path, SourceKind.docx, max_chars=1_000_000)
