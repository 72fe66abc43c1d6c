"""The citation check in code, on a report nobody scripted: a sentence whose quote is not in
its passage, one whose figure its quote does not hold, a citation that resolves to nothing and
one whose SQL's rows lack a figure all fail; the rest stand; the report comes back without the
failed sentences, renumbered, with the question's gaps and the check's own figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shoal.retrieval.citecheck import Passage, check_report

PASSAGES = {
    "gc.html, \"Tuning\", lines 4-9": Passage(
        "gc.html, \"Tuning\", lines 4-9",
        "The collector runs when the heap grows by 10 % of its size. Setting GOGC=off turns "
        "it off entirely, which the Runtime Team does not recommend."),
    "threads.txt, lines 1-3": Passage(
        "threads.txt, lines 1-3", "Every public function is safe to call from many threads "
        "at once since version 2.1."),
}
ROWS = {'SELECT name, size FROM "packages" ORDER BY size DESC LIMIT 2':
        [{"name": "libllvm15", "size": 118_000}, {"name": "chromium", "size": 291_000}]}
REPORT = """\
# Tuning the collector

## Executive Summary

The collector runs when the heap grows by 10 % [1]. It can be turned off with GOGC=off [1].

## Key Findings

- The Runtime Team recommends GOGC=off for servers [2].
- Every public function is thread safe since version 2.1 [3].
- The collector pauses for 5 ms at most [4].
- The largest package is chromium at 291,000 kB [5].
- The second largest is libllvm15 at 120,000 kB [5].

## Gaps

- None.

## Sources

[1] gc.html, "Tuning", lines 4-9 \u2014 "The collector runs when the heap grows by 10 % of its \
size."
[2] gc.html, "Tuning", lines 4-9 \u2014 "The Runtime Team recommends it."
[3] threads.txt, lines 1-3 \u2014 "safe to call from many threads at once since version 2.1"
[4] pauses.md, "Latency", lines 2-3 \u2014 "pauses are under 5 ms"
[5] SQL: SELECT name, size FROM "packages" ORDER BY size DESC LIMIT 2
"""


def resolve(ref: str) -> Passage | None:
    return PASSAGES.get(ref)


def rerun(sql: str) -> Sequence[Mapping[str, Any]] | None:
    return ROWS.get(sql)


def quote_in(quote: str, text: str, fuzzy: bool) -> bool:
    return " ".join(quote.split()).casefold() in " ".join(text.split()).casefold()


def test_each_cited_sentence_is_checked_against_what_it_cites() -> None:
    parts = {"answered": 1, "of": 2, "questions": [
        {"id": "q1", "question": "How is it tuned?", "answered": True, "by": ["Tuning"]},
        {"id": "q2", "question": "Who maintains it?", "answered": False,
         "searched": ["Owners: maintainers team"], "why": "Owners found nothing"}]}
    checked = check_report(REPORT, resolve=resolve, rerun=rerun, quote_in=quote_in, parts=parts)
    reasons = {v.sentence: v.reason for v in checked.failed}
    assert set(reasons) == {
        "It can be turned off with GOGC=off [1].",  # true of the passage, not of its quote
        "The Runtime Team recommends GOGC=off for servers [2].",
        "The collector pauses for 5 ms at most [4].",
        "The second largest is libllvm15 at 120,000 kB [5]."}
    assert "quote is not in gc.html" in reasons["The Runtime Team recommends GOGC=off for "
                                                "servers [2]."]
    assert "does not resolve" in reasons["The collector pauses for 5 ms at most [4]."]
    assert "rows do not hold 120000" in reasons["The second largest is libllvm15 at 120,000 kB "
                                                "[5]."]
    assert "its quote does not say GOGC" in reasons["It can be turned off with GOGC=off [1]."]
    assert checked.figures() == {"cited": 7, "supported": 3, "precision": 0.4286,
                                 "citations": 7, "resolved": 6, "resolution": 0.8571}
    report = checked.report
    assert "GOGC=off for servers" not in report.split("## Citation check")[0]
    assert "- Every public function is thread safe since version 2.1 [2]." in report  # renumbered
    assert "- The largest package is chromium at 291,000 kB [3]." in report
    sources = report.split("## Sources", 1)[1]
    assert '- [2] threads.txt, lines 1-3 \u2014 \u201csafe to call' in sources
    assert '- [3] SQL: SELECT name, size' in sources
    assert "pauses.md" not in sources  # cited by nothing left
    assert checked.passages[2] == {"label": "threads.txt, lines 1-3",
                                   "text": PASSAGES["threads.txt, lines 1-3"].text,
                                   "quote": "safe to call from many threads at once since "
                                            "version 2.1"}
    assert checked.passages[3]["rows"][0] == {"name": "libllvm15", "size": 118_000}
    assert set(checked.passages) == {1, 2, 3}
    gaps = report.split("## Gaps", 1)[1].split("##", 1)[0]
    assert "1 of 2 parts of the question answered." in gaps
    assert ("- Who maintains it? Not answered. Searched: Owners: maintainers team. Owners "
            "found nothing.") in gaps
    assert "- None." not in gaps
    check = report.split("## Citation check", 1)[1].split("## Sources", 1)[0]
    assert "citation precision 43%" in check
    assert "resolution 86%" in check
    assert 'Removed: "The collector pauses for 5 ms at most [4]."' in check


def test_a_report_whose_every_sentence_stands_is_unchanged_but_for_its_check() -> None:
    report = ("# T\n\n## Key Findings\n\n- It runs when the heap grows by 10 % [1].\n\n"
              "## Sources\n\n[1] gc.html, \"Tuning\", lines 4-9 \u2014 \"grows by 10 % of its "
              "size\"\n")
    checked = check_report(report, resolve=resolve, rerun=rerun, quote_in=quote_in)
    assert checked.failed == []
    assert "- It runs when the heap grows by 10 % [1]." in checked.report
    assert "citation precision 100%" in checked.report
    assert "## Gaps" not in checked.report  # no parts counted: none written
