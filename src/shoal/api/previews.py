"""A produced file made readable for the dashboard: highlighted with Pygments, and its changes
since the previous accepted attempt as a highlighted unified diff (difflib).

The HTML is Pygments' own, which escapes the file's text; only class names carry the colours
(the page's CSP allows no inline styles), and the dashboard's stylesheet gives them."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import DiffLexer, TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

MAX_PREVIEW = 256 * 1024  # bytes: a larger file is downloaded, not shown
_FORMATTER = HtmlFormatter(nowrap=True, classprefix="hl-")


@dataclass(frozen=True, slots=True)
class Rendered:
    """A file's text as highlighted HTML, or why it is not shown."""

    language: str | None
    html: str | None
    note: str | None


def text_of(data: bytes) -> str | None:
    """The file as text, or None when it is binary (a NUL byte, or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def render(path: str, data: bytes) -> Rendered:
    """`data` highlighted by the lexer its file name picks (plain text when none does)."""
    if len(data) > MAX_PREVIEW:
        return Rendered(None, None, f"Too large to show here ({len(data):,} bytes): download "
                                    "it instead.")
    text = text_of(data)
    if text is None:
        return Rendered(None, None, f"A binary file ({len(data):,} bytes).")
    lexer = _lexer(path, text)
    return Rendered(lexer.name, highlight(text, lexer, _FORMATTER), None)


def diff(path: str, before: bytes, after: bytes) -> str | None:
    """The unified diff from `before` to `after` as highlighted HTML ("" when they are the
    same); None when either side is binary or too large to compare."""
    if max(len(before), len(after)) > MAX_PREVIEW:
        return None
    old, new = text_of(before), text_of(after)
    if old is None or new is None:
        return None
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"previous/{path}", tofile=f"latest/{path}")
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return highlight(text, DiffLexer(), _FORMATTER) if text else ""


def _lexer(path: str, text: str) -> Lexer:
    found: Lexer
    try:
        found = get_lexer_for_filename(path, text, stripnl=False)
    except ClassNotFound:
        found = TextLexer(stripnl=False)
    return found
