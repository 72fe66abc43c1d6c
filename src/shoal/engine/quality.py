"""The quality loop's policies (seed 004 §3.4, §3.5, §3.7), as pure functions over values.

- `overall`: the weighted score of the five dimensions that were scored.
- `frequency_checkpoint`: the seed's low / medium / high rules.
- `review_needed`: the seed's trigger for a peer review.
- `review_outcome`: approve, auto-fix or escalate, from a review and the cycles done.
- `combine`: one evaluation from the evaluator tool's and the judge's answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

WEIGHTS: dict[str, float] = {"code_quality": 1.5, "completeness": 1.5, "security": 2.0,
                             "architecture": 1.0, "testability": 1.0}
LOW_SCORE = 7.0  # below this an evaluation opens a checkpoint
APPROVE_SCORE = 8.0  # a review must reach this to approve
AUTO_FIX_SCORE = 6.0  # a review below this is not auto-fixed
MAX_REVIEW_CYCLES = 3  # reviews of one subtask before a person decides

TOOLS_WITHOUT_REVIEW = frozenset({"echo", "evaluator"})  # their output is not judged
PENDING_REVIEW = "pending_review"  # a checkpoint waiting for a person

Frequency = Literal["low", "medium", "high"]
Outcome = Literal["approve", "fix", "escalate"]


def overall(scores: Mapping[str, float | None]) -> float | None:
    """The weighted mean of the dimensions that have a score (None when none has)."""
    scored = [(WEIGHTS[d], float(s)) for d, s in scores.items() if d in WEIGHTS and s is not None]
    if not scored:
        return None
    total = sum(w for w, _ in scored)
    return round(sum(w * s for w, s in scored) / total, 2)


def frequency_checkpoint(frequency: str, completed: int, total: int) -> bool:
    """Whether a checkpoint opens after `completed` of `total` subtasks (seed §3.7.1).

    - low: only before the final subtask (completed = total - 1);
    - medium: every 3 subtasks, or on first reaching 50 % (below 60 %), or before the final;
    - high: after every subtask.
    """
    if total <= 0 or completed <= 0:
        return False
    if frequency == "low":
        return completed == total - 1
    if frequency == "medium":
        return (completed % 3 == 0
                or total * 0.5 <= completed < total * 0.6
                or completed == total - 1)
    return frequency == "high"


def review_needed(complexity: int, score: float | None) -> bool:
    """The seed's trigger: complexity ≥ 3, or a good-but-not-excellent score (7 ≤ s < 9)."""
    if complexity >= 3:
        return True
    return score is not None and 7.0 <= score < 9.0


def review_outcome(score: float, decision: str, *, critical: int, auto_fix_possible: bool,
                   cycles_done: int) -> Outcome:
    """What follows a review (seed §3.5.3), `cycles_done` counting this review.

    Approve at ≥ 8 with decision "approved"; auto-fix when the reviewer says it can be fixed,
    nothing is critical, the score is ≥ 6 and fewer than 3 reviews were done; else a person.
    """
    if decision == "approved" and score >= APPROVE_SCORE:
        return "approve"
    if (auto_fix_possible and critical == 0 and score >= AUTO_FIX_SCORE
            and cycles_done < MAX_REVIEW_CYCLES):
        return "fix"
    return "escalate"


def mean_scores(evaluations: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The mean of each dimension, and of `overall`, over several evaluations (None if none)."""
    if not evaluations:
        return None
    sums: dict[str, list[float]] = {}
    for ev in evaluations:
        for dim, score in (ev.get("scores") or {}).items():
            if score is not None:
                sums.setdefault(dim, []).append(float(score))
    scores: dict[str, Any] = {d: round(sum(v) / len(v), 2) for d, v in sums.items()}
    overalls = [float(e["overall"]) for e in evaluations if e.get("overall") is not None]
    scores["overall"] = round(sum(overalls) / len(overalls), 2) if overalls else None
    return scores


def combine(tool_part: Mapping[str, Any] | None,
            judge_part: Mapping[str, Any] | None) -> dict[str, Any]:
    """One evaluation from the evaluator tool's dimensions and the judge's.

    Each dimension keeps its score (None when not applicable or not scored), issues and
    suggestions; `overall` weighs the scored ones; `missing` names the parts that failed.
    """
    dimensions: dict[str, dict[str, Any]] = {}
    for part in (tool_part or {}, judge_part or {}):
        for name, value in part.items():
            if name in WEIGHTS and isinstance(value, Mapping):
                score = value.get("score")
                applicable = value.get("applicable", True)
                dimensions[name] = {
                    "score": float(score) if isinstance(score, int | float) and applicable
                    else None,
                    "issues": list(value.get("issues") or []),
                    "suggestions": list(value.get("suggestions") or []),
                    "neutral": bool(value.get("neutral", False)),
                }
    scores = {name: d["score"] for name, d in dimensions.items()}
    missing = [name for name, part in (("tools", tool_part), ("judge", judge_part))
               if part is None]
    return {"overall": overall(scores), "scores": scores, "dimensions": dimensions,
            "missing": missing}
