"""A task's report: its Markdown as sanitised HTML, as a complete page, and as a PDF.

A report is written by a model, so its Markdown is untrusted. It is rendered as CommonMark with
tables and strikethrough (`markdown-it-py`; raw HTML is parsed, so a model's `<br>`, `<sub>` or
`<details>` survive), then everything passes `nh3` with an allow-list:

- tags: headings, paragraphs, lists, tables, `pre`/`code`, blockquotes, emphasis, `a`, `img`,
  `details`/`summary`, `sub`/`sup`, `kbd`, `br`/`hr`; anything else is unwrapped (its text
  kept), and `script`, `style`, `iframe`, `object`, `svg`, `math`, `noscript` and `template`
  are dropped with their content;
- no event handlers, `id`, `class` or `style` attributes, except a `language-…` class on
  `code` and `text-align` on table cells (what table alignment produces);
- links and images keep only absolute `http`/`https` URLs (links may be `mailto:` too);
  relative URLs are dropped, as a report has no base to resolve them against. Links get
  `rel="noopener noreferrer nofollow"`; images `referrerpolicy="no-referrer"` and lazy
  loading, since a remote image on a shared page tells its server who is reading.

The PDF is rendered from the same page with WeasyPrint (needs Pango: `make pdf`), offline:
its URL fetcher refuses every URL, so no image, stylesheet or font is ever fetched from the
network or the file system (an image shows its alt text). `render_pdf` blocks; callers on the
event loop run it through `asyncio.to_thread`.
"""

from __future__ import annotations

import functools
import html
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from types import MappingProxyType, ModuleType

import nh3
from markdown_it import MarkdownIt

from shoal.errors import Unavailable
from shoal.limits import storable_text

ALLOWED_TAGS = frozenset({
    "h1", "h2", "h3", "h4", "h5", "h6", "p", "br", "hr", "blockquote", "pre", "code", "kbd",
    "ul", "ol", "li", "dl", "dt", "dd", "table", "caption", "thead", "tbody", "tfoot", "tr",
    "th", "td", "em", "strong", "b", "i", "del", "s", "sub", "sup", "a", "img", "details",
    "summary",
})
"""The tags a report keeps; any other tag is removed and its text kept."""

DROPPED_WITH_CONTENT = frozenset({
    "script", "style", "iframe", "object", "svg", "math", "noscript", "template",
})
"""Tags removed together with everything inside them."""

ALLOWED_ATTRIBUTES: Mapping[str, frozenset[str]] = MappingProxyType({
    "a": frozenset({"href", "title"}),
    "img": frozenset({"src", "alt", "title"}),
    "ol": frozenset({"start"}),
    "th": frozenset({"style", "colspan", "rowspan"}),
    "td": frozenset({"style", "colspan", "rowspan"}),
    "code": frozenset({"class"}),
})
"""The attributes each tag keeps (their values are checked further by `_checked_attribute`)."""

LINK_REL = "noopener noreferrer nofollow"
"""The `rel` every link gets."""

TITLE_SHORT = 120
"""At most this many characters of the title go into `<title>` (and the PDF's metadata)."""

_LONG_TITLE = 160
_LANGUAGE_CLASS = re.compile(r"language-[\w+#.-]{1,40}", re.ASCII)
_NO_PDF = ("PDF rendering is not available on this machine: WeasyPrint could not be loaded "
           "({reason}). It needs the Pango library: run `make pdf` (on Debian: apt-get install "
           "libpango-1.0-0 libpangoft2-1.0-0) and restart Shoal. The report can still be read "
           "as HTML.")


@dataclass(frozen=True, slots=True)
class Report:
    """What a report page shows: the task's description as its title, an optional subtitle
    (such as the workflow's name), when the task was created, its id, and the report itself."""

    title: str
    markdown: str
    created_at: datetime
    task_id: uuid.UUID | None  # None: not shown (a public page tells nothing of the task)
    subtitle: str | None = None


def markdown_to_html(markdown: str) -> str:
    """`markdown` (CommonMark with tables) as an HTML fragment that is safe to embed in a page:
    no script, no event handler, no URL but `http`, `https` and `mailto` (module docstring).
    NUL characters and lone surrogates become U+FFFD; no text makes it raise."""
    return _cleaner().clean(_parser().render(storable_text(markdown)))


