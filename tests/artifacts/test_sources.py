"""Uploaded sources: names checked, kinds sniffed from content, files validated, text extracted
— on real files written to a temporary folder. Parquet footers are in `test_parquet`, zips in
`test_archives`."""

from __future__ import annotations

import csv
import io
import os
import random
import sqlite3
import unicodedata
import zipfile
from pathlib import Path

import pypdf
import pytest
import weasyprint  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.api.errors import status_for
from shoal.artifacts.paths import check_relative_path
from shoal.artifacts.sources import (
    CSV_PREVIEW_ROWS,
    HTML_MAX_BYTES,
    Archive,
    SourceKind,
    checked_name,
    extract_text,
    sniff,
    sniff_file,
    validate,
)
from shoal.errors import InvalidInput, UnsupportedMedia
from shoal.limits import text_problem
from tests.artifacts.test_parquet import parquet_bytes, sample_footer


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def render_pdf() -> bytes:
    """A real two-page PDF with text, rendered by WeasyPrint."""
    html = ("<h1>Quarterly Title</h1><p>Hello <b>world</b></p>"
            "<p style='page-break-before: always'>Second page text</p>")
    pdf: bytes = weasyprint.HTML(string=html).write_pdf()
    return pdf


@pytest.fixture(scope="module")
def pdf_bytes() -> bytes:
    """A real two-page PDF with text, rendered by WeasyPrint."""
    return render_pdf()


