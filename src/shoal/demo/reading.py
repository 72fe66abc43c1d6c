"""How the demo model reads the passages a search returned: whether a sentence answers a
question, by the question's terms it holds.

A term is a word as Shoal's own search index knows it (SQLite FTS5's `porter unicode61`
tokenizer, `shoal.retrieval.index.TOKENIZE`): "trains", "trained" and "training" are one term,
"dictionaries" and "dictionary" another. English function words ("which", "does", "must",
"under"…) are not terms. Two terms of six letters or more that differ by one edit are the same
term ("licence" and "license").

Terms are weighted by how rare they are among the passages found (inverse document frequency):
a term every passage holds (the library's name, when every passage is from its manual) says
little about which passage answers, and a term no passage holds is what the sources lack
("variadic" in "Does libffi support variadic closures?" when no passage mentions it). A
sentence answers when it holds enough of the question's weight (`ENOUGH`; `POLAR_ENOUGH` for a
yes-or-no question, whose answer must state its claim) and at least two of its terms (one, for
a question of one term). A table's row is read with its header and the sentence that introduces
the table, as a reader reads it; its quote is the row as written.

This is keyword reading, not understanding: a real model reads better, which is why it is only
the demo's. Its figures on the bundled evaluation set and on held-out questions are in
`benchmarks/README.md`; `tests/demo/test_reading.py` holds the held-out questions and the two
it is known to miss.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from rapidfuzz.distance import Levenshtein

from shoal.retrieval.index import TOKENIZE
from shoal.retrieval.search import STOP_WORDS

ENOUGH = 0.45
"""The share of a question's term weight a sentence must hold to answer a question that asks
for something (what, which, how, who…): the answer is what the sentence adds, so it need not
repeat the whole question."""

POLAR_ENOUGH = 0.6
"""The share for a yes-or-no question ("Does zstd encrypt…?"): its answer states the question's
own claim, so it must hold most of it — "zstd compresses files" does not say whether it
encrypts them."""

POLAR = re.compile(r"(?:is|are|was|were|do|does|did|can|could|should|will|would|has|have|had|"
                   r"may|must)\b", re.IGNORECASE)
"""A question that begins with its verb asks yes or no."""

FUZZY_LENGTH = 6
"""Terms this long or longer match a term one edit away (a spelling variant)."""

_MORE_FUNCTION_WORDS = """
about above after again against all also am any because been before being below between both
but doing down during each either else ever every few further get gets got having he her here
hers herself him himself his however if into itself just least less made make makes many may
might more most must myself need neither no nor not off often once one ones only other ought
ours ourselves out over own per same shall some such theirs themselves there's those through
too under until up upon us use used uses using very what's whether while whose within without
yet yours yourself yourselves
"""
FUNCTION_WORDS = STOP_WORDS | frozenset(_MORE_FUNCTION_WORDS.split())
"""Words that say how a question asks, not what it asks about: the search's stop words
(`shoal.retrieval.search.STOP_WORDS`) and more of their kind, with framing verbs."""

FRAMING = frozenset(("find", "passages", "documents", "sources", "source", "answer", "question",
                     "say", "says", "tell", "explain", "describe"))
"""Words of a task's framing ("Find passages on…") rather than of its question."""


@lru_cache(maxsize=1)
def _stopped() -> frozenset[str]:
    return frozenset(t for words in (FUNCTION_WORDS, FRAMING) for t in terms(" ".join(words)))


def terms(text: str) -> list[str]:
    """The index's terms of `text`, in order, repeats kept: its words of two letters or more,
    then its numbers as written ("1.5.1", "100")."""
    return _tokenized([text])[0]


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)*(?![\w])")


def _tokenized(texts: Sequence[str]) -> list[list[str]]:
    return [[t for t in words if len(t) >= 2 and not t.isdigit()] + _NUMBER.findall(text)
            for text, words in zip(texts, _words(texts), strict=True)]


def _words(texts: Sequence[str]) -> list[list[str]]:
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{TOKENIZE}')")
        connection.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        connection.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)",
                               [(i + 1, text) for i, text in enumerate(texts)])
        found: list[list[str]] = [[] for _ in texts]
        for row, term in connection.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
            found[row - 1].append(term)
        return found
    finally:
        connection.close()


def content_terms(text: str) -> list[str]:
    """What `text` asks about: its terms without function words, each once."""
    stopped = _stopped()
    return [t for t in dict.fromkeys(terms(text)) if t not in stopped]


