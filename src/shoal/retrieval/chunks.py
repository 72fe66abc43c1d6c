"""Passages of a source's text, each with where it came from.

`split_passages(text, document=…)` cuts the text an extractor gave
(`shoal.artifacts.sources.extract_text`) into passages of `MIN_CHARS` to `MAX_CHARS`
characters. Pages (the extractor's `[page N]` lines) and Markdown headings start new sections,
and no passage crosses a section; within one, a passage ends at the strongest boundary it can
(a paragraph, else a sentence, else a line, else a space), and the next one repeats up to
`OVERLAP_CHARS` of its end, in whole sentences, so that a fact cut in two is whole in one.

Each passage's `Citation` names its document, its page (the PDF page it is on) or its heading
(the nearest Markdown heading above it), and its character range `[start, end)` in the text:
`text[start:end]` is the passage, exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

MIN_CHARS = 800
"""A passage ends at a weaker boundary rather than be shorter than this (a section's last one
may be shorter)."""

MAX_CHARS = 1200
"""No passage is longer than this."""

OVERLAP_CHARS = 200
"""At most this much of a passage's end begins the next one."""

_PAGE = re.compile(r"^\[page (\d+)\][ \t]*$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
# A sentence ends with . ! ? (and the quotes or brackets closing on it) before white space; a
# line with a newline.
_BREAK = re.compile(r"[.!?][\"')\]]*(?P<space>\s+)|[ \t]*\n\s*")


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a passage is: its document, page or heading, and character range in the text."""

    document: str
    page: int | None
    heading: str | None
    start: int
    end: int

    def label(self) -> str:
        """How a person reads it: `report.pdf, page 3, characters 1200-2240`."""
        where = (f"page {self.page}" if self.page is not None
                 else f'"{self.heading}"' if self.heading else "")
        parts = [self.document, where, f"characters {self.start}-{self.end}"]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One passage of a source's text and its citation."""

    text: str
    citation: Citation


class _Strength(IntEnum):
    """How good a place to end a passage is: the end of a paragraph is the best."""

    space = 0
    line = 1
    sentence = 2
    paragraph = 3


@dataclass(frozen=True, slots=True)
class _Unit:
    """A span that is never cut (a sentence or a line), and how strong the boundary after it is."""

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
    for section in sections(text):
        units = _units(text, section.start, section.end, max_chars)
        for start, end in _pack(units, min_chars=min_chars, max_chars=max_chars,
                                overlap=overlap):
            chunks.append(Chunk(text[start:end], Citation(
                document, section.page, section.heading, start, end)))
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


def _units(text: str, start: int, end: int, max_chars: int) -> list[_Unit]:
    """The sentences and lines of `text[start:end]`, white space at their edges left out, each
    at most `max_chars` long (a longer one is cut at spaces, or anywhere as a last resort)."""
    units: list[_Unit] = []
    for p_start, p_end in _spans(text, start, end, _PARAGRAPH):
        pieces = _spans_with_breaks(text, p_start, p_end)
        for index, (u_start, u_end, strength) in enumerate(pieces):
            last = index == len(pieces) - 1
            units.extend(_cut_long(text, u_start, u_end, _Strength.paragraph if last
                                   else strength, max_chars))
    return units


def _spans(text: str, start: int, end: int, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """The stretches of `text[start:end]` between matches of `separator`, stripped."""
    spans: list[tuple[int, int]] = []
    at = start
    for match in separator.finditer(text, start, end):
        spans.append((at, match.start()))
        at = match.end()
    spans.append((at, end))
    return [_stripped(text, a, b) for a, b in spans if text[a:b].strip()]


def _spans_with_breaks(text: str, start: int, end: int) -> list[tuple[int, int, _Strength]]:
    """The sentences and lines of one paragraph, with the strength of the break after each."""
    spans: list[tuple[int, int, _Strength]] = []
    at = start
    for match in _BREAK.finditer(text, start, end):
        sentence = match.group("space") is not None
        stop = match.start("space") if sentence else match.start()
        if text[at:stop].strip():
            strength = _Strength.sentence if sentence else _Strength.line
            spans.append((*_stripped(text, at, stop), strength))
        at = match.end()
    if text[at:end].strip():
        spans.append((*_stripped(text, at, end), _Strength.paragraph))
    return spans


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cut_long(text: str, start: int, end: int, strength: _Strength,
              max_chars: int) -> list[_Unit]:
    units: list[_Unit] = []
    while end - start > max_chars:
        cut = text.rfind(" ", start + 1, start + max_chars + 1)
        cut = cut if cut > start else start + max_chars
        piece_start, piece_end = _stripped(text, start, cut)
        units.append(_Unit(piece_start, piece_end, _Strength.space))
        start, _ = _stripped(text, cut, end)
    units.append(_Unit(start, end, strength))
    return units


def _pack(units: list[_Unit], *, min_chars: int, max_chars: int,
          overlap: int) -> list[tuple[int, int]]:
    """Greedy passages over `units`: as long as `max_chars` allows, then back to the strongest
    boundary that keeps at least `min_chars`; the next starts up to `overlap` earlier."""
    ranges: list[tuple[int, int]] = []
    first = 0
    while first < len(units):
        last = first
        while (last + 1 < len(units)
               and units[last + 1].end - units[first].start <= max_chars):
            last += 1
        if last + 1 < len(units):
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
