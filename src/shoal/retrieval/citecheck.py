"""Checking a cited report in code: every cited sentence against what it cites.

A report cites with numbered markers (`[1]`, `[2, 3]`) and lists its sources under `## Sources`,
one per line: `[n] <citation> — "<the exact words it rests on>"` for a passage of a document
(its citation as `search_passages` gave it), `[n] SQL: <the query>` for rows of data. For each
cited sentence, `check_report`:

1. **resolves** each citation: the passage it names exists in the task's sources, or the SQL runs
   (read-only) over its data files — a citation that does not resolve fails its sentence;
2. for a passage, finds the **quote** in it (normalised; fuzzily for text extracted from a PDF),
   and the sentence's **figures, dates and names** (`claims`) in the quote; without a quote, in
   the passage;
3. for SQL, finds the sentence's figures, dates and names among the values of the rows the query
   returns when run again.

The report it gives back has each failed sentence removed, the sources no sentence cites any more
dropped and the rest renumbered in order of first use, a `## Gaps` section that lists exactly the
question's unanswered parts (when the engine counted them), and a `## Citation check` section
with the figures it computed: citation precision (supported ÷ cited sentences) and resolution
(resolved ÷ citations), and each sentence removed, with why. How a citation resolves and how a
quote is matched are the caller's (`resolve`, `rerun`), so that this module is pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shoal.retrieval.answers import figures, sql_of
from shoal.retrieval.claims import claims_of, missing

_MARKER = re.compile(r"\s?\[(\d+(?:\s*,\s*\d+)*)\]")
_SOURCE = re.compile(r"^\s*[-*]?\s*\[(\d+)\]\s*(.+?)\s*$")
_QUOTED = re.compile(r"^(?P<ref>.+?)\s+[\u2014\u2013-]{1,2}\s+[\"\u201c](?P<quote>.+)[\"\u201d]$")
UNCHECKED = ("sources", "citation check", "gaps")  # sections the check writes itself


@dataclass(frozen=True, slots=True)
class Passage:
    """What a document citation resolves to: the passage's text as the sources hold it."""

    label: str  # where it is, in the user's terms
    text: str
    fuzzy: bool = False  # text extracted from a PDF: quotes are matched fuzzily