def report_page(report: Report, *, stylesheet_href: str | None = None) -> str:
    """The report as a complete HTML5 document: a title page (title, subtitle, date, task id),
    then the report's body, styled for the screen and for print by the embedded stylesheet.
    `stylesheet_href`, when given, is linked after it (to restyle the page for a site)."""
    title = storable_text(report.title)
    created = _utc(report.created_at)
    link = ("" if stylesheet_href is None else
            f'\n<link rel="stylesheet" href="{html.escape(stylesheet_href)}">')
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="generator" content="Shoal">
<meta name="dcterms.created" content="{created.isoformat()}">
<title>{html.escape(_shortened(title))}</title>
<style>
{_stylesheet()}</style>{link}
</head>
<body>
{_title_page(report, title, created)}
<main class="report-body">
{markdown_to_html(report.markdown)}</main>
</body>
</html>
"""


def render_pdf(report: Report) -> bytes:
    """The report's page as a PDF (A4, numbered pages), rendered without fetching anything.
    Blocks for a while on a long report. Raises `Unavailable` when WeasyPrint or Pango cannot
    be loaded."""
    weasyprint = _weasyprint()
    # No protocol is allowed, so every URL (file:, http:, data: …) is refused before any I/O.
    offline = weasyprint.urls.URLFetcher(allowed_protocols=frozenset())
    document = weasyprint.HTML(string=report_page(report), base_url=None, url_fetcher=offline)
    pdf: bytes = document.write_pdf()
    return pdf


def _title_page(report: Report, title: str, created: datetime) -> str:
    """The header that opens the report: on paper, a page of its own."""
    long = ' class="long"' if len(title) > _LONG_TITLE else ""
    subtitle = ("" if report.subtitle is None else
                f'\n<p class="subtitle">{html.escape(storable_text(report.subtitle))}</p>')
    when = f'<time datetime="{created.isoformat()}">{created:%Y-%m-%d %H:%M} UTC</time>'
    task = ("" if report.task_id is None else
            f"\n<dt>Task</dt><dd><code>{report.task_id}</code></dd>")
    return f"""<header class="title-page">
<p class="kicker">Task report</p>
<h1{long}>{html.escape(title)}</h1>{subtitle}
<dl>
<dt>Date</dt><dd>{when}</dd>{task}
</dl>
</header>"""


def _utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive one is taken to be UTC already (as the store keeps them)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _shortened(title: str) -> str:
    """The title on one line, cut to `TITLE_SHORT` characters."""
    line = " ".join(title.split())
    return line if len(line) <= TITLE_SHORT else line[:TITLE_SHORT - 1].rstrip() + "…"


def _checked_attribute(tag: str, name: str, value: str) -> str | None:
    """nh3's attribute filter: an image's source must be absolute http(s), and `code` keeps
    only `language-…` classes. Must not raise (nh3 would report it as unraisable)."""
    if tag == "img" and name == "src":
        return value if value.strip().lower().startswith(("http://", "https://")) else None
    if tag == "code" and name == "class":
        classes = [c for c in value.split() if _LANGUAGE_CLASS.fullmatch(c)]
        return " ".join(classes) or None
    return value


@functools.cache
def _parser() -> MarkdownIt:
    """CommonMark with GFM tables and strikethrough; raw HTML passes to the sanitiser."""
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


@functools.cache
def _cleaner() -> nh3.Cleaner:
    """The sanitiser described in the module docstring."""
    return nh3.Cleaner(
        tags=set(ALLOWED_TAGS), clean_content_tags=set(DROPPED_WITH_CONTENT),
        attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
        attribute_filter=_checked_attribute,
        url_schemes={"http", "https", "mailto"}, url_relative="deny", link_rel=LINK_REL,
        filter_style_properties={"text-align"}, strip_comments=True,
        set_tag_attribute_values={"img": {"referrerpolicy": "no-referrer", "loading": "lazy"}})


@functools.cache
def _stylesheet() -> str:
    """The report's stylesheet (`report.css`, shipped beside this module)."""
    return resources.files("shoal").joinpath("report.css").read_text(encoding="utf-8")


def _weasyprint() -> ModuleType:
    """WeasyPrint, imported only when a PDF is asked for: it loads Pango through cffi, which
    fails (OSError) on a machine without it, and importing this module must not."""
    try:
        import weasyprint  # type: ignore[import-untyped]
    except (ImportError, OSError) as exc:
        raise Unavailable(_NO_PDF.format(reason=exc), code="pdf_unavailable") from exc
    module: ModuleType = weasyprint
    return module
