"""Reports: Markdown to sanitised HTML, the report page, and the PDF (real markdown-it, nh3,
WeasyPrint and pypdf; the PDF tests skip without Pango, and fail under CI)."""

from __future__ import annotations

import http.server
import io
import logging
import pickle
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from html.parser import HTMLParser

import pypdf
import pytest
from bs4 import BeautifulSoup
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.errors import Unavailable
from shoal.reports import LINK_REL, Report, markdown_to_html, render_pdf, report_page
from tests.conftest import IN_CI

CREATED = datetime(2026, 11, 25, 14, 3, tzinfo=UTC)
TASK_ID = uuid.UUID("5d1f0c3e-8a52-4c1e-9a7b-2f3b3c9d0e11")
HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    '<a href="javascript:alert(1)">click</a>',
    '<a href="JaVa&#x09;ScRiPt:alert(1)">tab</a>',
    '<iframe src="https://example.com/"></iframe>',
    "<style>body { display: none }</style>",
    '<svg onload="alert(1)"><script>alert(2)</script></svg>',
    '<div onclick="alert(1)" style="position:fixed">overlay</div>',
    "[md link](javascript:alert(1))",
    '<object data="https://example.com/x.swf"></object>',
    "<scr<script>ipt>alert(1)</script>",
    '<p><a href="data:text/html,<script>alert(1)</script>">data</a></p>',
]

# Every code point: NUL and other controls included, and lone surrogates (excluded by default).
ANY_CHARACTER = st.one_of(st.characters(exclude_categories=()), st.characters(categories=["Cs"]))


def _pdf_loads() -> bool:
    try:
        import weasyprint  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


needs_pdf = pytest.mark.skipif(
    not _pdf_loads() and not IN_CI,
    reason="WeasyPrint cannot load Pango here: run `make pdf` to render reports as PDF.")


def _report(markdown: str, **changes: object) -> Report:
    fields: dict[str, object] = {
        "title": "Compare three queue designs", "markdown": markdown, "created_at": CREATED,
        "task_id": TASK_ID, "subtitle": "dag"}
    fields.update(changes)
    return Report(**fields)  # type: ignore[arg-type]


def _pages(pdf: bytes) -> list[str]:
    return [page.extract_text() for page in pypdf.PdfReader(io.BytesIO(pdf)).pages]


def _long_markdown(sections: int) -> str:
    parts = []
    for n in range(sections):
        rows = "".join(f"| item {n}.{i} | {i * n} |\n" for i in range(8))
        parts.append(f"## Section {n}\n\nA paragraph of findings, long enough to fill a line "
                     f"or two of the page.\n\n| name | value |\n|---|---:|\n{rows}\n"
                     f"```python\nprint({n})\n```\n")
    return "\n".join(parts)


