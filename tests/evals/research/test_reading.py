"""Reports read by code and scored against the gold: cited sentences, gaps, the task's
sub-questions matched to the gold parts, both kinds of error, gold facts, the citation check's
figures, and sentences naming the demo's sample corpus."""

from __future__ import annotations

import re
from typing import Any

from shoal.demo.corpus import corpus_files
from shoal.evals.research.goldset import load_set, normalised, plain_text
from shoal.evals.research.reading import (
    DEMO_NAMES,
    cited_sentences,
    foreign_terms,
    gap_lines,
    matching_question,
)
from shoal.evals.research.results import question_json
from shoal.evals.research.scores import Outcome, Summary, score_question

SET = load_set()
QUESTION = SET.chosen(["libffi-safety"]).questions[0]
TERMS = foreign_terms(SET.files)

REPORT = """# Is libffi thread-safe?

## Executive Summary

libffi is not completely thread-safe [1]. Its closures take memory from an anonymous mapping,
not from malloc [2].

## Key Findings

- ffi_prep_cif may modify the ffi_type objects passed to it [1].
- Norhaven planted 50,000 street trees in 2024 alone [3]

## Gaps

- Does libffi support variadic closures? The sources do not say; searched: variadic closures.

## Sources

[1] libffi-thread-safety.html
[2] libffi-memory-usage.html
"""


def _detail(**citations: Any) -> dict[str, Any]:
    asked = [{"id": "q1", "question": "Is libffi thread-safe?", "answered": True},
             {"id": "q2", "question": "Where does the memory for libffi closures come from?",
              "answered": True},
             {"id": "q3", "question": "Does libffi support variadic closures?",
              "answered": False}]
    return {"questions": {"answered": 2, "of": 3, "questions": asked}} | (
        {"citations": citations} if citations else {})


def test_cited_sentences_leave_out_gaps_and_sources() -> None:
    """Only the content sections' sentences with a marker count as cited."""
    cited = cited_sentences(REPORT)
    assert cited[0] == "libffi is not completely thread-safe [1]."
    assert len(cited) == 4
    assert not any("variadic" in s or s.startswith("[1] libffi") for s in cited)
    assert gap_lines(REPORT) == ["Does libffi support variadic closures?",
                                 "The sources do not say; searched: variadic closures."]


def test_a_report_that_answers_and_lists_its_gap_scores_no_error() -> None:
    """Two answerable parts answered, the unanswerable one a gap, every gold fact found."""
    score = score_question(QUESTION, task_id="t", status="completed", seconds=1.0,
                           detail=_detail(), report=REPORT, terms=TERMS)
    assert [p.outcome for p in score.parts] == [Outcome.answered, Outcome.answered, Outcome.gap]
    assert [p.error for p in score.parts] == [None, None, None]
    assert [(p.facts_found, p.facts) for p in score.parts[:2]] == [(2, 2), (2, 2)]
    figures = Summary([score]).figures()
    assert (figures["answered"], figures["gaps_listed"]) == (1.0, 1.0)
    assert figures["citation_precision"] is None  # the detail has no check: not measured


def test_both_kinds_of_error_are_counted() -> None:
    """An answerable part the engine counts unanswered, and an unanswerable part it counts
    answered and the report does not list, are one error each."""
    detail = _detail()
    asked = detail["questions"]["questions"]
    asked[0]["answered"], asked[2]["answered"] = False, True
    report = REPORT.split("## Gaps")[0]
    score = score_question(QUESTION, task_id="t", status="completed", seconds=1.0,
                           detail=detail, report=report, terms=TERMS)
    assert [p.error for p in score.parts] == ["answerable_as_gap", None, "unanswerable_not_gap"]
    assert Summary([score]).figures()["errors"] == {"answerable_as_gap": 1,
                                                    "unanswerable_not_gap": 1}


def test_a_gap_named_in_other_words_is_found_without_the_tasks_questions() -> None:
    """Without sub-questions in the detail, a gap line covering the part's words names it; a
    part neither answered nor listed is missing."""
    score = score_question(QUESTION, task_id="t", status="completed", seconds=1.0,
                           detail={}, report=REPORT, terms=TERMS)
    assert [p.outcome for p in score.parts] == [Outcome.missing, Outcome.missing, Outcome.gap]