def _holds(held: set[str], term: str) -> bool:
    if term in held:
        return True
    if len(term) < FUZZY_LENGTH:
        return False
    return any(len(h) >= FUZZY_LENGTH and Levenshtein.distance(term, h, score_cutoff=1) <= 1
               for h in held)


@dataclass(frozen=True, slots=True)
class Reading:
    """A question's terms, weighted by their rarity among the texts found for it."""

    weights: dict[str, float]
    enough: float = ENOUGH

    @classmethod
    def of(cls, question: str, found: Iterable[str]) -> Reading:
        asked = content_terms(question)
        held = [set(t) for t in _tokenized(list(found))]
        n = len(held)
        weights = {t: math.log(1 + (n + 1) / (1 + sum(_holds(h, t) for h in held)))
                   for t in asked}
        return cls(weights, POLAR_ENOUGH if POLAR.match(question.strip()) else ENOUGH)

    def coverage(self, held: Iterable[str]) -> tuple[float, int]:
        """The share of the question's weight the terms `held` hold, and how many terms."""
        have = set(held)
        hits = [w for t, w in self.weights.items() if _holds(have, t)]
        total = sum(self.weights.values())
        return (sum(hits) / total if total else 0.0), len(hits)

    def answer_in(self, text: str) -> Unit | None:
        """The sentence or table row of `text` that holds most of the question, if it holds
        enough of it to answer (`enough` of its weight, and two of its terms, or its one)."""
        found = units(text)
        scored = [(*self.coverage(held), -i, unit) for i, (unit, held)
                  in enumerate(zip(found, _tokenized([u.read for u in found]), strict=True))]
        if not scored:
            return None
        share, hits, _, best = max(scored, key=lambda x: x[:3])
        return best if share >= self.enough and hits >= min(2, len(self.weights)) else None


@dataclass(frozen=True, slots=True)
class Unit:
    """What can answer: a sentence, or a table's row read with its header."""

    quote: str  # as the text has it (white space made single)
    said: str  # as a finding states it: a row as "header: cell; …"
    read: str  # what its terms are read from: a row with its header


def units(text: str) -> list[Unit]:
    """`text`'s sentences, then the rows of its Markdown tables."""
    found = [Unit(s, s, s) for s in sentences(text)]
    lines = [line.strip() for line in text.splitlines()]
    for start, line in enumerate(lines):
        if not (line.startswith("|") and start + 2 < len(lines)
                and _RULE.fullmatch(lines[start + 1])
                and (start == 0 or not lines[start - 1].startswith("|"))):
            continue
        header, introduction = _cells(line), _introduction(lines[:start])
        for row in lines[start + 2:]:
            if not row.startswith("|"):
                break
            cells = _cells(row)
            said = "; ".join(f"{h}: {_plain(c)}" if h else _plain(c)
                             for h, c in zip(header, cells, strict=False) if c)
            found.append(Unit(" ".join(row.split()), said,
                              " ".join([introduction, *header, *cells])))
    return found


_RULE = re.compile(r"\|?(?:\s*:?-{2,}:?\s*\|)+\s*:?-*:?\s*")


_LINK_DEFINITION = re.compile(r"\[[^\]]+\]:\s+\S")


def _introduction(before: list[str]) -> str:
    """The sentence that introduces a table: the last of the paragraph above it (Markdown's
    link definitions are not a paragraph)."""
    paragraph: list[str] = []
    for line in reversed(before):
        if not line or _LINK_DEFINITION.match(line):
            if paragraph:
                break
            continue
        paragraph.insert(0, line)
    said = sentences("\n".join(paragraph))
    return said[-1] if said else ""


def _plain(cell: str) -> str:
    """A cell's words without Markdown's emphasis and link brackets ("**zstd**", "[zlib]")."""
    return re.sub(r"\[([^\]]*)\](?!\()", r"\1", cell.replace("**", "").replace("__", ""))


def _cells(row: str) -> list[str]:
    return [" ".join(c.split()) for c in row.strip().strip("|").split("|")]


_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])\s+")


def sentences(text: str) -> list[str]:
    """`text`'s sentences as it has them (white space made single): a sentence may wrap but
    never crosses a blank line or the start of a list item; headings and table rows are not
    sentences; a list item's bullet is not part of it."""
    found: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=[ \t]*(?:[-*+]|\d+[.)])\s)", text):
        lines = [line for line in block.splitlines()
                 if line.strip() and not line.lstrip().startswith(("#", "|"))
                 and not _LINK_DEFINITION.match(line.lstrip())]
        flat = _BULLET.sub("", " ".join(" ".join(lines).split()))
        found += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"(])", flat)
                  if s and not re.fullmatch(r"[\d.()\s]+", s)]
    return found
