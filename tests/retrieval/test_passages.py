"""Citations in the user's own terms, passage ids, resolving either back to the passage, and
quotes found in passages — on real files: a manual's HTML pages, Debian's licence texts (plain
and as a Word document), the sample guide and PDF, and a hyphenated PDF of the Apache licence."""

from __future__ import annotations

import html
import io
import re
import shutil
from pathlib import Path

import pypdf
import pytest
import weasyprint  # type: ignore[import-untyped]

from shoal.retrieval import index as indexes
from shoal.retrieval.passages import SourcePassages, normalise, quote_in, resolve
from tests.artifacts.real_files import apache_sections, write_docx
from tests.retrieval.real_texts import LICENCES, MANUALS
from tests.retrieval.samples import BUILT_FACT, FARE_FACT, write_documents

DASH = "\u2013"


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """A task's sources/: the sample guide and PDF, two pages of libffi's manual, the Apache
    licence as plain text and as a Word document."""
    folder = tmp_path / "sources"
    write_documents(folder)
    for page in ("Thread-Safety.html", "The-Closure-API.html"):
        shutil.copy(MANUALS / "libffi" / page, folder / page)
    shutil.copy(LICENCES / "Apache-2.0", folder / "LICENSE.txt")
    write_docx(folder / "licence.docx")
    return folder


async def _all(sources: Path, index_dir: Path) -> dict[str, list[indexes.Index]]:
    opened = await SourcePassages.open(sources, index_dir)
    by_name: dict[str, list[indexes.Index]] = {}
    for index in opened.indexes:
        by_name.setdefault(index.document, []).append(index)
    return by_name


async def test_labels_name_the_page_or_the_heading_and_lines(sources: Path,
                                                              tmp_path: Path) -> None:
    """A PDF passage is cited by page; Markdown, HTML, Word and plain text by heading and
    lines, the lines of the user's own file for Markdown and text."""
    opened = await SourcePassages.open(sources, tmp_path / "index")
    try:
        chunks = {index.document: index.all_chunks() for index in opened.indexes}
    finally:
        opened.close()
    built = next(c for c in chunks["history.pdf"] if BUILT_FACT in c.text)
    assert built.citation.label() == "history.pdf, page 2"
    fare = next(c for c in chunks["guide.md"] if FARE_FACT in c.text)
    first, last = fare.citation.first_line, fare.citation.last_line
    assert fare.citation.label() == f'guide.md, "Fares", lines {first}{DASH}{last}'
    own = (sources / "guide.md").read_text(encoding="utf-8").splitlines()
    assert fare.text.startswith(own[first - 1].strip()[:40])
    assert fare.text.endswith(own[last - 1].strip()[-40:])
    safety = chunks["Thread-Safety.html"][0]
    assert safety.citation.label() == f'Thread-Safety.html, "2.7 Thread Safety", lines 1{DASH}6'
    licence = chunks["LICENSE.txt"][0]
    assert re.fullmatch(rf"LICENSE\.txt, lines 2{DASH}\d+", licence.citation.label())
    assert (LICENCES / "Apache-2.0").read_text().splitlines()[1].strip() == "Apache License"
    patent = next(c for c in chunks["licence.docx"] if "patent litigation" in c.text)
    assert patent.citation.label().startswith('licence.docx, "3. Grant of Patent License.", ')
    assert all("characters" not in c.citation.label() for cs in chunks.values() for c in cs)


async def test_ids_are_short_unique_and_the_same_wherever_the_file_is_indexed(
        sources: Path, tmp_path: Path) -> None:
    """Every passage's id is the content hash's first 8 digits and its number: unique across
    the task's sources, and the same when another worker indexes the same file elsewhere."""
    here = await SourcePassages.open(sources, tmp_path / "worker-a")
    there = await SourcePassages.open(sources, tmp_path / "worker-b")
    try:
        ids_here = [c.id for index in here.indexes for c in index.all_chunks()]
        ids_there = [c.id for index in there.indexes for c in index.all_chunks()]
        sha = indexes.content_hash(sources / "guide.md")
        guide = next(i for i in here.indexes if i.document == "guide.md").all_chunks()
    finally:
        here.close()
        there.close()
    assert len(set(ids_here)) == len(ids_here) > 20
    assert ids_here == ids_there
    assert [c.id for c in guide][:2] == [f"{sha[:8]}:1", f"{sha[:8]}:2"]


async def test_an_id_or_an_exact_label_resolves_to_the_passage(sources: Path,
                                                                tmp_path: Path) -> None:
    """Resolving a search's id or label gives back the passage's full text and citation; a
    hyphen for the en dash and brackets around the id are fine; anything else is None."""
    opened = await SourcePassages.open(sources, tmp_path / "index")
    try:
        fare = next(c for i in opened.indexes for c in i.all_chunks() if FARE_FACT in c.text)
        by_id = await opened.resolve(f"[{fare.id}]")
        by_label = await opened.resolve(fare.citation.label().replace(DASH, "-"))
        page = await opened.resolve("history.pdf, page 2")
        missing = [await opened.resolve(ref) for ref in (
            "guide.md, \"Fares\", lines 1-2", "00000000:1", f"{fare.id[:8]}:9999",
            "SQL: SELECT 1", "nothing.md, line 1")]
    finally:
        opened.close()
    assert by_id is not None
    assert (by_id.id, by_id.text, by_id.citation) == (fare.id, fare.text, fare.citation)
    assert by_id.label == fare.citation.label()
    assert by_label is not None
    assert FARE_FACT in by_label.text
    assert not by_label.fuzzy  # Markdown: quotes from it must match exactly
    assert page is not None
    assert BUILT_FACT in page.text
    assert page.fuzzy  # text extracted from a PDF
    assert missing == [None] * 5