@dataclass(frozen=True, slots=True)
class Source:
    """One line of a report's Sources."""

    number: int
    ref: str  # the citation as written: a passage's citation, or `SQL: …`
    quote: str | None = None
    sql: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One cited sentence, and whether what it cites supports it."""

    sentence: str
    numbers: tuple[int, ...]
    supported: bool
    reason: str = ""

    def wire(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "citations": list(self.numbers),
                "supported": self.supported, "reason": self.reason}


@dataclass(slots=True)
class Checked:
    """A checked report and its figures."""

    report: str
    verdicts: list[Verdict]
    citations: int  # citation markers in cited sentences
    resolved: int  # …that named a source that resolves
    # what each source of the checked report (by its number there) cites: a passage's label,
    # text and quote, or the SQL and its rows
    passages: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.supported]

    def figures(self) -> dict[str, Any]:
        cited = len(self.verdicts)
        supported = cited - len(self.failed)
        return {"cited": cited, "supported": supported,
                "precision": round(supported / cited, 4) if cited else 1.0,
                "citations": self.citations, "resolved": self.resolved,
                "resolution": round(self.resolved / self.citations, 4) if self.citations
                else 1.0}


Resolve = Callable[[str], Passage | None]
Rerun = Callable[[str], Sequence[Mapping[str, Any]] | None]
QuoteIn = Callable[[str, str, bool], bool]


def check_report(markdown: str, *, resolve: Resolve, rerun: Rerun, quote_in: QuoteIn,
                 parts: Mapping[str, Any] | None = None, first: str | None = None) -> Checked:
    """Check every cited sentence of `markdown` (see the module's docstring); `first`: a line
    the report must begin with (that it is partial), unless it says so already."""
    body, sources = _split_sources(markdown)
    listed = {s.number: s for s in sources}
    judge = _Judge(listed, resolve, rerun, quote_in)
    kept: list[str] = []
    for section, lines in _sections(body):
        if section.casefold() in UNCHECKED:
            continue
        kept += [judge.line(line) for line in lines]
    checked = Checked(report="", verdicts=judge.verdicts, citations=judge.citations,
                      resolved=judge.resolved)
    checked.report, order = _rewrite(kept, sources, checked, parts)
    if first and not checked.report.lstrip().startswith(first.split(":", 1)[0] + ":"):
        checked.report = f"{first}\n\n{checked.report}"
    checked.passages = {new: judge.passages[old] for old, new in order.items()
                        if old in judge.passages}
    return checked


class _Judge:
    """Checks the cited sentences of one line at a time, keeping the verdicts."""

    def __init__(self, listed: Mapping[int, Source], resolve: Resolve, rerun: Rerun,
                 quote_in: QuoteIn) -> None:
        self.listed, self.resolve, self.rerun, self.quote_in = listed, resolve, rerun, quote_in
        self.verdicts: list[Verdict] = []
        self.citations = self.resolved = 0
        self.passages: dict[int, dict[str, Any]] = {}
        self._resolved: dict[int, tuple[bool, Any]] = {}

    def line(self, line: str) -> str:
        """`line` with each cited sentence that fails left out."""
        if line.lstrip().startswith("#") or not _MARKER.search(line):
            return line
        lead = re.match(r"^\s*(?:[-*+]|\d+\.)\s+", line)
        prefix = lead.group(0) if lead else ""
        pieces = _sentences(line[len(prefix):])
        kept = [p for p in pieces if self._keeps(p)]
        if not kept:
            return ""  # the whole line (a bullet, say) failed
        return prefix + " ".join(kept)

    def _keeps(self, sentence: str) -> bool:
        numbers = tuple(int(n) for m in _MARKER.finditer(sentence)
                        for n in re.split(r"\s*,\s*", m.group(1)))
        if not numbers:
            return True
        self.citations += len(numbers)
        reasons = [r for n in numbers if (r := self._problem(n, sentence)) is not None]
        verdict = Verdict(sentence=sentence.strip(), numbers=numbers, supported=not reasons,
                          reason="; ".join(reasons))
        self.verdicts.append(verdict)
        return verdict.supported

    def _problem(self, number: int, sentence: str) -> str | None:
        source = self.listed.get(number)
        if source is None:
            return f"[{number}] names no entry of Sources"
        ok, found = self._lookup(source)
        if not ok:
            return f"[{number}] does not resolve: {found}"
        self.resolved += 1
        claims = claims_of(_MARKER.sub("", sentence))
        if source.sql is not None:
            rows = [list(row.values()) for row in found]
            lost = missing(claims, " \n ".join(str(v) for row in rows for v in row),
                           held=figures(rows))
            return (f"[{number}]'s rows do not hold {', '.join(lost)}" if lost else None)
        passage: Passage = found
        if source.quote is not None and not self.quote_in(source.quote, passage.text,
                                                          passage.fuzzy):
            return f"[{number}]'s quote is not in {passage.label}"
        lost = missing(claims, source.quote or passage.text)
        if lost:
            where = "its quote" if source.quote else passage.label
            return f"[{number}]: {where} does not say {', '.join(lost)}"
        return None

    def _lookup(self, source: Source) -> tuple[bool, Any]:
        known = self._resolved.get(source.number)
        if known is not None:
            return known
        if source.sql is not None:
            rows = self.rerun(source.sql)
            found: tuple[bool, Any] = (rows is not None, rows if rows is not None else
                                       "the query does not run over the data files")
            if rows is not None:
                self.passages[source.number] = {"sql": source.sql, "rows": list(rows)[:20]}
        else:
            passage = self.resolve(source.ref)
            found = (passage is not None, passage if passage is not None else
                     f"no passage of the sources is {source.ref!r}")
            if passage is not None:
                self.passages[source.number] = {"label": passage.label, "text": passage.text,
                                                "quote": source.quote}
        self._resolved[source.number] = found
        return found


def _sentences(text: str) -> list[str]:
    """`text` cut after each sentence's end and the citation markers that close it."""
    out, start = [], 0
    for match in re.finditer(r"[.!?](?:\s?\[\d+(?:\s*,\s*\d+)*\])*(?=\s+|$)", text):
        out.append(text[start:match.end()].strip())
        start = match.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return [s for s in out if s]


def sources_of(markdown: str) -> list[Source]:
    """The entries of a report's `## Sources`."""
    return _split_sources(markdown)[1]


def _split_sources(markdown: str) -> tuple[str, list[Source]]:
    head, found, tail = _section_split(markdown, "sources")
    sources: list[Source] = []
    for line in tail.splitlines():
        match = _SOURCE.match(line)
        if match is None:
            continue
        number, rest = int(match.group(1)), match.group(2).strip()
        sql = sql_of(rest)
        if sql is not None:
            sources.append(Source(number, rest, sql=sql))
            continue
        quoted = _QUOTED.match(rest)
        sources.append(Source(number, quoted.group("ref").strip(), quote=quoted.group("quote"))
                       if quoted else Source(number, rest))
    return (head if found else markdown), sources


def _section_split(markdown: str, name: str) -> tuple[str, bool, str]:
    match = re.search(rf"^##\s+{re.escape(name)}\s*$", markdown, re.IGNORECASE | re.MULTILINE)
    if match is None:
        return markdown, False, ""
    rest = markdown[match.end():]
    after = re.search(r"^##\s", rest, re.MULTILINE)
    return (markdown[:match.start()] + (rest[after.start():] if after else "")), True, \
        rest[:after.start()] if after else rest


def _sections(body: str) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in body.splitlines():
        heading = re.match(r"^##\s+(.+?)\s*$", line)
        if heading:
            sections.append((heading.group(1), [line]))
        else:
            sections[-1][1].append(line)
    return sections


def _rewrite(lines: list[str], sources: list[Source], checked: Checked,
             parts: Mapping[str, Any] | None) -> tuple[str, dict[int, int]]:
    """The report without what failed, renumbered, with its Gaps and Citation check; and the
    numbers it renumbered (old → new)."""
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    order: dict[int, int] = {}
    for match in _MARKER.finditer(text):
        for n in re.split(r"\s*,\s*", match.group(1)):
            order.setdefault(int(n), len(order) + 1)

    def renumber(match: re.Match[str]) -> str:
        numbers = [str(order[int(n)]) for n in re.split(r"\s*,\s*", match.group(1))]
        return f" [{', '.join(numbers)}]"
    text = _MARKER.sub(renumber, text)
    by_number = {s.number: s for s in sources}
    listed = [_source_line(new, by_number[old]) for old, new in order.items()
              if old in by_number]
    out = [text, ""]
    if parts is not None:
        out += _gaps(parts)
    out += _check_section(checked)
    out += ["## Sources", "", *(listed or ["None cited."]), ""]
    return "\n".join(out), order


def _source_line(number: int, source: Source) -> str:
    """One source as a list item (a line of its own once rendered)."""
    if source.sql is not None or source.quote is None:
        return f"- [{number}] {source.ref}"
    return f"- [{number}] {source.ref} \u2014 \u201c{source.quote}\u201d"


def _gaps(parts: Mapping[str, Any]) -> list[str]:
    asked = [q for q in parts.get("questions") or () if isinstance(q, Mapping)]
    open_ = [q for q in asked if not q.get("answered")]
    lines = ["## Gaps", "", f"{parts.get('answered', 0)} of {parts.get('of', len(asked))} "
             "parts of the question answered."]
    for q in open_:
        searched = "; ".join(str(s) for s in q.get("searched") or ()) or "nothing"
        why = str(q.get("why") or "").rstrip(".")
        lines.append(f"- {q.get('question')} Not answered. Searched: {searched}."
                     + (f" {why[:1].upper()}{why[1:]}." if why else ""))
    return [*lines, ""] if open_ else [*lines[:3], "", "None: every part is answered.", ""]


def _check_section(checked: Checked) -> list[str]:
    f = checked.figures()
    lines = ["## Citation check", "",
             f"Checked by Shoal's code, not a model: {f['cited']} cited sentence(s), "
             f"{f['supported']} supported by what they cite (citation precision "
             f"{f['precision']:.0%}); {f['resolved']} of {f['citations']} citation(s) resolve "
             f"to a passage of the sources or to rows of the data (resolution "
             f"{f['resolution']:.0%})."]
    removed = checked.failed
    if removed:
        lines.append("")
        lines += [f"- Removed: \"{v.sentence}\" ({v.reason})." for v in removed]
    return [*lines, ""]


def removed_wire(verdicts: Iterable[Verdict]) -> list[dict[str, Any]]:
    """The failed sentences, as the check's answer lists them."""
    return [v.wire() for v in verdicts if not v.supported]
