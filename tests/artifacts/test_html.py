"""An HTML page's text is its main content as a person reads it: tried on pages of two real
manuals nobody on this project wrote (`tests/fixtures/manuals/`, see its README), with the
navigation, sidebars and footers their generators (Texinfo, Sphinx) put around them."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from shoal.artifacts.html import page_text
from shoal.artifacts.sources import SourceKind, extract_text

MANUALS = Path(__file__).parent.parent / "fixtures" / "manuals"
LIBFFI = sorted((MANUALS / "libffi").glob("*.html"))
PYTHON = sorted((MANUALS / "python").glob("*.html"))

NAVIGATION = ["Previous topic", "Next topic", "Quick search", "Table of Contents", "Report a Bug",
              "Show Source", "»", "modules |", "Previous:", "Next:", "Up:", "[Index]", "©",
              "Copyright", "Created using", "Last updated", "Found a bug", "licensed under"]
"""Texinfo's and Sphinx's navigation, sidebars and footers: none may appear anywhere."""
NAVIGATION_LINES = {"Go", "Navigation", "This Page", "Theme", "index", "next", "previous"}
"""Lines of those that are words a page might use: none may be a line of its own."""


def _text(page: Path) -> str:
    return extract_text(page, SourceKind.html, max_chars=1_000_000)


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def test_the_fixtures_are_the_manuals_pages() -> None:
    """Five pages of libffi's manual and two of Python's, each with its navigation in it."""
    assert len(LIBFFI) == 5
    assert len(PYTHON) == 2
    assert all("Previous:" in p.read_text() or "Next:" in p.read_text() for p in LIBFFI)
    assert all("Quick search" in p.read_text() and "Previous topic" in p.read_text()
               and "&copy;" in p.read_text() for p in PYTHON)


@pytest.mark.parametrize("page", LIBFFI + PYTHON, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_navigation_or_footer_text_survives(page: Path) -> None:
    """No navigation line, breadcrumb, sidebar heading, search box or copyright footer is in
    the text of any page."""
    text = _text(page)
    assert text.strip()
    assert [words for words in NAVIGATION if words in text] == []
    assert _lines(text) & NAVIGATION_LINES == set()


def test_the_main_paragraphs_survive_whole_under_their_headings() -> None:
    """Each page's paragraphs are there, one to a line, under the page's own heading."""
    texts = {p.stem: _text(p) for p in LIBFFI + PYTHON}
    assert texts["Thread-Safety"].startswith("### 2.7 Thread Safety\n\n")
    assert ("libffi is not completely thread-safe. However, many parts are, and if you follow "
            "some simple rules, you can use it safely in a multi-threaded program."
            ) in _lines(texts["Thread-Safety"])
    assert texts["Memory-Usage"].startswith("## 3 Memory Usage\n\n")
    assert ("does not come from the same general pool of memory that malloc and free use."
            in texts["Memory-Usage"])
    assert texts["Introduction"].startswith("## 1 What is libffi?\n\n")
    assert texts["colorsys"].startswith("# colorsys — Conversions between color systems\n\n")
    assert "## " not in texts["colorsys"]  # no sidebar heading made it in


def test_lists_tables_and_code_keep_their_shape() -> None:
    """List items are `- ` lines (a definition indented under its term, nested lists
    indented), a table is a Markdown table and a code example a fenced block."""
    assert "- A file created in /tmp." in _lines(_text(MANUALS / "libffi" / "Memory-Usage.html"))
    closures = _text(MANUALS / "libffi" / "The-Closure-API.html").splitlines()
    assert "  - closure" in closures
    assert "    - cif" in closures
    grp = _text(MANUALS / "python" / "grp.html").splitlines()
    assert grp[grp.index("| Index | Attribute | Meaning |") + 1] == "| --- | --- | --- |"
    assert "| 2 | gr_gid | the numerical group ID |" in grp
    colorsys = _text(MANUALS / "python" / "colorsys.html")
    assert "```\n>>> import colorsys\n>>> colorsys.rgb_to_hsv(0.2, 0.4, 0.4)\n" in colorsys
    assert "- colorsys.rgb_to_yiq(r, g, b)\n  Convert the color from RGB coordinates to YIQ " \
           "coordinates." in colorsys


def test_a_page_without_headings_is_headed_by_its_title() -> None:
    """Content without a heading of its own gets the page's title as its heading."""
    text = page_text("<html><head><title>Release notes</title></head><body><div>"
                     "<p>The release adds a faster parser and fixes two crashes on start-up. "
                     "It also drops support for the oldest format.</p></div></body></html>")
    assert text.startswith("# Release notes\n\nThe release adds a faster parser")


def test_a_link_in_a_paragraph_is_content_not_navigation() -> None:
    """A paragraph that mentions the next chapter in a sentence stays."""
    text = page_text("<html><body><main><h1>Setup</h1><p>Install the package first, then "
                     "read <a rel='next' href='n.html'>the next chapter</a> on configuring it "
                     "for a server with several users.</p></main></body></html>")
    assert "Install the package first, then read the next chapter on configuring it" in text


def test_a_page_where_trafilatura_finds_nothing_is_read_whole_and_logged() -> None:
    """A bare fragment with no structure falls back to every visible string, and a log line
    says so."""
    with capture_logs() as logs:
        text = page_text("https://example.com/page\n")
    assert text == "https://example.com/page"
    assert [entry["event"] for entry in logs] == ["html.whole_page"]
