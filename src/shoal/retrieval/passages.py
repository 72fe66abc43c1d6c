"""A citation resolved back to its passage, and whether a quote occurs in it: the ground a
check in code stands on.

- `resolve(sources_dir, index_dir, ref)`: the passage a citation names, given the task's
  `sources/` folder and an index folder (indexes missing there are built, as `shoal mcp
  sources` builds them). `ref` is a passage id (`3fa9c1d2:14`: the start of the source's
  content hash and the passage's number, stable across workers and tasks; brackets allowed)
  or a label exactly as `Citation.label()` writes it (`guide.html, "Thread Safety", lines
  40\u201352`, `report.pdf, page 3`; compared after `normalise`, so `40-52` matches too).
  A label several passages share (one long line of HTML, one PDF page, both cut into
  passages) resolves to all of them as one passage, their texts joined in order. None when
  nothing matches, or for a data citation (`SQL: …`: `shoal.retrieval.sql.rerun`).
  `SourcePassages` does the same for many references over one opening.
- `quote_in(quote, passage_text, fuzzy=…)`: True when `quote` occurs in the passage after
  `normalise` on both (Unicode NFKC, which also undoes ligatures and full-width forms; curly
  quotes and every dash as ASCII; invisible characters dropped; list, heading and quotation
  markers at line starts and table bars dropped; case folded; white space collapsed). A quote
  may leave out words with `...` or `…`: its parts must then occur in order.
  With `fuzzy=True` (for text extracted from a PDF: `Passage.fuzzy`), a hyphen at a line
  break joins its word again, a match ignoring all white space counts (PDF text loses and
  gains spaces), and else each part of at least `FUZZY_MIN_CHARS` characters may differ
  slightly: rapidfuzz's `partial_ratio` (the best-aligned window of the passage) at least
  `FUZZY_THRESHOLD`, every number of the quote being among the passage's numbers exactly.
  Measured on the Apache licence rendered as a justified, hyphenated A6 PDF with a running
  header: quotes lying on one page score at least 99 after normalising, and 200 sentences of
  the GPL (legal prose of the same kind) at most 75 against its pages; 90 leaves room both
  ways. Fuzzy matching cannot see a dropped "not", so exact matching stays the rule for every
  other kind of text.

Both are pure over what they are given, apart from reading and indexing the sources.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rapidfuzz import fuzz

from shoal.retrieval import index as indexes
from shoal.retrieval.chunks import Chunk, Citation
from shoal.retrieval.folder import DOCUMENT_KINDS, source_files

FUZZY_THRESHOLD = 90.0
"""The least rapidfuzz `partial_ratio` (0 to 100) at which a quote is in a PDF's passage."""

FUZZY_MIN_CHARS = 20
"""A quote's part shorter than this must match exactly, even in a PDF's text."""

_ID = re.compile(rf"^\s*\[?\s*([0-9a-f]{{{indexes.ID_HEX}}}):(\d+)\s*\]?\s*$")
_APOSTROPHES = "\u2018\u2019\u201a\u201b\u2032\u2035\u02bc\u00b4\u0060"
_DOUBLE_QUOTES = "\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb\u2039\u203a"
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
_INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
_FOLD = str.maketrans({**dict.fromkeys(_APOSTROPHES, "'"), **dict.fromkeys(_DOUBLE_QUOTES, '"'),
                       **dict.fromkeys(_DASHES, "-"), **dict.fromkeys(_INVISIBLE, ""),
                       "|": " "})
