"""What a research report says, read by code: its sections, its cited sentences, its gaps, the
gold facts it states, and its sentences about another corpus.

- **Cited sentences** are the sentences (and bullet items) of the report's content sections —
  all but its gaps, method, citation check and sources — that carry a citation marker such as
  `[2]` or `[1, 3]`.
- **A gap names a part** when a line of a section whose heading speaks of gaps (or of what is
  unanswered) holds the task's own wording of that part, or at least `COVERAGE` of the gold
  part's content words.
- **A part is matched to the task's sub-question** (the task detail's `questions`) whose
  content words overlap the gold part's most, when they overlap by at least `SIMILAR`.
- **Sentences from another corpus** are those naming what only the demo model's sample corpus
  (`shoal.demo.corpus`) contains: its proper names (`DEMO_NAMES`, read off its files: the
  city, its districts, people and bodies; a test checks each is there and nowhere in the set)
  and its figures that the set's files do not contain (grouped thousands, decimals of three
  digits or more, numbers of five digits or more; round thousands left out).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pypdf

from shoal.demo.corpus import corpus_files
from shoal.evals.research.goldset import THOUSANDS as _THOUSANDS
from shoal.evals.research.goldset import normalised, plain_text

COVERAGE = 0.6
SIMILAR = 0.5

_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_MARKER = re.compile(r"\[\d+(?:\s*[,;\u2013-]\s*\d+)*\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[*`])")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_NOT_CONTENT = ("gap", "unanswered", "not answered", "limitation", "method", "citation check",
                "source", "reference")
_GAP_HEADINGS = ("gap", "unanswered", "not answered", "could not", "limitation")
_WORD = re.compile(r"\w+")
_POSSESSIVE = re.compile(r"(?<=\w)['\u2019]s\b")
_STOP = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "did", "do", "does",
    "for", "from", "had", "has", "have", "how", "i", "in", "is", "it", "its", "of", "on",
    "or", "should", "so", "than", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who",
    "whom", "why", "will", "with", "would", "you", "your", "much", "many"})
DEMO_NAMES = frozenset({
    "Norhaven", "Eastfield", "Ashgrove", "Riverbend", "Southgate", "Harbourside", "Millbrook",
    "Kelda", "Vessby", "Greenline", "NICS", "Varga", "Brandt", "Lund", "Osei", "Haddad",
    "Ilse", "Marit", "Amara", "Farid", "Tomas"})
"""The proper names of the demo's sample corpus (its README lists who and where they are)."""
_FIGURE = re.compile(r"(?<![\d.,])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d{2,}|\d{2,}\.\d+|"
                     r"\d{5,})(?![\d,]|\.\d)")


def sections(report: str) -> list[tuple[str, str]]:
    """The report's sections in order: (heading, body); text before any heading is ("", …)."""
    found: list[tuple[str, list[str]]] = [("", [])]
    for line in report.splitlines():
        heading = _HEADING.match(line)
        if heading:
            found.append((heading.group(1).strip(), []))
        else:
            found[-1][1].append(line)
    return [(title, "\n".join(lines)) for title, lines in found]


def sentences(text: str) -> list[str]:
    """The sentences of `text`, a bullet item or table row being one at least (a paragraph's
    lines joined); a fragment that is only markers or figures stays with the sentence before
    it."""
    found: list[str] = []
    for block in _blocks(text):
        for piece in _SENTENCE_END.split(block):
            piece = piece.strip()
            if not piece:
                continue
            if found and not re.search(r"[A-Za-z]{2}", _MARKER.sub("", piece)):
                found[-1] = f"{found[-1]} {piece}"
            else:
                found.append(piece)
    return found


def _blocks(text: str) -> list[str]:
    """Paragraphs, bullet items and table rows, each on one line."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            blocks.append([])
        elif _BULLET.match(line) or stripped.startswith(("|", "#")) or not blocks:
            blocks.append([_BULLET.sub("", line).strip()])
        else:
            blocks[-1].append(stripped)
    return [" ".join(b) for b in blocks if b]


def cited_sentences(report: str) -> list[str]:
    """The sentences of the report's content sections that carry a citation marker."""
    kept = [body for title, body in sections(report)
            if not any(word in title.lower() for word in _NOT_CONTENT)]
    return [s for s in sentences("\n".join(kept)) if _MARKER.search(s)]


