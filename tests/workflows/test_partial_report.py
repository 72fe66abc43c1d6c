"""A partial report's text: a report a model wrote is marked (a first paragraph, its Gaps section
naming what it did not), never twice; one Shoal writes lists each answer's cited findings under
numbers shared across tasks, and shows an answer with none as it is."""

from __future__ import annotations

from shoal.workflows.partial_report import PARTIAL, Outcome, from_findings, header, marked

REPORT = """# Heat

## Executive Summary

Eastfield is hottest [1].

## Gaps

- Tram rails: the sources do not say.

## Sources

[1] data.csv
"""


def test_a_report_is_marked_and_its_gaps_name_what_was_skipped() -> None:
    first = header(skipped=["Who does what", "Tram rails"])
    text = marked(REPORT, first, [("Who does what", "skipped: no budget"),
                                  ("Tram rails", "skipped: no budget")])
    assert text.startswith(f"{PARTIAL} the task's budget could not cover every task of its "
                           "plan. Skipped: Who does what, Tram rails.\n\n# Heat")
    gaps = text.split("## Gaps", 1)[1].split("## Sources", 1)[0]
    assert "- Who does what: skipped: no budget." in gaps
    assert gaps.count("Tram rails") == 1  # named already: not again
    assert text.endswith("[1] data.csv\n")


def test_a_report_without_gaps_gets_a_section_and_one_marked_already_no_second_mark() -> None:
    report = f"{PARTIAL} two lookups were skipped.\n\n# Heat\n\nEastfield is hottest."
    text = marked(report, header(skipped=["Tram rails"]), [("Tram rails", "skipped")])
    assert text.count(PARTIAL) == 1
    assert text.rstrip().endswith("## Gaps\n\n- Tram rails: skipped.")


def test_shoal_lists_findings_with_shared_numbers_and_an_uncited_answer_as_it_is() -> None:
    first = header(skipped=["C"], unfinished=["Report"], ran_out="9 tokens of 8",
                   by_shoal=True)
    text = from_findings("What is hot?", first, [
        Outcome("A", {"findings": [{"text": "East  is\nhot", "citation": "a.md, lines 1-2"}]}),
        Outcome("B", [{"rows": 3, "citation": "SQL: SELECT 1"},
                      {"text": "again", "citation": "a.md, lines 1-2"}]),
        Outcome("Count", {"count": 12}),
        Outcome("Notes", "Plain words."),
        Outcome("C", gap="skipped: no budget"),
        Outcome("D")])
    assert text.startswith(f"{PARTIAL} the task's budget ran out (9 tokens of 8) before its "
                           "report was written")
    assert "Not finished: Report." in text.split("\n", 1)[0]
    assert "### A\n\n- East is hot [1]\n" in text
    assert "### B\n\n- 3 [2]\n- again [1]\n" in text
    assert '"count": 12' in text.split("### Count", 1)[1]
    assert "### Notes\n\nPlain words.\n" in text
    gaps = text.split("## Gaps", 1)[1].split("## Sources", 1)[0]
    assert "- C: skipped: no budget." in gaps
    assert "- D: not finished: the budget ran out first." in gaps
    assert text.endswith("[1] a.md, lines 1-2\n[2] SQL: SELECT 1\n")