class _Tags(HTMLParser):
    """Every start tag and its attribute names, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, [name for name, _ in attrs]))


def _tags(html: str) -> list[tuple[str, list[str]]]:
    parser = _Tags()
    parser.feed(html)
    parser.close()
    return parser.tags


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_html_leaves_no_script_handler_or_frame(hostile: str) -> None:
    """Scripts, styles, frames, handlers and script URLs from the Markdown are all gone."""
    soup = BeautifulSoup(markdown_to_html(f"Before\n\n{hostile}\n\nAfter"), "html.parser")
    for tag in ("script", "style", "iframe", "svg", "object", "div"):
        assert soup.find(tag) is None, tag
    for element in soup.find_all(True):
        assert not [name for name in element.attrs if name.lower().startswith("on")]
        assert "style" not in element.attrs
        for name in ("href", "src"):
            url = str(element.get(name, "https:"))
            assert url.split(":", 1)[0].lower() in {"http", "https", "mailto"}, url
    assert "alert(2)" not in soup.get_text()


def test_links_keep_only_absolute_safe_urls_and_get_rel() -> None:
    """Links keep http(s) and mailto URLs, get rel=noopener…, and lose relative URLs."""
    soup = BeautifulSoup(markdown_to_html(
        "[site](https://example.com/a) [mail](mailto:a@example.com) [rel](notes/x.md) "
        '<a href="https://example.com/b" target="_blank" rel="opener">raw</a>'), "html.parser")
    links = {a.get_text(): a for a in soup.find_all("a")}
    assert links["site"]["href"] == "https://example.com/a"
    assert links["mail"]["href"] == "mailto:a@example.com"
    assert "href" not in links["rel"].attrs
    assert "target" not in links["raw"].attrs
    assert all(" ".join(a["rel"]) == LINK_REL for a in links.values())


def test_images_keep_only_http_sources() -> None:
    """An image keeps an http(s) source, without its referrer; file, data and relative go."""
    soup = BeautifulSoup(markdown_to_html(
        "![ok](https://example.com/a.png) ![pw](file:///etc/passwd) "
        '<img src="data:image/png;base64,AAAA" alt="data"> <img src="/api/v1/me" alt="rel"> '
        '<img src="mailto:a@example.com" alt="mail">'), "html.parser")
    images = {img["alt"]: img for img in soup.find_all("img")}
    assert images["ok"]["src"] == "https://example.com/a.png"
    assert images["ok"]["referrerpolicy"] == "no-referrer"
    assert [alt for alt, img in images.items() if "src" in img.attrs] == ["ok"]


def test_tables_and_fenced_code_come_through() -> None:
    """A pipe table becomes a table with a header row and alignment; a fence a pre/code."""
    soup = BeautifulSoup(markdown_to_html(
        "| name | count |\n|:--|--:|\n| a | 1 |\n\n```python\nprint('<b>')\n```\n"),
        "html.parser")
    table = soup.find("table")
    assert table is not None
    assert [th.get_text() for th in table.select("thead th")] == ["name", "count"]
    assert table.select("tbody td")[1]["style"] == "text-align:right"
    code = soup.select_one("pre > code")
    assert code is not None
    assert code["class"] == ["language-python"]
    assert code.get_text() == "print('<b>')\n"


def test_cell_styles_keep_only_text_align() -> None:
    """A raw table cell's style keeps text-align and loses anything else (an overlay)."""
    soup = BeautifulSoup(markdown_to_html(
        '<table><tr><td style="position:fixed;top:0;text-align:center">x</td></tr></table>'),
        "html.parser")
    cell = soup.find("td")
    assert cell is not None
    assert cell["style"] == "text-align:center"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(ANY_CHARACTER), st.sampled_from(HOSTILE),
                          st.sampled_from(["<", ">", "\n", "`", "|", " on", "=", '"'])),
                max_size=12).map("".join))
def test_no_text_makes_scripts_or_handlers(markdown: str) -> None:
    """Any text (NUL and lone surrogates included) renders without raising, and without a
    script tag or an on… attribute."""
    out = markdown_to_html(markdown)
    assert "<script" not in out.lower()
    for tag, names in _tags(out):
        assert tag != "script"
        assert not [name for name in names if name.startswith("on")], (tag, names)
    out.encode("utf-8")  # NUL and lone surrogates became U+FFFD: the output is valid text


def test_page_is_a_complete_escaped_document() -> None:
    """The page has a doctype, lang, charset and escaped title, subtitle and stylesheet URL."""
    page = report_page(_report("# Body", title="Fix </title><script>alert(1)</script> & more",
                               subtitle="<b>pipeline</b>"),
                       stylesheet_href='/static/site.css?v="1"')
    assert page.startswith("<!DOCTYPE html>\n<html lang=\"en\">")
    soup = BeautifulSoup(page, "html.parser")
    assert soup.find("meta", charset="utf-8") is not None
    assert soup.title is not None
    assert soup.title.get_text() == "Fix </title><script>alert(1)</script> & more"
    assert soup.find("script") is None
    assert soup.select_one(".subtitle").get_text() == "<b>pipeline</b>"  # type: ignore[union-attr]
    assert soup.find("link", rel="stylesheet")["href"] == '/static/site.css?v="1"'  # type: ignore[index]
    assert len(soup.find_all("style")) == 1
    assert soup.select_one("main.report-body h1").get_text() == "Body"  # type: ignore[union-attr]


def test_page_shows_the_date_in_utc_and_a_long_title_shortened_in_its_head() -> None:
    """The date is shown in UTC, whatever the zone given; <title> holds a one-line excerpt."""
    moment = datetime(2026, 11, 26, 1, 30, tzinfo=timezone(timedelta(hours=3)))
    title = "Plan the migration\n" + "and the rollout " * 40
    soup = BeautifulSoup(report_page(_report("x", created_at=moment, title=title)), "html.parser")
    assert soup.find("time").get_text() == "2026-11-25 22:30 UTC"  # type: ignore[union-attr]
    head = soup.title.get_text()  # type: ignore[union-attr]
    assert head.startswith("Plan the migration and the rollout")
    assert head.endswith("…")
    assert len(head) <= 120
    assert soup.find("h1", class_="long").get_text() == title  # type: ignore[union-attr]