def _encrypted(pdf: bytes, user_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _sqlite(path: Path, *, wal: bool = False) -> Path:
    with sqlite3.connect(path) as db:
        if wal:
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        db.execute('CREATE TABLE "odd ""name""" (x)')
        db.executemany("INSERT INTO people (name) VALUES (?)", [("Ada",), ("Bo",), ("Cy",)])
        db.execute("CREATE VIEW adults AS SELECT name FROM people")
    db.close()
    return path


# --- names ---------------------------------------------------------------------------------


def test_a_clean_name_comes_back_in_nfc() -> None:
    """A decomposed name comes back composed (NFC), otherwise unchanged."""
    assert checked_name("re\u0301sume\u0301 v2.md") == "r\u00e9sum\u00e9 v2.md"


def test_a_name_of_255_bytes_is_accepted() -> None:
    """The longest name allowed is 255 bytes of UTF-8."""
    name = "\u00e9" * 125 + "a.txt"
    assert len(name.encode()) == 255
    assert checked_name(name) == name


@pytest.mark.parametrize("name", [
    "", "   ", "a\x00b.txt", "a\x01b.txt", "tab\there", "a\x7f.md", "a\x85.md",
    "\u202egpj.exe", "lone\ud800.txt", ".", "..", "a/b.txt", "/etc/passwd", "a\\b.txt",
    "../x.md", "..\\x.md", "~notes.md", "\u00e9" * 126 + ".txt",
])
def test_a_bad_name_is_refused_naming_the_field(name: str) -> None:
    """Empty, control characters, lone surrogates, dots, separators, over-long: refused, and
    the refusal names the field `name` in its details."""
    with pytest.raises(InvalidInput) as caught:
        checked_name(name)
    assert caught.value.details[0]["field"] == "name"
    assert status_for(caught.value) == 422


@settings(max_examples=400)
@given(st.one_of(
    st.text(st.characters(exclude_categories=())),
    st.text(st.sampled_from("ab.é~ /\\\x00\x01\u202e\ud800\u0301"), max_size=12),
    st.text(st.sampled_from("aé"), min_size=120, max_size=260),
))
def test_any_string_is_a_clean_name_or_refused(name: str) -> None:
    """For any string, a clean one-part name comes back or `InvalidInput`; nothing else."""
    details = None
    try:
        clean = checked_name(name)
    except InvalidInput as exc:
        details = exc.details
    if details is not None:
        assert details[0]["field"] == "name"
        return
    assert clean == unicodedata.normalize("NFC", name)
    assert text_problem(clean) is None
    assert "/" not in clean
    assert "\\" not in clean
    assert clean not in (".", "..")
    assert len(clean.encode()) <= 255
    assert check_relative_path(clean) == clean
    assert checked_name(clean) == clean


# --- kinds ---------------------------------------------------------------------------------


def test_binary_kinds_are_known_by_their_magic(pdf_bytes: bytes, tmp_path: Path) -> None:
    """PDF, SQLite, Parquet and zip are told by content, whatever the name."""
    db = _sqlite(tmp_path / "x").read_bytes()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.md", "# A")
    assert sniff(pdf_bytes, "report") is SourceKind.pdf
    assert sniff(pdf_bytes, "report.pdf") is SourceKind.pdf
    assert sniff(db[:4096], "data.bin") is SourceKind.sqlite
    assert sniff(parquet_bytes(sample_footer()), "rows.parquet", tail=b"\x00\x00\x00\x00PAR1") is (
        SourceKind.parquet)
    assert sniff(archive.getvalue(), "upload.zip") is Archive.zip


@pytest.mark.parametrize(("content", "name", "kind"), [
    (b"# Title\n\nSome *text*.", "notes.md", SourceKind.markdown),
    (b"# Title\n\nSome *text*.", "notes.markdown", SourceKind.markdown),
    (b"# Title\n\nSome *text*.", "notes", SourceKind.text),
    (b"plain words", "notes.txt", SourceKind.text),
    (b"a,b\n1,2\n", "data.csv", SourceKind.csv),
    (b"a\tb\n1\t2\n", "data.tsv", SourceKind.csv),
    (b"a,b\n1,2\n", "data", SourceKind.text),
    (b"<!DOCTYPE html><html><body><p>x</p></body></html>", "page", SourceKind.html),
    (b"  <!-- saved -->\n<HTML lang=en><p>x", "page.txt", SourceKind.html),
    (b'<?xml version="1.0"?>\n<html xmlns="http://www.w3.org/1999/xhtml">', "p", SourceKind.html),
    (b"just words, no markup", "page.html", SourceKind.html),
    (b"<html><body>Markdown may hold HTML</body></html>", "readme.md", SourceKind.markdown),
    (b"\xef\xbb\xbfwith a byte-order mark", "bom.txt", SourceKind.text),
    ("caf\u00e9 \u2014 \u00fcber".encode(), "utf8.txt", SourceKind.text),
    (b"cut in the middle of \xe2\x82", "cut.txt", SourceKind.text),
])
def test_text_kinds_come_from_content_and_name(content: bytes, name: str,
                                               kind: SourceKind) -> None:
    """Text must be UTF-8; HTML shows by its start, Markdown and CSV by their names."""
    assert sniff(content, name) is kind


def test_text_named_pdf_is_not_a_pdf() -> None:
    """A text file named `.pdf` is refused as 'not a PDF' (422), not as unsupported."""
    with pytest.raises(InvalidInput, match="not a PDF") as caught:
        sniff(b"I am only text", "report.pdf")
    assert not isinstance(caught.value, UnsupportedMedia)
    assert status_for(caught.value) == 422


@pytest.mark.parametrize(("name", "claimed"), [
    ("data.sqlite", "a SQLite database"), ("rows.parquet", "a Parquet file"),
    ("bundle.zip", "a zip archive"),
])
def test_a_name_promising_a_binary_kind_needs_its_content(name: str, claimed: str) -> None:
    """A `.sqlite`, `.parquet` or `.zip` name over other content is refused (422)."""
    with pytest.raises(InvalidInput, match=f"not {claimed}"):
        sniff(b"\x89PNG\r\n\x1a\n" + bytes(100), name)


def test_a_pdf_named_as_csv_is_refused(pdf_bytes: bytes) -> None:
    """A name that contradicts the content is refused, saying both."""
    with pytest.raises(InvalidInput, match="named like a CSV file, but its content is a PDF"):
        sniff(pdf_bytes, "export.csv")


def test_an_html_page_named_csv_is_refused() -> None:
    """A login page saved as `data.csv` is refused rather than read as rows."""
    with pytest.raises(InvalidInput, match="HTML page"):
        sniff(b"<!doctype html><html><head><title>Sign in</title>", "data.csv")


@pytest.mark.parametrize(("head", "what"), [
    (b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + bytes(200), "Windows program"),
    (b"\x7fELF\x02\x01\x01" + bytes(100), "Linux program"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "PNG image"),
    (b"\x1f\x8b\x08\x00" + bytes(50), "gzip"),
    (random.Random(7).randbytes(4096), "binary data"),
    ("\ufeffnotes in UTF-16".encode("utf-16-le"), "UTF-16 text"),
    ("notes in UTF-16".encode("utf-16"), "UTF-16 text"),
    ("Le caf\u00e9 au lait et la cr\u00e8me du matin.".encode("latin-1"), "other than UTF-8"),
])
def test_content_of_no_known_kind_is_unsupported_media(head: bytes, what: str) -> None:
    """Programs, images, compressed files, random bytes and non-UTF-8 text are 415."""
    with pytest.raises(UnsupportedMedia, match=what) as caught:
        sniff(head, "notes.txt")
    assert status_for(caught.value) == 415


def test_utf16_text_is_told_to_become_utf8() -> None:
    """The message for UTF-16 text says how to fix it."""
    with pytest.raises(UnsupportedMedia, match="save it as UTF-8"):
        sniff("hello".encode("utf-16"), "hello.txt")


def test_an_office_document_shoal_cannot_read_is_unsupported_not_a_zip() -> None:
    """A `.pptx` is a zip inside, but it is refused (415), not unpacked; a `.docx` is read
    (`test_office`)."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ppt/presentation.xml", "<p:presentation/>")
    with pytest.raises(UnsupportedMedia, match="PowerPoint presentation"):
        sniff(archive.getvalue(), "slides.pptx")
    assert sniff(archive.getvalue(), "letter.docx") is SourceKind.docx


def test_an_empty_file_is_invalid_not_unsupported() -> None:
    """An empty upload is a 422 saying it is empty."""
    with pytest.raises(InvalidInput, match="empty") as caught:
        sniff(b"", "notes.md")
    assert status_for(caught.value) == 422


def test_a_parquet_file_without_its_footer_magic_is_refused(tmp_path: Path) -> None:
    """With the tail, a Parquet file cut short is refused; `sniff_file` passes the tail."""
    whole = _write(tmp_path, "ok.parquet", parquet_bytes(sample_footer()))
    cut = _write(tmp_path, "cut.parquet", parquet_bytes(sample_footer())[:-20])
    assert sniff_file(whole, "ok.parquet") is SourceKind.parquet
    with pytest.raises(InvalidInput, match="cut short"):
        sniff_file(cut, "cut.parquet")


# --- validation ----------------------------------------------------------------------------


def test_a_real_pdf_passes(pdf_bytes: bytes, tmp_path: Path) -> None:
    """A PDF rendered by WeasyPrint opens and has pages."""
    validate(_write(tmp_path, "r.pdf", pdf_bytes), SourceKind.pdf)


def test_a_broken_pdf_is_refused(pdf_bytes: bytes, tmp_path: Path) -> None:
    """A PDF cut in half, or one with only its magic, is refused as damaged."""
    for data in (pdf_bytes[: len(pdf_bytes) // 2], b"%PDF-1.7\nnothing else\n"):
        with pytest.raises(InvalidInput, match="PDF cannot be read"):
            validate(_write(tmp_path, "broken.pdf", data), SourceKind.pdf)


def test_a_password_protected_pdf_is_refused(pdf_bytes: bytes, tmp_path: Path) -> None:
    """A PDF that needs a password to open is refused with what to do."""
    path = _write(tmp_path, "secret.pdf", _encrypted(pdf_bytes, "secret"))
    with pytest.raises(InvalidInput, match="protected by a password"):
        validate(path, SourceKind.pdf)


def test_a_pdf_with_only_an_owner_password_is_read(pdf_bytes: bytes, tmp_path: Path) -> None:
    """Restrictions without an open password do not stop reading the text."""
    path = _write(tmp_path, "restricted.pdf", _encrypted(pdf_bytes, ""))
    validate(path, SourceKind.pdf)
    assert "Quarterly Title" in extract_text(path, SourceKind.pdf, max_chars=10_000)


def test_a_real_sqlite_database_passes_and_leaves_no_files(tmp_path: Path) -> None:
    """A WAL database is checked and read without a -wal or -shm file appearing."""
    source = _sqlite(tmp_path / "made.db", wal=True)
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "object"
    path.write_bytes(source.read_bytes())
    validate(path, SourceKind.sqlite)
    extract_text(path, SourceKind.sqlite, max_chars=10_000)
    assert [p.name for p in folder.iterdir()] == ["object"]


def test_a_damaged_sqlite_file_is_refused(tmp_path: Path) -> None:
    """A SQLite header over garbage, or a database with its pages overwritten, is refused."""
    db = bytearray(_sqlite(tmp_path / "x.db").read_bytes())
    db[4096:8192] = os.urandom(4096)
    for data in (b"SQLite format 3\x00" + os.urandom(5000), bytes(db)):
        with pytest.raises(InvalidInput, match="SQLite"):
            validate(_write(tmp_path, "bad.db", data), SourceKind.sqlite)


def test_text_must_be_utf8_to_its_end(tmp_path: Path) -> None:
    """A bad byte or a NUL past the sniffed head is still refused."""
    clean = b"# notes\n" * 10_000
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        validate(_write(tmp_path, "a.md", clean + b"\xff"), SourceKind.markdown)
    with pytest.raises(InvalidInput, match="NUL"):
        validate(_write(tmp_path, "b.txt", clean + b"\x00"), SourceKind.text)
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        validate(_write(tmp_path, "c.csv", b"a,b\n" + "\u00e9".encode()[:1]), SourceKind.csv)


def test_a_csv_whose_rows_cannot_be_read_is_refused(tmp_path: Path) -> None:
    """A field past the csv module's limit is refused with the line."""
    path = _write(tmp_path, "big.csv", b"a,b\n" + b"x" * (csv.field_size_limit() + 10) + b",1\n")
    with pytest.raises(InvalidInput, match="cannot be read at line"):
        validate(path, SourceKind.csv)


def test_a_one_column_csv_passes(tmp_path: Path) -> None:
    """A CSV the sniffer cannot find a delimiter in still reads, as one column."""
    validate(_write(tmp_path, "ids.csv", b"id\n1\n2\n3\n"), SourceKind.csv)


def test_an_empty_file_fails_validation(tmp_path: Path) -> None:
    """An empty file is refused whatever its kind."""
    with pytest.raises(InvalidInput, match="empty"):
        validate(_write(tmp_path, "e.md", b""), SourceKind.markdown)


# --- text ----------------------------------------------------------------------------------


def test_pdf_text_marks_its_pages(pdf_bytes: bytes, tmp_path: Path) -> None:
    """Each page's text follows a `[page N]` line."""
    text = extract_text(_write(tmp_path, "r.pdf", pdf_bytes), SourceKind.pdf, max_chars=10_000)
    assert text.index("[page 1]") < text.index("Quarterly Title") < text.index("[page 2]")
    assert text.index("[page 2]") < text.index("Second page text")


def test_a_pdf_without_text_says_so(tmp_path: Path) -> None:
    """A PDF whose pages hold no text (a scan, say) gets a note instead of nothing."""
    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    path = _write(tmp_path, "blank.pdf", out.getvalue())
    validate(path, SourceKind.pdf)
    assert "no text to extract" in extract_text(path, SourceKind.pdf, max_chars=1000)


def test_html_text_is_what_a_reader_sees(tmp_path: Path) -> None:
    """Scripts, styles and comments are dropped; headings, paragraphs, list items and table
    rows get lines of their own (Markdown's), inline text stays joined. More in `test_html`."""
    page = (b"<?xml version='1.0' encoding='utf-8'?>\n<html><head><title>The Page</title>"
            b"<style>p { color: red }</style><script>alert('no')</script></head><body>"
            b"<!-- hidden comment --><h1>Heading</h1><p>Hello <b>bold</b> world</p>"
            b"<ul><li>one</li><li>two</li></ul><p>line<br>break</p>"
            b"<table><tr><td>a</td><td>b</td></tr></table></body></html>")
    text = extract_text(_write(tmp_path, "p.html", page), SourceKind.html, max_chars=10_000)
    assert text.splitlines() == ["# Heading", "", "Hello bold world", "", "- one", "- two", "",
                                 "line", "break", "", "| a | b |", "| --- | --- |"]


def test_deeply_nested_html_reads_in_one_pass(tmp_path: Path) -> None:
    """Twenty thousand unclosed tags read quickly (editing the tree took minutes here)."""
    path = _write(tmp_path, "deep.html", b"<body>" + b"<div><span>x" * 20_000)
    text = extract_text(path, SourceKind.html, max_chars=1_000_000)
    assert text.split() == ["x"] * 20_000


def test_html_past_the_parsing_limit_is_read_in_part(tmp_path: Path) -> None:
    """Only the first `HTML_MAX_BYTES` are parsed, and the text says so."""
    path = _write(tmp_path, "big.html", b"<p>" + b"word " * (HTML_MAX_BYTES // 5))
    text = extract_text(path, SourceKind.html, max_chars=10_000_000)
    assert text.startswith("word word")
    assert text.endswith(f"[… only the first {HTML_MAX_BYTES:,} bytes of the page were read]")


def test_html_that_looks_like_a_url_reads_without_warnings(tmp_path: Path) -> None:
    """Markup bs4 would warn about (a bare URL, a file name) reads quietly as its text."""
    for content in (b"https://example.com/page", b"see notes.txt"):
        path = _write(tmp_path, "u.html", content)
        assert extract_text(path, SourceKind.html, max_chars=100) == content.decode()


def test_markdown_reads_as_is_and_is_cut_with_a_marker(tmp_path: Path) -> None:
    """Text comes back unchanged, or cut at a word to `max_chars` in all with a marker."""
    body = "# Title\n\n" + "word " * 2000
    path = _write(tmp_path, "n.md", b"\xef\xbb\xbf" + body.encode())
    assert extract_text(path, SourceKind.markdown, max_chars=100_000) == body
    cut = extract_text(path, SourceKind.markdown, max_chars=500)
    assert 490 < len(cut) <= 500
    assert cut.startswith("# Title")
    assert cut.endswith(" word\n[… cut at 500 characters]")  # after a word, never inside one
    assert extract_text(path, SourceKind.markdown, max_chars=5) == "# Tit"


def test_max_chars_must_be_positive(tmp_path: Path) -> None:
    """A limit below one character is a programming error."""
    with pytest.raises(ValueError, match="max_chars"):
        extract_text(_write(tmp_path, "n.md", b"x"), SourceKind.markdown, max_chars=0)


def test_csv_text_shows_the_header_first_rows_and_count(tmp_path: Path) -> None:
    """The header, the first rows (quoted as needed) and the count of all rows."""
    lines = ["id;name;note"] + [f'{i};person {i};"semi;colon"' for i in range(100)]
    path = _write(tmp_path, "p.csv", "\n".join(lines).encode())
    validate(path, SourceKind.csv)
    text = extract_text(path, SourceKind.csv, max_chars=100_000)
    assert "100 rows after the header, 3 columns (delimiter ';')" in text
    assert "Columns: id, name, note" in text
    assert "id,name,note\n0,person 0,semi;colon\n" in text
    assert f"{CSV_PREVIEW_ROWS - 1},person {CSV_PREVIEW_ROWS - 1}," in text
    assert f"\n{CSV_PREVIEW_ROWS},person" not in text


def test_csv_rows_past_the_preview_that_break_are_counted_up_to_there(tmp_path: Path) -> None:
    """A broken row after the previewed ones ends the count; the text says so."""
    rows = b"a,b\n" + b"1,2\n" * 30 + b"x" * (csv.field_size_limit() + 1) + b"\n3,4\n"
    path = _write(tmp_path, "late.csv", rows)
    validate(path, SourceKind.csv)
    text = extract_text(path, SourceKind.csv, max_chars=100_000)
    assert "at least 30 rows" in text
    assert "could not be read" in text


def test_sqlite_text_lists_tables_columns_and_counts(tmp_path: Path) -> None:
    """Each table with its columns and row count, and views with their columns."""
    path = _sqlite(tmp_path / "d.sqlite")
    text = extract_text(path, SourceKind.sqlite, max_chars=10_000)
    assert "SQLite database: 2 tables, 1 view." in text
    assert "Table people (3 rows): id INTEGER PRIMARY KEY, name TEXT" in text
    assert 'Table odd "name" (0 rows): x' in text
    assert "View adults: name" in text
