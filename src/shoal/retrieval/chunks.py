"""Passages of a source's text, each with where it came from.

`split_passages(text, document=…)` cuts the text an extractor gave
(`shoal.artifacts.sources.extract_text`) into passages of `MIN_CHARS` to `MAX_CHARS`
characters. Pages (the extractor's `[page N]` lines) and Markdown headings start new sections,
and no passage crosses a section; within one, a passage is whole sentences (or list items,
table rows, lines of code: `shoal.retrieval.sentences`) and ends at the strongest boundary it
can, the end of a paragraph, else of a sentence; the next one repeats up to `OVERLAP_CHARS` of
its end, in whole sentences, so that a fact cut in two is whole in one. A sentence longer than
`MAX_CHARS` stays whole, in a longer passage; only a piece of text over `LONGEST_CHARS` without
a sentence end (a table, a data dump) is cut, at a line break or a space, never inside a word.

Each passage's `Citation` names the place in the user's own terms, and its `label()` says it
as a person would:

- a PDF's page (the extractor's `[page N]` marker above it), and the nearest heading if there
  is one: `report.pdf, page 3` or `report.pdf, page 3, "Results"`;
- any other document's nearest heading above it (a Markdown heading, which HTML and Word
  headings become) and its lines: `guide.html, "Thread Safety", lines 40\u201352`,
  `notes.txt, line 7`. Lines count from 1 in the text Shoal extracted; for Markdown and plain
  text that text is the file itself, so they are the lines of the user's own file; for HTML
  and Word, the lines of the extracted text (a paragraph, list item or table row to a line).

Offsets stay in the citation (`text[start:end]` is the passage, exactly) for code, not for
people. Indexing gives each passage an id, its content hash's start and its number
(`shoal.retrieval.index`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from enum import IntEnum

from shoal.retrieval.sentences import sentence_spans, shorten, stripped

MIN_CHARS = 800
"""A passage ends at a weaker boundary rather than be shorter than this (a section's last one
may be shorter)."""

MAX_CHARS = 1200
"""No passage is longer than this, unless one sentence is, or the end of its section is
within a quarter of `MIN_CHARS` after it."""

LONGEST_CHARS = 4 * MAX_CHARS
"""No passage is longer than this: a longer piece without a sentence end is cut."""

OVERLAP_CHARS = 200
"""At most this much of a passage's end begins the next one."""