async def test_a_label_several_passages_share_resolves_to_their_joined_text(
        sources: Path, tmp_path: Path) -> None:
    """The closure API page's long lines give passages of one label: the label resolves to
    all of them, each passage's text in the joined one, once; the one-call `resolve` too."""
    opened = await SourcePassages.open(sources, tmp_path / "index")
    try:
        closure = next(i for i in opened.indexes if i.document == "The-Closure-API.html")
        labels: dict[str, list[str]] = {}
        for chunk in closure.all_chunks():
            labels.setdefault(chunk.citation.label(), []).append(chunk.text)
    finally:
        opened.close()
    shared = [(label, texts) for label, texts in labels.items() if len(texts) > 1]
    for label, texts in shared:
        passage = await resolve(sources, tmp_path / "index", label)
        assert passage is not None
        assert re.fullmatch(r"[0-9a-f]{8}:\d+-\d+", passage.id)
        assert all(normalise(text) in normalise(passage.text) for text in texts)
    one = await resolve(sources, tmp_path / "index", next(iter(labels)))
    assert one is not None
    assert one.text == labels[one.label][0]


def test_a_quote_is_found_whatever_its_quotes_dashes_case_and_spacing() -> None:
    """Curly quotes, dashes, ligatures, case, line breaks, list markers and elided words do
    not matter; other words do."""
    passage = ("## 2.7 Thread Safety\n\nlibffi is not completely thread\u2011safe. However, "
               "many parts are,\nand if you follow some simple rules, you can use it safely.\n"
               "- \u201cffi_prep_cif\u201d may modify the ﬁrst ffi_type object.")
    assert quote_in("LIBFFI is not completely thread-safe.", passage)
    assert quote_in("many parts are, and if you follow", passage)
    assert quote_in('"ffi_prep_cif" may modify the first', passage)
    assert quote_in("\u201clibffi is not completely \u2026 many parts are\u201d", passage)
    assert quote_in("Thread Safety libffi is", passage)
    assert not quote_in("libffi is completely thread-safe", passage)
    assert not quote_in("many parts are ... completely", passage)  # not in that order
    assert not quote_in("   ", passage)


@pytest.fixture(scope="module")
def hyphenated_pages() -> list[str]:
    """The Apache licence rendered as a justified, hyphenated A6 PDF with a running header,
    each page's text as pypdf extracts it (words broken with U+2010 at line ends)."""
    body = "".join(f"<h2>{html.escape(title)}</h2>"
                   + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
                   for title, paragraphs in apache_sections())
    css = ("@page { size: A6; margin: 1cm; @top-center { content: 'Apache License 2.0'; } } "
           "p { hyphens: auto; text-align: justify; }")
    pdf = weasyprint.HTML(string=f"<html lang='en'><style>{css}</style><body>{body}</body>"
                                 "</html>").write_pdf()
    return [page.extract_text() for page in pypdf.PdfReader(io.BytesIO(pdf)).pages]


def _sentences() -> list[str]:
    return [s for _, paragraphs in apache_sections() for paragraph in paragraphs
            for s in re.split(r"(?<=[.;:])\s+", paragraph) if len(s) > 40]


def _holds(page: str, sentence: str) -> bool:
    """Whether the page's text has the sentence's first and last words about a sentence
    apart: it lies on that page."""
    text, words = normalise(page, pdf=True), normalise(sentence).split()
    head, tail = " ".join(words[:4]), " ".join(words[-4:])
    for start in (m.start() for m in re.finditer(re.escape(head), text)):
        end = text.find(tail, start)
        if end >= 0 and 0.8 <= (end + len(tail) - start) / len(" ".join(words)) <= 1.25:
            return True
    return False


def test_quotes_from_a_pdfs_page_are_found_fuzzily_and_only_there(
        hyphenated_pages: list[str]) -> None:
    """Every sentence of the licence lying on one page is found in it with `fuzzy` (several
    only so: words broken at line ends); a figure changed, or a sentence of the GPL, is not."""
    found = fuzzy_only = 0
    for sentence in _sentences():
        page = next((p for p in hyphenated_pages if _holds(p, sentence)), None)
        if page is None:
            continue  # it runs over a page break: no passage holds it whole
        assert quote_in(sentence, page, fuzzy=True), sentence
        found += 1
        fuzzy_only += not quote_in(sentence, page)
    assert found > 15
    assert fuzzy_only > 3
    changed = "ownership of sixty percent (60%) or more of the outstanding shares"
    assert not any(quote_in(changed, page, fuzzy=True) for page in hyphenated_pages)
    gpl = re.split(r"(?<=[.;:])\s+", " ".join((LICENCES / "GPL-3").read_text().split()))
    for sentence in [s for s in gpl if 40 < len(s) < 300][:100]:
        assert not any(quote_in(sentence, page, fuzzy=True) for page in hyphenated_pages)
