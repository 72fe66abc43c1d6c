"""What a user's uploaded file is, whether it really is that, and the text a model reads of it.

A source is one file a user uploads with a task: a document (Markdown, plain text, HTML, PDF,
Word) or data (CSV, Parquet, SQLite, Excel). The upload route runs these synchronous functions in
`asyncio.to_thread`, in this order:

1. `checked_name(name)`: the client's file name, refused or normalised (NFC).
2. `sniff_file(path, name)` (or `sniff(head, name, tail=…)`): the kind, from the content first;
   the name only separates what content cannot (Markdown, text and CSV are all UTF-8 text).
   A `.docx` or `.xlsx` is a zip inside, told apart by its name (and checked by `validate`);
   any other `.zip` is `Archive.zip`, a container and not a source: `expand_zip` (in
   `shoal.artifacts.archives`) unpacks it into files that go through these same steps, so
   `validate` and `extract_text` never see a zip.
3. `validate(path, kind)`: deeper checks that the whole file is what its kind says.
4. `extract_text(path, kind, max_chars=…)`: at most `max_chars` characters for a model.

Refusals are `InvalidInput` (422), with a message a person can act on; a file of a kind Shoal
cannot read at all (an image, a program, UTF-16 text) is `UnsupportedMedia` (415).
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import re
import sqlite3
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import closing
from enum import StrEnum
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from pypdf import PageObject, PasswordType, PdfReader

from shoal.artifacts.html import page_text
from shoal.artifacts.office import docx_text, plural, validate_docx, validate_xlsx, xlsx_text
from shoal.artifacts.parquet import read_parquet_summary
from shoal.artifacts.paths import check_relative_path, label
from shoal.errors import InvalidInput, UnsafePath, UnsupportedMedia
from shoal.limits import shown, storable_text, text_problem

HEAD_BYTES = 8192
"""How many leading bytes `sniff` wants (fewer is fine for a shorter file)."""

TAIL_BYTES = 8
"""How many trailing bytes `sniff` wants: a Parquet footer's length and magic."""

MAX_NAME_BYTES = 255
"""The longest file name, in UTF-8 bytes: the limit of common file systems."""

CSV_PREVIEW_ROWS = 20
"""How many rows after the header a CSV's text shows."""

HTML_MAX_BYTES = 1 << 20
"""How much of an HTML file `extract_text` parses: its visible text is a fraction of it, and
parsing costs about 200 bytes of memory per byte of markup at worst (a tag in every 3 bytes)."""


class SourceKind(StrEnum):
    """What a source file is: how it is validated and how its text is extracted."""

    markdown = "markdown"
    text = "text"
    html = "html"
    pdf = "pdf"
    csv = "csv"
    parquet = "parquet"
    sqlite = "sqlite"
    docx = "docx"
    xlsx = "xlsx"


class Archive(StrEnum):
    """An upload that holds sources rather than being one: `expand_zip` unpacks it."""

    zip = "zip"


_READS = ("Shoal reads Markdown, plain text, CSV and HTML (in UTF-8), PDF, Word (.docx), Excel "
          "(.xlsx), Parquet and SQLite files, or a .zip of them.")
_EXTENSIONS: dict[str, SourceKind | Archive] = {
    ".md": SourceKind.markdown, ".markdown": SourceKind.markdown, ".mdown": SourceKind.markdown,
    ".mkd": SourceKind.markdown, ".txt": SourceKind.text, ".text": SourceKind.text,
    ".html": SourceKind.html, ".htm": SourceKind.html, ".xhtml": SourceKind.html,
    ".pdf": SourceKind.pdf, ".csv": SourceKind.csv, ".tsv": SourceKind.csv,
    ".parquet": SourceKind.parquet, ".pq": SourceKind.parquet, ".sqlite": SourceKind.sqlite,
    ".sqlite3": SourceKind.sqlite, ".db": SourceKind.sqlite, ".zip": Archive.zip,
    ".docx": SourceKind.docx, ".xlsx": SourceKind.xlsx,
}
_ARTICLES = {SourceKind.markdown: "a Markdown file", SourceKind.text: "a text file",
             SourceKind.html: "an HTML page", SourceKind.pdf: "a PDF",
             SourceKind.csv: "a CSV file", SourceKind.parquet: "a Parquet file",
             SourceKind.sqlite: "a SQLite database", SourceKind.docx: "a Word document",
             SourceKind.xlsx: "an Excel workbook", Archive.zip: "a zip archive"}
