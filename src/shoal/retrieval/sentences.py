"""Where the sentences of a text end, and how to shorten a text without cutting a word.

`sentence_spans(text, start, end)` cuts one paragraph into the pieces a passage may end after:

- **sentences**: `.`, `!`, `?` or `…` (and the quotes or brackets closing on it) followed by
  white space and a capital letter, a digit, an opening quote or bracket, or a list marker; not
  after an abbreviation (`e.g.`, `i.e.`, `Dr.`, `Fig.`, `No.`, `vs.`…) or an initial (`J. Smith`).
  The ideographic full stop and the full-width `!` and `?` end a sentence whatever follows;
- **lines that are items of their own**: a list item (`- `, `* `, `+ `, `• `, `1. `, `1) `), a
  table row (`|`), a quotation (`>`), a heading, a fence, and every line of fenced code (the
  caller gives the fenced ranges).

Any other line break is inside a sentence (prose wrapped at 72 columns, a PDF's lines) and
never ends a piece. A piece longer than `longest` characters (a table without punctuation, a
data dump) is cut at its line breaks, else its spaces, else anywhere: such a piece has no words
to cut.

`shorten(text, most)` is for every answer or snippet that shows less than a whole passage: the
text up to its last sentence end within `most` characters (if that keeps at least half), else
its last word boundary, then `…`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ELLIPSIS = "…"

_CJK_ENDS = "\u3002\uff01\uff1f"  # the ideographic full stop, full-width ! and ?
_TERMINATOR = re.compile("[.!?\u2026]+[\"'\u201d\u2019\u00bb)\\]]*(?=\\s)"
                         f"|[{_CJK_ENDS}]+[\u300d\u300f\uff09\u201d\u2019]*")
_ITEM = re.compile(r"[ \t]*(?:[-*+•][ \t]|\d{1,3}[.)][ \t]|\||>|#{1,6}[ \t]|```|~~~)")
_OWN_LINE = re.compile(r"[ \t]*(?:\||```|~~~)")  # a table row or a fence ends where its line does
_OPENERS = frozenset("\"'\u201c\u2018\u00ab([\u00bf\u00a1")
_ABBREVIATIONS = frozenset({
    "e.g", "i.e", "cf", "vs", "viz", "al", "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr",
    "fig", "figs", "no", "nos", "vol", "vols", "pp", "p", "ch", "sec", "approx", "ca", "dept",
    "est", "ed", "eds", "op", "cit", "ibid", "resp", "incl", "z.b", "u.a", "d.h", "bzw", "ggf"})


def sentence_spans(text: str, start: int, end: int, *,
                   fenced: Sequence[tuple[int, int]] = (), longest: int = 4800,
                   ) -> list[tuple[int, int, bool]]:
    """The sentences and item lines of the paragraph `text[start:end]`, white space at their
    edges left out, as `(start, end, whole)`: `whole` is False for the parts of a piece longer
    than `longest` that had to be cut (see the module's docstring)."""
    pieces: list[tuple[int, int, bool]] = []
    at = start
    for stop, resume in _breaks(text, start, end, fenced):
        pieces.extend(_bounded(text, at, stop, longest))
        at = resume
    pieces.extend(_bounded(text, at, end, longest))
    return pieces


def _breaks(text: str, start: int, end: int,
            fenced: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Where pieces end and the next begin, in order: `(end of one, start of the next)`."""
    found: dict[int, int] = {}
    for match in _TERMINATOR.finditer(text, start, end):
        if _ends_sentence(text, match.start(), match.end(), end):
            found[match.end()] = match.end()
    line_start = start
    while (newline := text.find("\n", line_start, end)) >= 0:
        following = newline + 1
        if (_OWN_LINE.match(text, line_start, newline) or _ITEM.match(text, following, end)
                or any(a <= newline < b for a, b in fenced)):
            found[newline] = following
        line_start = following
    return sorted(found.items())


def _ends_sentence(text: str, at: int, after: int, end: int) -> bool:
    """Whether the terminator `text[at:after]` ends a sentence: by what follows it, and what
    word it closes."""
    if text[at] in _CJK_ENDS:
        return True
    following = len(text[after:end]) - len(text[after:end].lstrip())
    nxt = after + following
    if nxt >= end:
        return False  # the paragraph's end is a boundary anyway
    char = text[nxt]
    if not (char.isupper() or char.isdigit() or char in _OPENERS
            or _ITEM.match(text, nxt, end)):
        return False
    if text[at] != ".":
        return True
    if _ITEM.fullmatch(text, text.rfind("\n", 0, at) + 1, after + 1):
        return False  # "4. Funding": the number of a numbered line, not a sentence
    word_start = max(text.rfind(" ", 0, at), text.rfind("\n", 0, at), text.rfind("(", 0, at)) + 1
    word = text[word_start:at].lower()
    if word in _ABBREVIATIONS:
        return False
    return not (len(word) == 1 and word.isalpha() and text[word_start].isupper())  # J. Smith


def _bounded(text: str, start: int, end: int, longest: int) -> list[tuple[int, int, bool]]:
    """`text[start:end]` stripped, as one piece, or cut into pieces of at most `longest`."""
    start, end = stripped(text, start, end)
    if start >= end:
        return []
    pieces: list[tuple[int, int, bool]] = []
    while end - start > longest:
        window = text[start:start + longest + 1]
        cut = max(window.rfind("\n"), 0) or max(window.rfind(" "), window.rfind("\t"), 0)
        cut = start + (cut or longest)
        pieces.append((*stripped(text, start, cut), False))
        start, _ = stripped(text, cut, end)
    pieces.append((start, end, not pieces))
    return pieces


def stripped(text: str, start: int, end: int) -> tuple[int, int]:
    """`(start, end)` moved inwards past white space."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def shorten(text: str, most: int) -> str:
    """`text` if it is at most `most` characters, else its start ending at a sentence end (if
    that keeps at least half of `most`), else at a word boundary, followed by `…`: never cut
    inside a word (a first word longer than `most` is cut, there being no boundary)."""
    if len(text) <= most:
        return text
    room = max(most - len(ELLIPSIS) - 1, 1)  # "… " takes a space and the ellipsis
    window = text[:room + 1]
    sentence = max((m.end() for m in _TERMINATOR.finditer(window)
                    if m.end() <= room and _ends_sentence(text, m.start(), m.end(), len(text))),
                   default=0)
    if sentence * 2 >= room:
        return f"{text[:sentence].rstrip()} {ELLIPSIS}"
    space = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
    return f"{text[:space].rstrip() if space > 0 else text[:room]} {ELLIPSIS}"