def gap_lines(report: str) -> list[str]:
    """The lines of the report's sections about gaps (what it could not answer)."""
    return [s for title, body in sections(report)
            if any(word in title.lower() for word in _GAP_HEADINGS) for s in sentences(body)]


def content_words(text: str) -> set[str]:
    """The words of `text` that carry its meaning (no stop words, no possessive `'s`, no
    single letters; a plural's `s` dropped)."""
    words = (w for w in _WORD.findall(_POSSESSIVE.sub("", normalised(text)))
             if w not in _STOP and len(w) > 1)
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in words}


def coverage(wanted: str, text: str) -> float:
    """The share of `wanted`'s content words that `text` has."""
    words = content_words(wanted)
    return len(words & content_words(text)) / len(words) if words else 0.0


def matching_question(part: str, asked: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The task's sub-question (from its detail) most like the gold `part`, if like enough."""
    mine = content_words(part)
    best, score = None, 0.0
    for question in asked:
        theirs = content_words(str(question.get("question", "")))
        union = mine | theirs
        similar = len(mine & theirs) / len(union) if union else 0.0
        if similar > score:
            best, score = question, similar
    return best if score >= SIMILAR else None


def names_gap(lines: Iterable[str], part: str, asked: dict[str, Any] | None, *,
              others: Sequence[str] = ()) -> bool:
    """True when one of the gap `lines` names the gold `part` (or the task's wording of it):
    a line naming another part of the question (`others`) better names that one, not this."""
    theirs = normalised(str(asked.get("question", ""))).rstrip("?") if asked else ""
    return any((theirs and theirs in normalised(line)) or _names(line, part, others)
               for line in lines)


def _names(line: str, part: str, others: Sequence[str]) -> bool:
    covered = coverage(part, line)
    return covered >= COVERAGE and all(coverage(o, line) <= covered for o in others)


@dataclass(frozen=True, slots=True)
class ForeignTerms:
    """What only the demo's sample corpus names: proper names (lower case) and figures
    (without thousands separators)."""

    names: frozenset[str]
    figures: frozenset[str]

    def found_in(self, sentence: str) -> list[str]:
        """The foreign names and figures `sentence` contains."""
        hits = sorted(set(_WORD.findall(sentence)) & self.names)
        hits += sorted({f.replace(",", "") for f in _FIGURE.findall(sentence)} & self.figures)
        return hits


def foreign_terms(files: Sequence[Path]) -> ForeignTerms:
    """The names (`DEMO_NAMES`) and figures of the demo's sample corpus that `files` (the
    set's) never use."""
    ours = _THOUSANDS.sub("", normalised("\n".join(plain_text(path) for path in files)))
    figures = {f.replace(",", "") for f in _FIGURE.findall("\n".join(_demo_text()))}
    figures = {f for f in figures if not f.endswith(("000", ".0")) and not re.search(
        rf"(?<![\d.]){re.escape(f)}(?![\d]|\.\d)", ours)}
    names = {n for n in DEMO_NAMES if not re.search(rf"\b{n.lower()}\b", ours)}
    return ForeignTerms(frozenset(names), frozenset(figures))


def _demo_text() -> list[str]:
    """The demo's sample corpus as text (its PDF's pages read with pypdf)."""
    texts = []
    for path in corpus_files():
        if path.suffix == ".pdf":
            texts.append("\n".join(page.extract_text() for page in pypdf.PdfReader(path).pages))
        else:
            texts.append(path.read_text(encoding="utf-8"))
    return texts


def foreign_sentences(report: str, terms: ForeignTerms) -> list[str]:
    """The report's sentences that name what only the demo's sample corpus contains."""
    return [s for s in sentences(report) if terms.found_in(s)]