_MAGIC: tuple[tuple[bytes, SourceKind | Archive], ...] = (
    (b"%PDF-", SourceKind.pdf), (b"SQLite format 3\x00", SourceKind.sqlite),
    (b"PAR1", SourceKind.parquet), (b"PK\x03\x04", Archive.zip), (b"PK\x05\x06", Archive.zip),
)
_ZIP_FORMATS = {".docm": "a Word document with macros", ".xlsm": "an Excel workbook with macros",
                ".pptx": "a PowerPoint presentation", ".odt": "an OpenDocument text",
                ".ods": "an OpenDocument spreadsheet", ".epub": "an EPUB book",
                ".jar": "a Java archive", ".apk": "an Android package"}
_FOREIGN: tuple[tuple[bytes, str], ...] = (  # only to name what was refused
    (b"\xff\xfe\x00\x00", "UTF-32 text"), (b"\x00\x00\xfe\xff", "UTF-32 text"),
    (b"\xff\xfe", "UTF-16 text"), (b"\xfe\xff", "UTF-16 text"),
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"II*\x00", "a TIFF image"), (b"MM\x00*", "a TIFF image"), (b"MZ", "a Windows program"),
    (b"\x7fELF", "a Linux program"), (b"\xcf\xfa\xed\xfe", "a macOS program"),
    (b"\x1f\x8b", "a gzip-compressed file"), (b"\xfd7zXZ\x00", "an xz-compressed file"),
    (b"7z\xbc\xaf", "a 7-Zip archive"), (b"Rar!", "a RAR archive"),
    (b"\xd0\xcf\x11\xe0", "an old Microsoft Office document (.doc, .xls or .ppt)"),
    (b"PARE", "an encrypted Parquet file"), (b"RIFF", "a media file (WAV, AVI or WebP)"),
    (b"ID3", "an MP3 file"), (b"OggS", "an Ogg media file"),
)
_OLE = b"\xd0\xcf\x11\xe0"  # an OLE container: old Office files, and encrypted new ones
_ZIPPED_KINDS = frozenset({SourceKind.docx, SourceKind.xlsx})
_HTML_START = re.compile(r"\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*"
                         r"<(?:!doctype\s+html|html|head|body)[\s>/]", re.IGNORECASE | re.DOTALL)
# Bidirectional overrides and isolates make `photo\u202egpj.exe` display as `photoexe.jpg`.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_TEXT_CONTROLS = frozenset("\t\n\r\f\v\x1b")


# --- names ----------------------------------------------------------------------------------


def checked_name(name: str) -> str:
    """The client's file name in NFC, or `UnsafePath` (an `InvalidInput`, 422) naming the field
    `name` when it is empty, holds a NUL, a control character, a bidirectional control or a
    lone surrogate, is `.` or `..`, holds `/` or `\\`, starts with `~`, or is over 255 bytes
    in UTF-8. A name that comes back is also a safe one-part path for `check_relative_path`."""
    problem = name_problem(name)
    if problem is None:
        return unicodedata.normalize("NFC", name)
    raise UnsafePath(f"The file name {label(name)} {problem}. Rename the file and upload it "
                     "again.", details=[{"field": "name", "message": problem,
                                         "type": UnsafePath.code}])


def name_problem(name: str) -> str | None:
    """Why `checked_name` would refuse `name`, as a clause such as "is empty", or None if
    it is a clean name (`checked_name` still normalises that to NFC)."""
    if problem := text_problem(name):
        return problem
    name = unicodedata.normalize("NFC", name)
    if not name.strip():
        return "is empty"
    if bad := next((c for c in name if unicodedata.category(c) == "Cc"
                    or c in _BIDI_CONTROLS), None):
        return f"contains the control character U+{ord(bad):04X}"
    if "/" in name or "\\" in name:
        return "contains '/' or '\\': give the file's own name, without folders"
    if name in (".", ".."):
        return "is '.' or '..', which name folders, not files"
    if name.startswith("~"):
        return "starts with '~', which reads as a home folder"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes in UTF-8"
    try:  # the store's own rule for paths is the last word
        check_relative_path(name)
    except UnsafePath as exc:
        return f"is refused ({exc.message})"
    return None