_MARKER = re.compile(r"(?m)^[ \t]*(?:[-*+\u2022][ \t]+|#{1,6}[ \t]+|>[ \t]?)")
_BROKEN_WORD = re.compile(r"(\w)-[ \t]*\n\s*(\w)")
_ELISION = re.compile(r"\s*(?:\[\s*\.\.\.\s*\]|\.\.\.)\s*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage a citation names: its id (`3fa9c1d2:14`; `3fa9c1d2:14-16` when a label named
    several), its label, its full text and citation."""

    id: str
    label: str
    text: str
    citation: Citation

    @property
    def fuzzy(self) -> bool:
        """Whether `quote_in` should match quotes from it fuzzily: its text was extracted
        from a PDF (it is cited by page)."""
        return self.citation.page is not None


# --- quotes ---------------------------------------------------------------------------------


def normalise(text: str, *, pdf: bool = False) -> str:
    """`text` as quotes are compared (see the module's docstring); with `pdf`, words broken
    by a hyphen at a line end are joined."""
    text = unicodedata.normalize("NFKC", text).translate(_FOLD)
    if pdf:
        text = _BROKEN_WORD.sub(r"\1\2", text)
    return " ".join(_MARKER.sub("", text).casefold().split())


def quote_in(quote: str, passage_text: str, *, fuzzy: bool = False) -> bool:
    """Whether `quote` occurs in `passage_text` (see the module's docstring)."""
    parts = _parts(quote)
    if not parts:
        return False
    text = normalise(passage_text, pdf=fuzzy)
    if _in_order(parts, text):
        return True
    if not fuzzy:
        return False
    parts = _parts(quote, pdf=True)
    if _in_order([p.replace(" ", "") for p in parts], text.replace(" ", "")):
        return True
    numbers = set(_NUMBER.findall(text))
    return all(set(_NUMBER.findall(part)) <= numbers and (
        part in text if len(part) < FUZZY_MIN_CHARS
        else fuzz.partial_ratio(part, text) >= FUZZY_THRESHOLD) for part in parts)


def _parts(quote: str, *, pdf: bool = False) -> list[str]:
    """The normalised pieces of a quote between its elisions, its own quotation marks off."""
    text = normalise(quote, pdf=pdf).strip(" \"'")
    return [part.strip(" \"'") for part in _ELISION.split(text) if part.strip(" \"'")]


def _in_order(parts: Sequence[str], text: str) -> bool:
    at = 0
    for part in parts:
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


# --- citations ------------------------------------------------------------------------------


class SourcePassages:
    """A task's documents, indexed, for resolving citations to passages. Open it once for
    many references; close it after."""

    def __init__(self, opened: Sequence[indexes.Index]) -> None:
        self.indexes = tuple(opened)
        self._labels: dict[str, list[tuple[str, Chunk]]] = {}

    @classmethod
    async def open(cls, sources_dir: Path, index_dir: Path) -> SourcePassages:
        """The documents of `sources_dir`, their indexes opened from `index_dir` (built there
        where missing)."""
        files = await asyncio.to_thread(source_files, sources_dir)
        return cls([await indexes.build(f.path, kind=f.kind, index_dir=index_dir,
                                        document=f.name)
                    for f in files if f.kind is not None and f.kind in DOCUMENT_KINDS])

    def close(self) -> None:
        """Close the indexes."""
        for index in self.indexes:
            index.close()

    async def resolve(self, ref: str) -> Passage | None:
        """The passage `ref` (a passage id or an exact label) names, or None."""
        if found := _ID.match(ref):
            return await asyncio.to_thread(self._by_id, found.group(1), int(found.group(2)))
        return await asyncio.to_thread(self._by_label, ref)

    def _by_id(self, prefix: str, number: int) -> Passage | None:
        for index in self.indexes:
            if index.sha256.startswith(prefix):
                chunk = index.chunks([number]).get(number)
                if chunk is not None:
                    return Passage(chunk.id, chunk.citation.label(), chunk.text,
                                   chunk.citation)
        return None

    def _by_label(self, ref: str) -> Passage | None:
        wanted = normalise(ref)
        for index in sorted(self.indexes, key=lambda i: -len(i.document)):
            if not wanted.startswith(normalise(index.document) + ","):
                continue
            labelled = self._labels.setdefault(index.sha256 + index.document, [
                (normalise(c.citation.label()), c) for c in index.all_chunks()])
            matched = [chunk for label, chunk in labelled if label == wanted]
            if matched:
                return _joined(matched)
        return None


def _joined(chunks: list[Chunk]) -> Passage:
    """Passages sharing one label as one: their texts joined in order, overlaps once."""
    first, last = chunks[0], chunks[-1]
    text, end, line = first.text, first.citation.end, first.citation.last_line
    for chunk in chunks[1:]:
        if chunk.citation.start < end:
            text += chunk.text[end - chunk.citation.start:]
        else:
            text += ("\n" if chunk.citation.first_line > line else " ") + chunk.text
        end, line = max(end, chunk.citation.end), max(line, chunk.citation.last_line)
    ident = first.id if len(chunks) == 1 else f"{first.id}-{last.id.rsplit(':', 1)[-1]}"
    where = first.citation
    citation = Citation(where.document, where.page, where.heading, where.start, end,
                        where.first_line, line)
    return Passage(ident, where.label(), text, citation)


async def resolve(sources_dir: Path, index_dir: Path, ref: str) -> Passage | None:
    """The passage that `ref` names among the documents of `sources_dir` (see the module's
    docstring), or None."""
    opened = await SourcePassages.open(sources_dir, index_dir)
    try:
        return await opened.resolve(ref)
    finally:
        opened.close()