_PAGE = re.compile(r"^\[page (\d+)\][ \t]*$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
_HEADING_CHARS = 60  # a longer heading is shortened in a label
DASH = "\u2013"
"""The en dash of a range in a label (`lines 40\u201352`)."""


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a passage is: its document, page, nearest heading, first and last line (from 1)
    and character range in the extracted text."""

    document: str
    page: int | None
    heading: str | None
    start: int
    end: int
    first_line: int = 0
    last_line: int = 0

    def label(self) -> str:
        """How a person reads it: `report.pdf, page 3` (and its heading, if any), or
        `guide.html, "Thread Safety", lines 40\u201352`."""
        parts = [self.document]
        if self.page is not None:
            parts.append(f"page {self.page}")
        if self.heading:
            parts.append(f'"{shorten(self.heading.replace(chr(34), chr(39)), _HEADING_CHARS)}"')
        if self.page is None and self.first_line:
            parts.append(self.lines())
        return ", ".join(parts)

    def lines(self) -> str:
        """Its lines as a person says them: `line 7`, `lines 40\u201352`."""
        if self.first_line == self.last_line:
            return f"line {self.first_line}"
        return f"lines {self.first_line}{DASH}{self.last_line}"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One passage of a source's text, its citation, and its id once indexed
    (`<content hash start>:<number>`, `shoal.retrieval.index`; empty before)."""

    text: str
    citation: Citation
    id: str = ""


class _Strength(IntEnum):
    """How good a place to end a passage is: the end of a paragraph is the best; a cut inside
    an over-long piece (at a line break or a space) the worst."""

    cut = 0
    sentence = 1
    paragraph = 2


@dataclass(frozen=True, slots=True)
class _Unit:
    """A span that is never cut (a sentence or an item), and how strong the boundary after
    it is."""

    start: int
    end: int
    strength: _Strength


@dataclass(frozen=True, slots=True)
class Section:
    """A stretch of text on one page under one heading (its line included), and where its body
    starts (after that line)."""

    start: int
    end: int
    page: int | None
    heading: str | None
    body: int


def split_passages(text: str, *, document: str, min_chars: int = MIN_CHARS,
                   max_chars: int = MAX_CHARS, overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    """The passages of `text` in order, cited as from `document`."""
    if not 0 < min_chars <= max_chars or not 0 <= overlap < min_chars:
        raise ValueError("need 0 < min_chars <= max_chars and 0 <= overlap < min_chars")
    chunks: list[Chunk] = []
    fenced = _fenced_ranges(text)
    newlines = [m.start() for m in re.finditer("\n", text)]
    for section in sections(text):
        units = _units(text, section.start, section.end, fenced)
        for start, end in _pack(units, min_chars=min_chars, max_chars=max_chars,
                                overlap=overlap):
            first = bisect.bisect_left(newlines, start) + 1
            last = bisect.bisect_left(newlines, end - 1) + 1
            chunks.append(Chunk(text[start:end], Citation(
                document, section.page, section.heading, start, end, first, last)))
    return chunks


def sections(text: str) -> list[Section]:
    """`text` cut at each page marker and Markdown heading (not those in fenced code); a page
    marker's line belongs to no section, a heading's line begins its own. Sections with nothing
    but a heading are left out."""
    # (where the cut is, where the section starts, where its body starts, page, heading)
    cuts: list[tuple[int, int, int, int | None, str | None]] = []
    fenced = _fenced_ranges(text)
    for match in _PAGE.finditer(text):
        cuts.append((match.start(), match.end(), match.end(), int(match.group(1)), None))
    for match in _HEADING.finditer(text):
        if match.group(2) and not any(a <= match.start() < b for a, b in fenced):
            cuts.append((match.start(), match.start(), match.end(), None, match.group(2)))
    cuts.sort(key=lambda cut: cut[0])
    out: list[Section] = []
    page: int | None = None
    heading: str | None = None
    start = body = 0
    for at, new_start, new_body, new_page, new_heading in cuts:
        out.append(Section(start, at, page, heading, body))
        page = new_page if new_page is not None else page
        heading = new_heading if new_heading is not None else heading
        start, body = new_start, new_body
    out.append(Section(start, len(text), page, heading, body))
    return [s for s in out if text[s.body:s.end].strip()]


def _fenced_ranges(text: str) -> list[tuple[int, int]]:
    """The character ranges of fenced code blocks (``` or ~~~), where `#` is no heading."""
    ranges: list[tuple[int, int]] = []
    opened: tuple[int, str] | None = None
    for match in _FENCE.finditer(text):
        fence = match.group(1)
        if opened is None:
            opened = (match.start(), fence)
        elif fence[0] == opened[1][0] and len(fence) >= len(opened[1]):
            ranges.append((opened[0], match.end()))
            opened = None
    if opened is not None:
        ranges.append((opened[0], len(text)))
    return ranges


def _units(text: str, start: int, end: int, fenced: list[tuple[int, int]]) -> list[_Unit]:
    """The sentences and items of `text[start:end]`, paragraph by paragraph, white space at
    their edges left out, each with the strength of the boundary after it."""
    units: list[_Unit] = []
    for p_start, p_end in _spans(text, start, end, _PARAGRAPH):
        pieces = sentence_spans(text, p_start, p_end, fenced=fenced, longest=LONGEST_CHARS)
        for index, (u_start, u_end, whole) in enumerate(pieces):
            strength = (_Strength.paragraph if index == len(pieces) - 1
                        else _Strength.sentence if whole else _Strength.cut)
            units.append(_Unit(u_start, u_end, strength))
    return units


def _spans(text: str, start: int, end: int, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """The stretches of `text[start:end]` between matches of `separator`, stripped."""
    spans: list[tuple[int, int]] = []
    at = start
    for match in separator.finditer(text, start, end):
        spans.append((at, match.start()))
        at = match.end()
    spans.append((at, end))
    return [stripped(text, a, b) for a, b in spans if text[a:b].strip()]


def _pack(units: list[_Unit], *, min_chars: int, max_chars: int,
          overlap: int) -> list[tuple[int, int]]:
    """Greedy passages over `units`: as long as `max_chars` allows, then back to the strongest
    boundary that keeps at least `min_chars`; the next starts up to `overlap` earlier. What
    is left of the section after a passage, if under a quarter of `min_chars`, joins it."""
    ranges: list[tuple[int, int]] = []
    first = 0
    while first < len(units):
        last = first
        while (last + 1 < len(units)
               and units[last + 1].end - units[first].start <= max_chars):
            last += 1
        if last + 1 < len(units) and units[-1].end - units[last].end <= min_chars // 4:
            last = len(units) - 1  # a short remainder ends this passage, not one of its own
        elif last + 1 < len(units):
            last = _best_end(units, first, last, min_chars)
        ranges.append((units[first].start, units[last].end))
        if last + 1 >= len(units):
            break
        following = last + 1
        while (following - 1 > first
               and units[last].end - units[following - 1].start <= overlap):
            following -= 1
        first = following
    return ranges


def _best_end(units: list[_Unit], first: int, last: int, min_chars: int) -> int:
    """The unit to end a passage with, among `first..last`: the strongest boundary that keeps
    the passage at least `min_chars` long (the latest of equals), else `last`."""
    best = last
    for index in range(last, first - 1, -1):
        if units[index].end - units[first].start < min_chars:
            break
        if units[index].strength > units[best].strength:
            best = index
    return best
