"""What a cited sentence claims, read by code: its figures, dates and proper names, and the test
that each of them is in what the sentence cites.

A report's sentence is supported only if every **figure** in it (a number, a percentage, an
amount), every **date** (a year, a month with its year or day) and every **proper name** (a
run of capitalised words that does not begin the sentence) appears in the quote its citation
gives \u2014 or, for a data finding, among the values of the rows its SQL returns. Each is compared
in a normal form: numbers as `retrieval.answers.numbers` writes them (`50,000` = `50000`;
`12.50` = `12.5`; a row's value also rounded to 0, 1 and 2 decimals: `answers.figures`), text
case-folded with Unicode's
compatibility forms (NFKC) and typographic quotes, dashes and spaces made plain. A sentence
that names none of them is judged by its quote alone (the caller checks the quote is in the
passage).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from shoal.retrieval.answers import numbers

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|"
           "december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DATE = re.compile(rf"\b(?:\d{{1,2}}\s+)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}},?)?\s+\d{{4}}\b",
                   re.IGNORECASE)
_NAME = re.compile(r"\b[A-Z][\w'\u2019-]*"
                   r"(?:\s+(?:of|de|la|van|von|the|and|for|&)?\s*[A-Z][\w'\u2019-]*)*")
_PLAIN = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"',
                        "\u201d": '"', "\u201e": '"', "\u2013": "-", "\u2014": "-",
                        "\u2212": "-", "\u00a0": " ", "\u202f": " ", "\u2009": " "})
_COMMON = frozenset({
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "in", "on", "at", "by",
    "for", "from", "of", "to", "and", "or", "but", "as", "with", "without", "all", "each", "every",
    "some", "most", "many", "more", "less", "one", "two", "three", "four", "five", "no", "not",
    "i", "we", "you", "they", "he", "she", "there", "here", "when", "where", "which", "who",
    "what", "how", "why", "if", "then", "so", "also", "both", "either", "neither", "after",
    "before", "during", "since", "until", "while", "about", "between", "under", "over",
    "according", "table", "figure", "section", "page", "sql", "rows", "row", "source",
    "sources", "note", "however", "yes",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"})


@dataclass(frozen=True, slots=True)
class Claims:
    """What a sentence states that its source must hold: figures, dates, proper names."""

    figures: tuple[str, ...]
    dates: tuple[str, ...]
    names: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.figures or self.dates or self.names)


def plain(text: str) -> str:
    """`text` in the form claims are compared in: NFKC, typographic marks made plain, case
    folded, runs of white space as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_PLAIN).casefold().split())


def claims_of(sentence: str) -> Claims:
    """The figures, dates and proper names `sentence` states (citation markers `[n]` and
    Markdown emphasis left out)."""
    text = re.sub(r"\[\d+\]", " ", sentence).replace("**", " ").replace("__", " ")
    text = unicodedata.normalize("NFKC", text).translate(_PLAIN)
    dates = tuple(dict.fromkeys(m.group(0) for m in _DATE.finditer(text)))
    rest = _DATE.sub(" ", text)
    return Claims(figures=tuple(dict.fromkeys(numbers(rest))), dates=dates, names=_names(rest))


def missing(claims: Claims, evidence: str, *, held: set[str] | None = None) -> list[str]:
    """Which of `claims` the `evidence` (a quote, a passage, or the text of SQL rows) does not
    hold, each as the sentence wrote it; `held`: the evidence's numbers, when the caller has
    them in full (`answers.figures` of rows, which rounds as a sentence may)."""
    text = unicodedata.normalize("NFKC", evidence).translate(_PLAIN)
    found = set(numbers(text)) | (held or set())
    plain_text = plain(text)
    lost = [f for f in claims.figures if f not in found]
    lost += [d for d in claims.dates if not _date_in(d, plain_text, found)]
    lost += [n for n in claims.names if plain(n) not in plain_text]
    return lost


def _date_in(date: str, held: str, held_numbers: set[str]) -> bool:
    """A date is held when it is there as written, or its year and its month (and day) are."""
    if plain(date) in held:
        return True
    parts = re.findall(r"\d+|[A-Za-z]+", date)
    words = [p.casefold()[:3] for p in parts if p.isalpha()]
    return all(numbers(p)[0] in held_numbers for p in parts if p.isdigit()) and all(
        re.search(rf"\b{w}", held) for w in words)


def _names(text: str) -> tuple[str, ...]:
    """Runs of capitalised words that are not common words; one that begins a sentence (or a
    list item) loses its first word, which is capitalised for the sentence's sake, unless the
    run goes on past it."""
    found: list[str] = []
    starts = {0} | {m.end() for m in re.finditer(r"[.!?:;]\s+|\n\s*[-*]?\s*|\(\s*", text)}
    for match in _NAME.finditer(text):
        words = match.group(0).split()
        if match.start() in starts:
            words = words[1:]
        while words and words[0].casefold() in _COMMON:
            words = words[1:]
        while words and words[-1].casefold() in _COMMON:
            words = words[:-1]
        name = " ".join(words)
        if len(name) > 1:
            found.append(name)
    return tuple(dict.fromkeys(found))