# --- kinds ----------------------------------------------------------------------------------


def sniff_file(path: Path, name: str) -> SourceKind | Archive:
    """`sniff` on the file at `path`: reads its first `HEAD_BYTES` and last `TAIL_BYTES`."""
    with path.open("rb") as file:
        head = file.read(HEAD_BYTES)
        size = file.seek(0, io.SEEK_END)
        file.seek(max(0, size - TAIL_BYTES))
        return sniff(head, name, tail=file.read(TAIL_BYTES))


def sniff(head: bytes, name: str, *, tail: bytes = b"") -> SourceKind | Archive:
    """The kind of a file from its first bytes `head` (`HEAD_BYTES` of them, or the whole file
    if shorter) and its last bytes `tail` (optional: with it, a Parquet file's closing magic
    is checked too). Content decides; the name only tells Markdown, text and CSV apart, and
    names HTML that does not start like a page.

    Raises `InvalidInput` (422) for an empty file, a name that contradicts the content
    (`report.pdf` holding text: "not a PDF") or a Parquet file without its closing magic,
    and `UnsupportedMedia` (415) for content of no kind Shoal reads.
    """
    if not head:
        raise InvalidInput(f"{label(name)} is empty. Upload a file with content.")
    claimed = _EXTENSIONS.get(PurePosixPath(name).suffix.lower())
    found = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
    if claimed in _ZIPPED_KINDS and head.startswith(_OLE):
        raise InvalidInput(f"{label(name)} is {_ARTICLES[claimed]} protected by a password (or "
                           "an older .doc/.xls file renamed). Open it, remove the password or "
                           f"save it as {PurePosixPath(name).suffix.lower()}, and upload it "
                           "again.")
    if found is not None:
        return _binary_kind(found, claimed, name, tail)
    if claimed is not None and claimed not in _TEXT_KINDS:
        raise InvalidInput(f"{label(name)} is not {_ARTICLES[claimed]}: its content does not "
                           f"start like one. Check that it is the right file.")
    text = _head_text(head)
    if text is None:
        what, hint = _foreign(head)
        raise UnsupportedMedia(f"{label(name)} is {what}, which Shoal cannot read{hint}. "
                               f"{_READS}", details={"name": shown(name)})
    return _text_kind(text, claimed, name)


_TEXT_KINDS = frozenset({SourceKind.markdown, SourceKind.text, SourceKind.html, SourceKind.csv})


def _binary_kind(found: SourceKind | Archive, claimed: SourceKind | Archive | None, name: str,
                 tail: bytes) -> SourceKind | Archive:
    suffix = PurePosixPath(name).suffix.lower()
    if found is Archive.zip and claimed in _ZIPPED_KINDS:
        return claimed  # `validate` checks the zip is that document and no bomb
    if found is Archive.zip and suffix in _ZIP_FORMATS:
        raise UnsupportedMedia(f"{label(name)} is {_ZIP_FORMATS[suffix]}, which Shoal cannot "
                               f"read; save it as PDF, .docx or .xlsx. {_READS}",
                               details={"name": shown(name)})
    if claimed is not None and claimed is not found:
        raise InvalidInput(f"{label(name)} is named like {_ARTICLES[claimed]}, but its content "
                           f"is {_ARTICLES[found]}. Rename it, or upload the file you meant.")
    if found is SourceKind.parquet and tail and not tail.endswith(b"PAR1"):
        raise InvalidInput(f"{label(name)} starts like a Parquet file but does not end like "
                           "one: it is cut short or damaged. Upload the whole file.")
    return found


def _head_text(head: bytes) -> str | None:
    """`head` as text if it reads as UTF-8 text (a BOM allowed, a cut last character too)."""
    head = head.removeprefix(codecs.BOM_UTF8)
    if b"\x00" in head:
        return None
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return None
    controls = sum(1 for c in text if c < " " and c not in _TEXT_CONTROLS)
    return None if controls * 100 > len(text) else text


