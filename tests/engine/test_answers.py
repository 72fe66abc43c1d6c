"""Model answers: JSON found in prose and fences, and the judge's and reviewer's answers."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shoal.engine.answers import (
    AnswerError,
    DimensionScore,
    Issue,
    JudgeResult,
    extract_json,
    find_json,
    parse_judge,
    parse_review,
)
from shoal.errors import InvalidInput

JUDGE = {"completeness": {"score": 8, "issues": ["No tests."], "suggestions": ["Add tests."]},
         "architecture": {"score": 7.5, "issues": [], "suggestions": ["Split the module."]}}
REVIEW: dict[str, Any] = {
    "review_score": 7.5,
    "issues": [
        {"severity": "high", "file": "auth.py", "line": 45, "description": "Password logged.",
         "suggestion": "Remove it from the log."},
        {"severity": "low", "file": "auth.py", "line": None, "description": "Naming.",
         "suggestion": "Rename x."},
    ],
    "summary": "Functional, with a security issue.",
    "decision": "needs_revision",
    "auto_fix_possible": True,
    "auto_fix_instructions": "1. Remove the password from the log.",
}


# ---- extract_json ------------------------------------------------------------------------


def test_extracts_plain_json() -> None:
    """A whole answer that is JSON is that value, surrounding whitespace aside."""
    assert extract_json('\n  {"a": [1, 2]}  \n') == {"a": [1, 2]}


def test_extracts_a_json_fence() -> None:
    """A ```json block is read even with prose around it."""
    text = 'Here you go:\n```json\n{"a": 1}\n```\nAnything else?'
    assert extract_json(text) == {"a": 1}


def test_extracts_a_bare_fence() -> None:
    """A fence without a language tag is read too."""
    assert extract_json("Result:\n```\n[1, 2, 3]\n```") == [1, 2, 3]


def test_fence_wins_over_earlier_prose_json() -> None:
    """A fenced block is preferred to a balanced span that comes before it in the prose."""
    text = 'The config {"mode": "fast"} stays.\n```json\n{"score": 9}\n```'
    assert extract_json(text) == {"score": 9}


def test_extracts_chatty_json_with_braces_inside_strings() -> None:
    """Brackets and escaped quotes inside JSON strings do not end the object early."""
    text = ('Sure! [as asked] {thinking} Here it is: {"note": "a } and ] and \\" {", '
            '"list": ["[", "}"]} Hope that helps {really}.')
    assert extract_json(text) == {"note": 'a } and ] and " {', "list": ["[", "}"]}


def test_extracts_an_array_in_prose() -> None:
    """A balanced array in prose is found like an object."""
    assert extract_json('The plan is [{"name": "A"}], done.') == [{"name": "A"}]


def test_skips_an_invalid_span_for_a_later_valid_one() -> None:
    """A balanced span that is not JSON is passed over for the next one."""
    assert extract_json('First {"a": 1,} then {"b": 2}') == {"b": 2}


@pytest.mark.parametrize("text", ["", "No JSON here.", "[see below] and {this}", '{"a": 1',
                                  "```python\nprint(1)\n```"])
def test_extracts_nothing(text: str) -> None:
    """An answer without JSON gives None."""
    assert extract_json(text) is None
    assert not find_json(text).found


def test_reports_why_json_like_text_is_not_json() -> None:
    """Broken JSON reports the parser's error, positioned in the whole answer."""
    search = find_json('Answer:\n{"a": 1,}')
    assert not search.found
    assert search.error is not None
    assert "line 2" in search.error


def test_prose_brackets_are_no_parse_error() -> None:
    """Bracketed prose like "[see below]" is not reported as a JSON error."""
    assert find_json("Fine [see below] overall.").error is None


def test_prefer_skips_unwanted_values() -> None:
    """With `prefer`, an unrelated object before the wanted array is passed over."""
    text = 'Config {"mode": "fast"} and the plan [{"name": "A"}]'
    assert extract_json(text, prefer=lambda v: isinstance(v, list)) == [{"name": "A"}]


def test_prefer_falls_back_to_the_first_value() -> None:
    """When `prefer` accepts nothing, the first JSON value is returned."""
    assert extract_json('{"a": 1} {"b": 2}', prefer=lambda v: False) == {"a": 1}


def test_pathological_brackets_are_fast() -> None:
    """Long runs of unbalanced or mismatched brackets are settled quickly."""
    started = time.perf_counter()
    for text in ("[" * 100_000, "{" * 50_000 + "]", '{"' * 50_000, "[" * 5_000 + "x" +
                 "]" * 5_000):
        assert not find_json(text).found
    assert time.perf_counter() - started < 2.0


# ---- parse_judge -------------------------------------------------------------------------


def test_parses_a_judge_answer() -> None:
    """A judge's answer becomes two scored dimensions with their issues and suggestions."""
    result = parse_judge(json.dumps(JUDGE))
    assert result == JudgeResult(
        DimensionScore(8.0, ("No tests.",), ("Add tests.",)),
        DimensionScore(7.5, (), ("Split the module.",)),
    )
    assert result.as_dimensions()["architecture"] == {
        "score": 7.5, "issues": [], "suggestions": ["Split the module."]}


def test_judge_scores_are_clamped_and_rounded() -> None:
    """Scores are clamped to 0..10 and rounded to one decimal; numeric strings count."""
    text = json.dumps({"completeness": {"score": 12}, "architecture": {"score": "6.66"}})
    result = parse_judge(text)
    assert (result.completeness.score, result.architecture.score) == (10.0, 6.7)
    negative = parse_judge('{"completeness": {"score": -3}, "architecture": {"score": 0.04}}')
    assert (negative.completeness.score, negative.architecture.score) == (0.0, 0.0)


def test_judge_defaults_missing_lists() -> None:
    """Missing issues and suggestions are empty; a single string becomes one item."""
    result = parse_judge('{"completeness": {"score": 9, "issues": "One."}, '
                         '"architecture": {"score": 8, "suggestions": null}}')
    assert result.completeness == DimensionScore(9.0, ("One.",), ())
    assert result.architecture == DimensionScore(8.0, (), ())


def test_judge_accepts_bare_scores_and_chatty_answers() -> None:
    """A dimension given as a bare number is its score, even amid prose."""
    result = parse_judge('Scores: {"completeness": 9, "architecture_alignment": 7} done')
    assert (result.completeness.score, result.architecture.score) == (9.0, 7.0)


def test_judge_skips_unrelated_objects() -> None:
    """An object without the judge's keys before the answer does not hide it."""
    result = parse_judge(f'Input was {{"path": "a.py"}}. My answer: {json.dumps(JUDGE)}')
    assert result.completeness.score == 8.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Looks good to me, 9/10.", "holds no valid JSON"),
        ('{"completeness": {"score": 9},', "holds no valid JSON \\(Expecting"),
        ("[1, 2]", "is a list, not a JSON object"),
        ("7", "is a number \\(7\\), not a JSON object"),
        ('{"architecture": {"score": 8}}', '"completeness" is missing'),
        ('{"completeness": {"score": 8}, "architecture": {"issues": []}}',
         '"architecture.score" is missing'),
        ('{"completeness": {"score": "high"}, "architecture": {"score": 8}}',
         "a string \\('high'\\), not a number"),
        ('{"completeness": {"score": NaN}, "architecture": {"score": 8}}', "not a number"),
        ('{"completeness": {"score": true}, "architecture": {"score": 8}}', "a boolean"),
    ],
)
def test_judge_errors_say_what_was_wrong(text: str, message: str) -> None:
    """An unusable judge's answer raises AnswerError naming the problem and the shape wanted."""
    with pytest.raises(AnswerError, match=message) as info:
        parse_judge(text)
    assert '"completeness": {"score"' in info.value.message
    assert isinstance(info.value, InvalidInput)


# ---- parse_review ------------------------------------------------------------------------


def test_parses_the_seed_review() -> None:
    """The seed's review JSON becomes a ReviewResult with typed issues."""
    result = parse_review(json.dumps(REVIEW))
    assert result.score == 7.5
    assert result.issues[0] == Issue("high", "auth.py", 45, "Password logged.",
                                     "Remove it from the log.")
    assert result.issues[1].line is None
    assert result.summary == "Functional, with a security issue."
    assert result.decision == "needs_revision"
    assert result.auto_fix_possible is True
    assert result.auto_fix_instructions == "1. Remove the password from the log."


def test_severity_counts_cover_every_severity() -> None:
    """severity_counts has all four severities, most severe first, zero when absent."""
    assert parse_review(json.dumps(REVIEW)).severity_counts() == {
        "critical": 0, "high": 1, "medium": 0, "low": 1}


def test_review_defaults_missing_fields() -> None:
    """Only the score is required: the rest defaults, and no blocking issue means approved."""
    result = parse_review('{"review_score": 9.25}')
    assert (result.score, result.issues, result.summary) == (9.2, (), "")
    assert result.decision == "approved"
    assert (result.auto_fix_possible, result.auto_fix_instructions) == (False, "")


def test_review_issue_fields_are_normalised() -> None:
    """Unknown severities become medium, lines must be positive integers, strings are issues."""
    text = json.dumps({"review_score": 15, "issues": [
        {"severity": "Blocker", "line": "12"}, {"severity": "CRITICAL", "line": 0},
        {"severity": "low", "line": 3.0, "file": None}, "Plain text issue.", 42]})
    result = parse_review(text)
    assert result.score == 10.0
    assert [(i.severity, i.line) for i in result.issues] == [
        ("medium", 12), ("critical", None), ("low", 3), ("medium", None)]
    assert result.issues[2].file == ""
    assert result.issues[3].description == "Plain text issue."


def test_review_decision_is_derived_when_missing_or_unknown() -> None:
    """Without a known decision, a critical or high issue means needs_revision."""
    text = json.dumps({"review_score": 8, "decision": "maybe",
                       "issues": [{"severity": "critical", "description": "x"}]})
    assert parse_review(text).decision == "needs_revision"
    assert parse_review('{"review_score": 8, "decision": "Needs Revision"}').decision == (
        "needs_revision")
    assert parse_review('{"review_score": 4, "decision": "APPROVED"}').decision == "approved"


def test_review_reads_loose_types() -> None:
    """A "true" string is a flag, instructions as a list are joined, "score" is an alias."""
    text = json.dumps({"score": 7, "auto_fix_possible": "true",
                       "auto_fix_instructions": ["Step one.", "Step two."]})
    result = parse_review(f"```json\n{text}\n```")
    assert result.score == 7.0
    assert result.auto_fix_possible is True
    assert result.auto_fix_instructions == "Step one.\nStep two."


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Approved, nice work!", "holds no valid JSON"),
        ('"approved"', "is a string \\('approved'\\), not a JSON object"),
        ('{"decision": "approved"}', '"review_score" is missing'),
        ('{"review_score": "great"}', "a string \\('great'\\), not a number"),
        ('{"review_score": null}', '"review_score" is missing'),
        ('{"review_score": 8, "issues": [{"severity": "high"}', "holds no valid JSON \\(Exp"),
    ],
)
def test_review_errors_say_what_was_wrong(text: str, message: str) -> None:
    """An unusable review raises AnswerError naming the problem and the shape wanted."""
    with pytest.raises(AnswerError, match=message) as info:
        parse_review(text)
    assert '"review_score": <0-10>' in info.value.message
