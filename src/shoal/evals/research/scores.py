"""A finished research task scored against its gold question, and the set's figures.

Each gold part gets an outcome from what the task says of it (`reading` does the matching):

- `gap`: the report's gaps name it, or the task's matching sub-question is counted unanswered;
- `answered`: else, the task's matching sub-question is counted answered;
- `missing`: neither (the task named no sub-question like it, and its gaps do not name it).

Two kinds of error are counted: an answerable part listed as a gap, and an unanswerable part
not listed as one. Beside them: the gold facts of the answerable parts found in the report's
cited sentences (`goldset.fact_found`, a lexical check), the citation figures the task's
detail carries (`citations`, computed by the engine's check; absent: not measured), and the
report's sentences about another corpus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shoal.evals.research.goldset import Part, Question, fact_found
from shoal.evals.research.reading import (
    ForeignTerms,
    cited_sentences,
    foreign_sentences,
    gap_lines,
    matching_question,
    names_gap,
)


class Outcome(StrEnum):
    """What the task made of a gold part."""

    answered = "answered"
    gap = "gap"
    missing = "missing"


@dataclass(frozen=True, slots=True)
class PartScore:
    """One gold part: its outcome, the task's sub-question matched to it, the gold facts the
    report's cited sentences state, and a judge's verdict if one was asked (0 to 1)."""

    part: str
    answerable: bool
    outcome: Outcome
    asked_as: str | None
    facts_found: int
    facts: int
    judged: float | None = None

    @property
    def error(self) -> str | None:
        """"answerable_as_gap", "unanswerable_not_gap", or None."""
        if self.answerable and self.outcome is Outcome.gap:
            return "answerable_as_gap"
        if not self.answerable and self.outcome is not Outcome.gap:
            return "unanswerable_not_gap"
        return None


@dataclass(frozen=True, slots=True)
class Citations:
    """The engine's citation check of one report (the task detail's `citations`)."""

    cited: int
    supported: int
    citations: int
    resolved: int
    precision: float
    resolution: float
    removed: int


@dataclass(frozen=True, slots=True)
class QuestionScore:
    """One question's task, what it scored, and its report (Markdown; "" when none)."""

    question: str
    task_id: str
    status: str
    seconds: float
    parts: tuple[PartScore, ...]
    citations: Citations | None
    foreign: tuple[str, ...]
    has_report: bool
    problem: str = ""
    report: str = ""


def score_question(question: Question, *, task_id: str, status: str, seconds: float,
                   detail: Mapping[str, Any], report: str | None,
                   terms: ForeignTerms) -> QuestionScore:
    """`question`'s task (its `detail` and its Markdown `report`, None when it has none)
    scored against the gold."""
    text = report or ""
    asked = list((detail.get("questions") or {}).get("questions") or [])
    gaps, cited = gap_lines(text), " ".join(cited_sentences(text))
    parts = tuple(_part_score(part, asked, gaps, cited,
                              others=[o.question for o in question.parts if o is not part])
                  for part in question.parts)
    problem = "" if report is not None else f"the task ended {status} with no report"
    return QuestionScore(question.id, task_id, status, round(seconds, 1), parts,
                         citations_of(detail), tuple(foreign_sentences(text, terms)),
                         report is not None, problem, text)


def _part_score(part: Part, asked: Sequence[dict[str, Any]], gaps: list[str],
                cited: str, *, others: Sequence[str]) -> PartScore:
    match = matching_question(part.question, asked)
    if names_gap(gaps, part.question, match, others=others) or (
            match is not None and not match.get("answered")):
        outcome = Outcome.gap
    elif match is not None:
        outcome = Outcome.answered
    else:
        outcome = Outcome.missing
    found = sum(fact_found(fact, cited) for fact in part.facts)
    return PartScore(part.id, part.answerable, outcome,
                     str(match["question"]) if match else None, found, len(part.facts))


def citations_of(detail: Mapping[str, Any]) -> Citations | None:
    """The task detail's citation check, or None when the task has none (not measured)."""
    found = detail.get("citations")
    if not isinstance(found, Mapping) or found.get("precision") is None:
        return None
    cited, citations = int(found.get("cited") or 0), int(found.get("citations") or 0)
    removed = found.get("removed") or []
    return Citations(cited=cited, supported=int(found.get("supported") or 0),
                     citations=citations, resolved=int(found.get("resolved") or 0),
                     precision=float(found["precision"]),
                     resolution=float(found.get("resolution") or 0.0),
                     removed=len(removed) if isinstance(removed, list) else int(removed))


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


@dataclass(frozen=True, slots=True)
class Summary:
    """The set's end-to-end figures over the questions run."""

    scores: Sequence[QuestionScore] = field(default_factory=tuple)

    def figures(self) -> dict[str, Any]:
        """The figures, as the JSON output and the table show them (None: not measured)."""
        parts = [p for s in self.scores for p in s.parts]
        answerable = [p for p in parts if p.answerable]
        unanswerable = [p for p in parts if not p.answerable]
        checked = [s.citations for s in self.scores if s.citations is not None]
        judged = [p.judged for p in answerable if p.judged is not None]
        return {
            "tasks": len(self.scores),
            "completed": sum(s.status == "completed" for s in self.scores),
            "reports": sum(s.has_report for s in self.scores),
            "answered": _share(sum(p.outcome is Outcome.answered for p in answerable),
                               len(answerable)),
            "gaps_listed": _share(sum(p.outcome is Outcome.gap for p in unanswerable),
                                  len(unanswerable)),
            "answerable_parts": len(answerable),
            "unanswerable_parts": len(unanswerable),
            "errors": {"answerable_as_gap": sum(p.error == "answerable_as_gap" for p in parts),
                       "unanswerable_not_gap": sum(p.error == "unanswerable_not_gap"
                                                   for p in parts)},
            "citation_precision": _pooled(checked, "supported", "cited", "precision"),
            "citation_resolution": _pooled(checked, "resolved", "citations", "resolution"),
            "citations_measured": len(checked),
            "foreign_sentences": sum(len(s.foreign) for s in self.scores),
            "facts_found": _share(sum(p.facts_found for p in answerable),
                                  sum(p.facts for p in answerable)),
            "judged": round(sum(judged) / len(judged), 4) if judged else None,
        }


def _pooled(checked: Sequence[Citations], part: str, whole: str, ratio: str) -> float | None:
    """A ratio over every report checked (their counts pooled; their ratios averaged when the
    counts are missing), or None when none was."""
    if not checked:
        return None
    total: int = sum(getattr(c, whole) for c in checked)
    if total:
        return round(sum(int(getattr(c, part)) for c in checked) / total, 4)
    return round(sum(float(getattr(c, ratio)) for c in checked) / len(checked), 4)