def _text_kind(text: str, claimed: SourceKind | Archive | None, name: str) -> SourceKind:
    looks_html = _HTML_START.match(text) is not None
    if claimed is SourceKind.csv and looks_html:
        raise InvalidInput(f"{label(name)} is named like a CSV file, but it is an HTML page "
                           "(often a login or error page saved instead of the data). "
                           "Download the data again.")
    if isinstance(claimed, SourceKind) and claimed is not SourceKind.text:
        return claimed  # Markdown may hold HTML: a name that says which kind of text wins
    return SourceKind.html if looks_html else SourceKind.text


def _foreign(head: bytes) -> tuple[str, str]:
    """What non-text, unsupported content looks like, and a hint for text in other encodings."""
    what = next((what for magic, what in _FOREIGN if head.startswith(magic)), None)
    if what is None and b"\x00" not in head and sum(
            32 <= b < 127 or b in b"\t\r\n" for b in head) * 10 >= len(head) * 9:
        what = "text in an encoding other than UTF-8 (such as Latin-1)"
    if what is None:
        return "binary data of a kind Shoal does not know", ""
    return what, "; save it as UTF-8 and upload it again" if "text" in what else ""


# --- validation -----------------------------------------------------------------------------


def validate(path: Path, kind: SourceKind) -> None:
    """Check that the whole file at `path` is what `kind` says, beyond its first bytes.

    Text kinds must be UTF-8 without NULs; a CSV's first rows must parse; a PDF must open
    (not password-protected) and have pages; a SQLite database must open read-only and pass
    `PRAGMA quick_check`; a Parquet file needs both magics and a readable footer; a Word
    document or Excel workbook must be one, unencrypted, no archive bomb, and open
    (`shoal.artifacts.office`).
    Raises `InvalidInput` (422) saying what is wrong; I/O errors (`OSError`) pass through.
    """
    if path.stat().st_size == 0:
        raise InvalidInput("The file is empty. Upload a file with content.")
    _VALIDATORS[kind](path)


def _check_utf8(path: Path) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                if (nul := chunk.find(b"\x00")) >= 0:
                    raise InvalidInput(f"The file holds a NUL byte at byte {offset + nul}, so it "
                                       "is not text. Check that it is the right file.")
                decoder.decode(chunk)
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"The file is not valid UTF-8 text (near byte {offset + exc.start}). "
                           "Save it as UTF-8 and upload it again.") from None


def _validate_csv(path: Path) -> None:
    _check_utf8(path)
    with path.open(encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file, _csv_dialect(path))
        try:
            rows = list(itertools.islice(reader, CSV_PREVIEW_ROWS + 1))
        except csv.Error as exc:
            raise InvalidInput(f"The CSV file cannot be read at line {reader.line_num}: {exc}. "
                               "Check that it is a CSV file.") from None
    if not rows:
        raise InvalidInput("The CSV file has no rows.")


_CSV_SAMPLE_CHARS = 8192  # the sniffer is quadratic on some input: 8 KiB costs < 0.5 s


def _csv_dialect(path: Path) -> type[csv.Dialect]:
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as file:
        sample = file.read(_CSV_SAMPLE_CHARS)
    sample = sample[: sample.rfind("\n") + 1] or sample  # whole lines read best
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:  # one column, or too little to tell: the standard dialect reads it
        return csv.excel


def _validate_pdf(path: Path) -> None:
    try:
        pages = len(_open_pdf(path).pages)
    except (InvalidInput, OSError):
        raise
    except Exception as exc:  # pypdf parses hostile bytes: any failure means a broken file
        raise InvalidInput(f"The PDF cannot be read ({str(exc)[:200]}); it may be damaged. "
                           "Save or print it to PDF again and upload the new file.") from None
    if pages == 0:
        raise InvalidInput("The PDF has no pages.")


def _open_pdf(path: Path) -> PdfReader:
    reader = PdfReader(path)
    # A PDF with only an owner password ("no printing") opens with the empty user password.
    if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise InvalidInput("The PDF is protected by a password. Remove the password (save or "
                           "print it to PDF without security) and upload it again.")
    return reader


