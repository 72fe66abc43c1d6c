"""The text of an HTML page as a person reads it: its main content, without the navigation
and boilerplate around it, headings kept so that passages can be cited under them.

`page_text(markup)`:

1. **Navigation goes first.** `<nav>`, elements whose ARIA role is navigation or search, and
   any block made mostly of links that HTML marks as navigation (`rel` next, prev, up, index,
   contents, start; or an `accesskey`): Texinfo's "Next: … Previous: … Up: …" line, Sphinx's
   "index | modules | next | previous" bar and breadcrumbs.
2. **trafilatura finds the main content** (recall favoured: a manual's short lists count) and
   drops the rest: sidebars, search boxes, tables of contents, footers ("© Copyright …",
   "Created using Sphinx"), comments. When the page marks no content area (no `main`,
   `article` or `role="main"`, as Texinfo's pages), its body is given as one article:
   otherwise trafilatura falls back to gathering stray paragraphs and loses the headings.
3. **Rendered as Markdown-like text**: headings as `#` lines (their `¶` permalinks dropped),
   each paragraph on one line, list items as `- ` lines, tables as Markdown tables, code
   blocks fenced, quotations as `> ` lines; inline markup as its plain words. The page's
   `<title>` heads the text when the content has no heading of its own.

Only when trafilatura finds nothing (a page of one huge paragraph, a fragment without
structure), or lxml cannot parse the whole page (markup nested past its depth limit of 256), is
the page read as every visible string (BeautifulSoup, a line per block), and a log line
(`html.whole_page`) says why.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import structlog
import trafilatura
from bs4 import BeautifulSoup, CData, Tag
from bs4.element import NavigableString, PageElement
from lxml import etree  # type: ignore[import-untyped]  # lxml ships no type information
from lxml import html as lxml_html
from trafilatura.settings import Document

log = structlog.get_logger(__name__)

_NAV_RELS = ("next", "prev", "previous", "up", "index", "contents", "start", "first", "last")
_REL_TEST = " or ".join(f"contains(concat(' ', normalize-space(@rel), ' '), ' {rel} ')"
                        for rel in _NAV_RELS)
_NAVIGATION = etree.XPath(
    "//nav | //*[@role='navigation' or @role='search']"
    " | //*[self::p or self::div or self::ul or self::ol or self::table or self::tr or self::td]"
    f"[.//a[@accesskey or {_REL_TEST}]]")
_CONTENT_AREA = etree.XPath("//main | //article | //*[@role='main']")
_NESTED_BLOCKS = frozenset({"head", "p", "quote"})
_SPACES = re.compile(r"\s+")


def page_text(markup: str) -> str:
    """The main content of the page `markup` as text (see the module's docstring)."""
    parser = lxml_html.HTMLParser()
    try:
        tree = lxml_html.document_fromstring(markup, parser=parser)
    except (etree.ParserError, ValueError):  # no element at all: nothing but words
        tree = None
    if tree is None or any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        reason = "lxml could not parse all of the page (nested too deeply)"  # it drops the rest
    elif text := _main_text(tree):
        return text
    else:
        reason = "trafilatura found no main content"
    log.info("html.whole_page", reason=f"{reason}; every visible string of the page is read")
    return visible_text(markup)


def _main_text(tree: lxml_html.HtmlElement) -> str:
    title = " ".join((tree.findtext(".//title") or "").split())
    _drop_navigation(tree)
    body = tree.find("body")
    if body is not None and not _CONTENT_AREA(tree):
        article = etree.SubElement(body, "article")
        for child in list(body)[:-1]:
            article.append(child)
    try:
        found = trafilatura.bare_extraction(tree, favor_recall=True, include_comments=False,
                                            include_tables=True, include_formatting=True,
                                            include_links=False, include_images=False,
                                            with_metadata=False)
    except (ValueError, TypeError, etree.LxmlError) as exc:
        log.info("html.trafilatura_failed", error=str(exc)[:200])
        return ""
    if not isinstance(found, Document) or found.body is None:
        return ""
    blocks = [b for b in (_block(el) for el in found.body) if b]
    if title and blocks and not any(b.startswith("#") for b in blocks):
        blocks.insert(0, f"# {title}")
    return "\n\n".join(blocks)


def _drop_navigation(tree: lxml_html.HtmlElement) -> None:
    """Remove navigation elements, and blocks of navigation links (at least half of their
    text in links: a paragraph that merely links onward is content)."""
    for element in _NAVIGATION(tree):
        parent = element.getparent()
        if parent is None or element.tag == "html":
            continue
        if element.tag == "nav" or element.get("role") or _mostly_links(element):
            parent.remove(element)


def _mostly_links(element: lxml_html.HtmlElement) -> bool:
    text = len("".join(element.text_content().split()))
    linked = sum(len("".join(a.text_content().split())) for a in element.iter("a"))
    return linked * 2 >= text


# --- rendering trafilatura's tree -----------------------------------------------------------


def _block(element: etree._Element) -> str:
    """One block of trafilatura's output (`head`, `p`, `list`, `table`, `code`, `quote`) as
    Markdown-like text."""
    tag = element.tag
    if tag == "head":
        level = int(m.group(1)) if (m := re.fullmatch(r"h([1-6])", element.get("rend", ""))) \
            else 2
        heading = _inline(element).replace("\n", " ").removesuffix("¶").strip()
        return f"{'#' * level} {heading}" if heading else ""
    if tag == "list":
        return "\n".join(_items(element, depth=0))
    if tag == "table":
        return _table(element)
    if tag == "code":
        code = "".join(element.itertext()).strip("\n")
        if "\n" not in code:
            return " ".join(code.split())
        return f"```\n{code}\n```"
    if tag == "quote":
        return "\n".join(f"> {line}" for line in _inline(element).splitlines())
    return _inline(element)


def _inline(element: etree._Element) -> str:
    """The words of `element` and its inline children, white space collapsed; a line break
    (`lb`) kept as a newline; nested blocks (a `p` in an item) joined by a space."""
    lines = "".join(_pieces(element)).split("\n")
    return "\n".join(" ".join(line.split()) for line in lines if line.strip())


def _pieces(element: etree._Element) -> Iterator[str]:
    if element.text:
        yield _SPACES.sub(" ", element.text)
    for child in element:
        if child.tag == "lb":
            yield "\n"
        elif child.tag not in ("list", "table"):  # a nested list is the caller's to render
            if child.tag in _NESTED_BLOCKS:
                yield " "
            yield from _pieces(child)
        if child.tail:
            yield _SPACES.sub(" ", child.tail)


def _items(element: etree._Element, *, depth: int) -> Iterator[str]:
    """A list's items as `- ` lines (a definition's text indented under its term), nested
    lists indented where they stand in their item."""
    indent = "  " * depth
    for item in element.iterchildren("item"):
        first = not item.get("rend", "").startswith("dd")
        for part in _segments(item):
            if isinstance(part, str):
                yield f"{indent}- {part.removesuffix('¶').strip()}" if first \
                    else f"{indent}  {part}"
                first = False
            else:
                yield from _items(part, depth=depth + 1)


def _segments(item: etree._Element) -> Iterator[str | etree._Element]:
    """An item's text, cut where a nested list stands: text, the list, the text after it."""
    parts = [_SPACES.sub(" ", item.text or "")]
    for child in item:
        if child.tag == "list":
            if text := " ".join("".join(parts).split()):
                yield text
            parts = []
            yield child
        elif child.tag != "table":
            parts.append(" " if child.tag == "lb" or child.tag in _NESTED_BLOCKS else "")
            parts.extend(_pieces(child))
        if child.tail:
            parts.append(_SPACES.sub(" ", child.tail))
    if text := " ".join("".join(parts).split()):
        yield text


def _table(element: etree._Element) -> str:
    return markdown_table([[_inline(cell).replace("\n", " ") for cell in row.iter("cell")]
                           for row in element.iter("row")])


def markdown_table(rows: list[list[str]]) -> str:
    """`rows` of cell texts as a Markdown table, the first row its header (empty rows left
    out, short rows padded, `|` escaped); empty when no row has text."""
    rows = [[cell.replace("|", "\\|") for cell in row] for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = [f"| {' | '.join(row + [''] * (width - len(row)))} |" for row in rows]
    lines.insert(1, f"|{' --- |' * width}")
    return "\n".join(lines)


# --- every visible string -------------------------------------------------------------------


_DROPPED = frozenset({"script", "style", "noscript", "template", "title", "svg", "iframe",
                      "object"})
_BLOCKS = frozenset({"address", "article", "aside", "blockquote", "caption", "dd", "details",
                     "div", "dl", "dt", "figcaption", "figure", "footer", "form", "h1", "h2",
                     "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p",
                     "pre", "section", "summary", "table", "tr", "ul"})
_CELLS = frozenset({"td", "th"})


def visible_text(markup: str) -> str:
    """Every string of the page a reader sees (no scripts or styles), a line per block, the
    page's title first."""
    soup = BeautifulSoup(markup, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    lines = (" ".join(line.split()) for line in "".join(_visible(soup)).splitlines())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    if title and not text.startswith(title):
        text = f"{title}\n\n{text}"
    return text


def _visible(soup: Tag) -> Iterator[str]:
    """The strings a reader sees, a newline around each block and a space before each table
    cell, in one pass with a stack: editing the tree instead costs its depth per edit, and
    a page of nested tags makes that quadratic."""
    stack: list[PageElement | str] = [soup]
    while stack:
        node = stack.pop()
        if type(node) is str:  # the newline pushed below, to come after a block's content
            yield node
        elif isinstance(node, Tag) and node.name not in _DROPPED:
            if node.name == "br" or node.name in _BLOCKS:
                yield "\n"
            elif node.name in _CELLS:
                yield " "
            if node.name in _BLOCKS:
                stack.append("\n")
            stack.extend(reversed(node.contents))
        elif type(node) in (NavigableString, CData):  # not comments, doctypes, declarations
            yield str(node)