def test_a_gap_line_names_the_part_it_covers_most_not_one_sharing_some_words() -> None:
    """The gap of the question's third part ("…of Python's sort?") shares words with its first
    ("Are Python's sorts…"): the first, answered, is not counted a gap (possessives are not
    words of their own)."""
    question = SET.chosen(["sorting-stability"]).questions[0]
    first, _, third = (p.question for p in question.parts)
    asked = [{"id": f"q{i}", "question": p.question, "answered": i != 3}
             for i, p in enumerate(question.parts, 1)]
    report = (f"# Sorting\n\n## Key Findings\n\n- Sorts are guaranteed to be stable [1].\n\n"
              f"## Gaps\n\n- {third} Not answered. Searched: {third}\n")
    score = score_question(question, task_id="t", status="completed", seconds=1.0,
                           detail={"questions": {"questions": asked}}, report=report, terms=TERMS)
    assert "Python's" in first
    assert "Python's" in third
    assert [p.outcome for p in score.parts] == [Outcome.answered, Outcome.answered, Outcome.gap]


def test_the_tasks_wording_of_a_part_is_matched_to_it() -> None:
    """A sub-question in other words but the same content is matched; an unrelated one not."""
    asked = [{"question": "Can libffi be used from several threads safely?"},
             {"question": "Is libffi thread safe?"}]
    assert matching_question("Is libffi thread-safe?", asked) == asked[1]
    assert matching_question("Which compression level is the default?", asked) is None


def test_the_citation_check_of_the_detail_is_reported() -> None:
    """Precision and resolution are the engine's, pooled over reports by their counts."""
    scores = [score_question(QUESTION, task_id=t, status="completed", seconds=1.0,
                             detail=_detail(cited=cited, supported=supported,
                                            precision=supported / cited, citations=cited,
                                            resolved=cited, resolution=1.0, removed=[]),
                             report=REPORT, terms=TERMS)
              for t, cited, supported in (("a", 4, 4), ("b", 4, 2))]
    figures = Summary(scores).figures()
    assert (figures["citation_precision"], figures["citation_resolution"]) == (0.75, 1.0)
    assert question_json(scores[1])["citations"]["precision"] == 0.5


def test_a_sentence_about_the_demo_corpus_is_found() -> None:
    """The demo's name of its city, or one of its figures, marks a sentence as foreign; the
    set's own figures do not."""
    score = score_question(QUESTION, task_id="t", status="completed", seconds=1.0,
                           detail=_detail(), report=REPORT, terms=TERMS)
    assert score.foreign == ("Norhaven planted 50,000 street trees in 2024 alone [3]",)
    assert TERMS.found_in("Eastfield had 1,148 heat-related call-outs") == ["Eastfield",
                                                                            "1148"]
    assert TERMS.found_in("zstd -1 reaches 2.887 at 530 MB/s; misc takes 1,724,208 KiB") == []


def test_the_demo_names_are_the_demo_corpus_s_and_not_the_set_s() -> None:
    """Every name listed is in the demo's sample corpus, and none is in the set's files."""
    demo = " ".join(p.read_text(errors="ignore") for p in corpus_files() if p.suffix != ".pdf")
    ours = normalised(" ".join(plain_text(p) for p in SET.files))
    assert {n for n in DEMO_NAMES if n not in demo} == set()
    assert {n for n in DEMO_NAMES if re.search(rf"\b{n.lower()}\b", ours)} == set()
    assert TERMS.names == DEMO_NAMES
    assert TERMS.figures


def test_a_task_without_a_report_says_so() -> None:
    """A task that ended with no report is scored, with the reason."""
    score = score_question(QUESTION, task_id="t", status="budget_exceeded", seconds=1.0,
                           detail=_detail(), report=None, terms=TERMS)
    assert not score.has_report
    assert score.problem == "the task ended budget_exceeded with no report"
    assert Summary([score]).figures()["reports"] == 0