@needs_pdf
def test_pdf_opens_with_a_title_page_then_the_headings() -> None:
    """pypdf reads the PDF: page 1 is the title page, the headings follow on numbered pages."""
    pdf = render_pdf(_report("# Findings\n\nAll good.\n\n## Next steps\n\n- ship it\n"))
    assert pdf.startswith(b"%PDF-")
    pages = _pages(pdf)
    first = pages[0]
    for text in ("Compare three queue designs", "dag", "2026-11-25 14:03 UTC", str(TASK_ID)):
        assert text in first
    assert "Findings" not in first
    assert "Page 1" not in first  # the title page has no number
    rest = "\n".join(pages[1:])
    for text in ("Findings", "Next steps", "ship it"):
        assert text in rest
    assert f"Page 2 of {len(pages)}" in pages[1]
    metadata = pypdf.PdfReader(io.BytesIO(pdf)).metadata
    assert metadata is not None
    assert metadata.title == "Compare three queue designs"


@needs_pdf
def test_pdf_page_count_grows_with_content() -> None:
    """More sections make more pages."""
    short = len(_pages(render_pdf(_report(_long_markdown(1)))))
    long = len(_pages(render_pdf(_report(_long_markdown(12)))))
    assert short == 2
    assert long > short + 2


@needs_pdf
def test_pdf_table_repeats_its_header_on_every_page() -> None:
    """A table longer than a page shows its header row again on each page it spans."""
    rows = "".join(f"| row {i} | {'a cell of text ' * 4} |\n" for i in range(150))
    pages = _pages(render_pdf(_report(f"# Table\n\n| name | notes |\n|---|---|\n{rows}")))
    assert len(pages) >= 4
    for page in pages[1:]:  # the first of them opens with the heading "Table"
        assert "name notes" in page.split("\n")[:2]


@pytest.fixture
def http_requests() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server on a thread: its base URL and the paths it was asked for."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@needs_pdf
def test_pdf_fetches_no_url(http_requests: tuple[str, list[str]],
                            caplog: pytest.LogCaptureFixture) -> None:
    """An image on a reachable HTTP server, and one on the file system, are never fetched."""
    base, seen = http_requests
    with urllib.request.urlopen(f"{base}/control", timeout=5) as answer:  # it does answer
        assert answer.read() == b"ok"
    markdown = (f"# Images\n\n![remote]({base}/md.png) ![local](file:///etc/passwd)\n\n"
                f'<img src="{base}/raw.png" alt="raw"> <img src="file:///etc/passwd" alt="x">\n')
    assert f'src="{base}/md.png"' in markdown_to_html(markdown)  # it does reach WeasyPrint
    with caplog.at_level(logging.ERROR, logger="weasyprint"):
        pages = _pages(render_pdf(_report(markdown)))
    assert seen == ["/control"]
    assert f"URI uses disallowed protocol: {base}/md.png" in caplog.text
    assert "/etc/passwd" not in caplog.text  # dropped before rendering
    for alt in ("remote", "raw"):  # an image that cannot load shows its alt text
        assert alt in pages[1]


def test_report_pickles_for_a_renderer_process() -> None:
    """A report survives pickling, so `render_pdf` can run in a process pool."""
    report = _report("# x")
    assert pickle.loads(pickle.dumps(report)) == report


def test_render_pdf_without_weasyprint_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that cannot load WeasyPrint gets Unavailable telling it to run `make pdf`."""
    monkeypatch.setitem(sys.modules, "weasyprint", None)  # as if it were not installed
    with pytest.raises(Unavailable, match="make pdf") as caught:
        render_pdf(_report("# x"))
    assert caught.value.code == "pdf_unavailable"
    assert "HTML" in caught.value.message


def test_importing_reports_does_not_load_weasyprint() -> None:
    """`import shoal.reports` works without Pango: WeasyPrint loads only for a PDF."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys, shoal.reports; print('weasyprint' in sys.modules)"],
        capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
