"""The results of one `shoal eval research` as a JSON document (what `--output` writes).

```
{"set": {name, version, questions, files}, "date", "shoal_version",
 "retrieval": {"bm25": {mode, k, recall_at_5, mrr, note, parts: […]},
               "hybrid": {…} | null, "hybrid_note", "questions": {id: {bm25, hybrid}}},
 "end_to_end": null | {"server", "model", "judge", "figures": {…}, "questions": […]}}
```

Each question's entry keeps its task's report (Markdown), so a run on an embedded Shoal, whose
data is gone when it ends, can still be read. A ratio is a number from 0 to 1, or null where
nothing was measured (no citation check in the task's detail, no unanswerable part among the
questions run, no judge).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shoal import __version__
from shoal.evals.research.goldset import GoldSet
from shoal.evals.research.recall import Retrieval
from shoal.evals.research.scores import QuestionScore, Summary


@dataclass(frozen=True, slots=True)
class EndToEnd:
    """How the questions ran: where, with which model and judge, and their scores."""

    server: str
    model: str
    judge: str
    scores: Sequence[QuestionScore]


def results_document(gold: GoldSet, retrieval: Sequence[Retrieval], *, hybrid_note: str,
                     end_to_end: EndToEnd | None) -> dict[str, Any]:
    """The JSON document of one evaluation."""
    by_mode = {r.mode: r for r in retrieval}
    return {
        "set": {"name": gold.name, "version": gold.version,
                "questions": [q.id for q in gold.questions], "files": gold.sources},
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "shoal_version": __version__,
        "retrieval": {
            "bm25": by_mode["bm25"].as_json() if "bm25" in by_mode else None,
            "hybrid": by_mode["hybrid"].as_json() if "hybrid" in by_mode else None,
            "hybrid_note": hybrid_note,
            "questions": {q.id: {mode: _pair(r.of_question(q.id)) for mode, r in by_mode.items()}
                          for q in gold.questions},
        },
        "end_to_end": None if end_to_end is None else {
            "server": end_to_end.server, "model": end_to_end.model, "judge": end_to_end.judge,
            "figures": Summary(end_to_end.scores).figures(),
            "questions": [question_json(s) for s in end_to_end.scores],
        },
    }


def _pair(figures: tuple[float, float] | None) -> dict[str, float] | None:
    return None if figures is None else {"recall_at_5": round(figures[0], 4),
                                         "mrr": round(figures[1], 4)}


def question_json(score: QuestionScore) -> dict[str, Any]:
    """One question's end-to-end figures and what they rest on."""
    figures = Summary([score]).figures()
    citations = score.citations
    return {
        "id": score.question, "task_id": score.task_id, "status": score.status,
        "seconds": score.seconds, "has_report": score.has_report, "problem": score.problem,
        "answered": figures["answered"], "gaps_listed": figures["gaps_listed"],
        "errors": figures["errors"], "facts_found": figures["facts_found"],
        "judged": figures["judged"],
        "citations": None if citations is None else {
            "precision": citations.precision, "resolution": citations.resolution,
            "cited": citations.cited, "supported": citations.supported,
            "citations": citations.citations, "resolved": citations.resolved,
            "removed": citations.removed},
        "foreign_sentences": list(score.foreign),
        "parts": [{"part": p.part, "answerable": p.answerable, "outcome": str(p.outcome),
                   "asked_as": p.asked_as, "error": p.error, "facts_found": p.facts_found,
                   "facts": p.facts, "judged": p.judged} for p in score.parts],
        "report": score.report,
    }