def _validate_sqlite(path: Path) -> None:
    try:
        with closing(_open_sqlite(path)) as db:
            result = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"The file is not a readable SQLite database ({exc}). Check that it "
                           "is the right file and not encrypted.") from None
    if result != [("ok",)]:
        problem = result[0][0] if result else "no answer to a check"
        raise InvalidInput(f"The SQLite database is damaged ({problem}). Repair it (for "
                           "example with `sqlite3 file.db .recover`) and upload it again.")


def _open_sqlite(path: Path) -> sqlite3.Connection:
    # Read-only alone still creates -wal and -shm files beside a WAL database: immutable
    # keeps the store's folder untouched (nobody writes an uploaded file).
    db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True)
    db.execute("PRAGMA trusted_schema = OFF")  # the file's views and triggers call nothing
    return db


def _validate_parquet(path: Path) -> None:
    try:
        read_parquet_summary(path)
    except ValueError as exc:
        raise InvalidInput(f"The Parquet file cannot be read: {exc}. Write it again and upload "
                           "the new file.") from None


# --- text -----------------------------------------------------------------------------------


def extract_text(path: Path, kind: SourceKind, *, max_chars: int) -> str:
    """The text a model reads of a file that passed `validate`, at most `max_chars` characters
    (a cut ends with a marker saying so), storable (no NUL, no lone surrogate).

    Markdown and text as they are; HTML's main content without its navigation and boilerplate
    (`shoal.artifacts.html`: headings as Markdown headings, a line per paragraph, list item and
    table row); each PDF page's text after a `[page N]` line; a Word document's body the same
    way as HTML's; each Excel sheet's size, columns and first rows; a CSV's header, first
    `CSV_PREVIEW_ROWS` rows and row count; each SQLite table's columns and row count; a Parquet
    file's row count and columns from its footer (its values are for the data tools).
    Raises only `OSError`, on I/O errors.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, not {max_chars}")
    return _truncated(storable_text(_EXTRACTORS[kind](path, max_chars)), max_chars)


def _truncated(text: str, max_chars: int) -> str:
    """`text`, or its start and a marker in `max_chars` in all, cut after a line or at least
    a word: never inside one (unless the one word is longer than the room)."""
    if len(text) <= max_chars:
        return text
    marker = f"\n[… cut at {max_chars:,} characters]"
    room = max_chars - len(marker)
    if room <= 0:
        return text[:max_chars]
    line = text.rfind("\n", 0, room + 1)
    cut = line if line * 2 >= room else max(text.rfind(" ", 0, room + 1), 0) or room
    return text[:cut].rstrip() + marker


def _plain_text(path: Path, max_chars: int) -> str:
    with path.open("rb") as file:  # one character is at most 4 bytes, and a BOM 3
        data = file.read(max_chars * 4 + 4)
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(
        data.removeprefix(codecs.BOM_UTF8))


def _html_text(path: Path, _max_chars: int) -> str:
    with path.open("rb") as file:
        data = file.read(HTML_MAX_BYTES + 1)
    markup = data[:HTML_MAX_BYTES].decode("utf-8", errors="replace").removeprefix("\ufeff")
    # An XML declaration, or markup like a bare URL or file name, makes bs4 warn; the page
    # reads the same without the one and with a trailing newline.
    text = page_text(re.sub(r"^\s*<\?xml[^>]*>", "", markup) + "\n")
    if len(data) > HTML_MAX_BYTES:
        text += f"\n[… only the first {HTML_MAX_BYTES:,} bytes of the page were read]"
    return text


def _pdf_text(path: Path, max_chars: int) -> str:
    reader = _open_pdf(path)
    parts: list[str] = []
    size = found = 0
    for number, page in enumerate(reader.pages, start=1):
        text = _page_text(page).strip()
        found += len(text)
        parts.append(f"[page {number}]\n{text}")
        size += len(parts[-1]) + 2
        if size > max_chars:
            break
    if not found:
        parts.append("[This PDF has no text to extract: its pages may be scanned images.]")
    return "\n\n".join(parts)


def _page_text(page: PageObject) -> str:
    try:
        return page.extract_text()
    except Exception:  # one bad page (an odd font, a broken stream) must not lose the rest
        return "[the text of this page could not be read]"


def _csv_text(path: Path, max_chars: int) -> str:
    dialect = _csv_dialect(path)
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as file:
        reader = csv.reader(file, dialect)
        preview = list(itertools.islice(reader, CSV_PREVIEW_ROWS + 1))
        more, stopped = _count_rows(reader)
    if not preview:
        return "CSV file with no rows."
    header, rows = preview[0], preview[1:]
    total = len(rows) + more
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(preview)
    counted = ("at least " if stopped else "") + plural(total, "row")
    lines = [f"CSV file: {counted} after the header, {plural(len(header), 'column')} "
             f"(delimiter {dialect.delimiter!r}).",
             f"Columns: {', '.join(header)}",
             f"The header and the first {plural(len(rows), 'row')}, as CSV:",
             out.getvalue().rstrip("\n")]
    if stopped:
        lines.append(f"[rows past {total:,} could not be read: {stopped}]")
    return "\n".join(lines)


def _count_rows(reader: Iterator[list[str]]) -> tuple[int, str]:
    count = 0
    try:
        for _ in reader:
            count += 1
    except csv.Error as exc:
        return count, str(exc)
    return count, ""


def _sqlite_text(path: Path, max_chars: int) -> str:
    with closing(_open_sqlite(path)) as db:
        objects = db.execute("SELECT type, name FROM sqlite_master WHERE type IN "
                             "('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                             "ORDER BY type, name").fetchall()
        tables = sum(kind == "table" for kind, _ in objects)
        lines = [f"SQLite database: {plural(tables, 'table')}, "
                 f"{plural(len(objects) - tables, 'view')}."]
        size = 0
        for kind, name in objects:
            lines.append(_sqlite_object(db, kind, name))
            size += len(lines[-1])
            if size > max_chars:
                break
    return "\n".join(lines)


def _sqlite_object(db: sqlite3.Connection, kind: str, name: str) -> str:
    try:
        columns = db.execute("SELECT name, type, pk FROM pragma_table_info(?)", (name,)).fetchall()
        described = ", ".join(f"{c} {t}".strip() + (" PRIMARY KEY" if pk else "")
                              for c, t, pk in columns)
        if kind == "view":
            return f"View {name}: {described}"
        quoted = name.replace('"', '""')
        (rows,) = db.execute(f'SELECT count(*) FROM "{quoted}"').fetchone()
    except sqlite3.Error as exc:  # a virtual table whose module is missing, say
        return f"{kind.capitalize()} {name}: could not be read ({exc})"
    return f"Table {name} ({plural(rows, 'row')}): {described}"


def _parquet_text(path: Path, _max_chars: int) -> str:
    summary = read_parquet_summary(path)
    writer = f", written by {summary.created_by}" if summary.created_by else ""
    return "\n".join([f"Parquet file: {plural(summary.rows, 'row')} in "
                      f"{plural(summary.row_groups, 'row group')}, "
                      f"{plural(len(summary.columns), 'column')}{writer}.", "Columns:",
                      *(f"- {column}" for column in summary.columns)])


_VALIDATORS: dict[SourceKind, Callable[[Path], None]] = {
    SourceKind.markdown: _check_utf8, SourceKind.text: _check_utf8,
    SourceKind.html: _check_utf8, SourceKind.csv: _validate_csv, SourceKind.pdf: _validate_pdf,
    SourceKind.sqlite: _validate_sqlite, SourceKind.parquet: _validate_parquet,
    SourceKind.docx: validate_docx, SourceKind.xlsx: validate_xlsx,
}
_EXTRACTORS: dict[SourceKind, Callable[[Path, int], str]] = {
    SourceKind.markdown: _plain_text, SourceKind.text: _plain_text, SourceKind.html: _html_text,
    SourceKind.pdf: _pdf_text, SourceKind.csv: _csv_text, SourceKind.sqlite: _sqlite_text,
    SourceKind.parquet: _parquet_text, SourceKind.docx: docx_text, SourceKind.xlsx: xlsx_text,
}
