"""A typed plan's sub-questions (`questions` on an `expand` step; `plan_types`): which are
answered, and which are gaps, as the engine counts them — never as a model says.

The planner's run holds the sub-questions (`StepOptions.questions`); each planned task of a type
that `serves` them holds the ids it serves (`StepOptions.serves`). A sub-question is **answered**
once a task serving it has completed with something found: not a gap, and, for an answer in
the findings' shape (`{"answered": …, "findings": [...]}`), `answered` true with at least one
finding; any other answer counts when it has text. Otherwise it is a **gap**, saying what was
searched for it (each serving task's last query, else its name) and why nothing came of it
(skipped, failed, or found nothing).

`status` reads this off the subtasks, so the API's task detail, `task_complete` and the prompts
of the tasks after the retrievals (`told`) all say the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.engine.model import StepKind, SubtaskRecord
from shoal.states import SubtaskStatus

MAX_SEARCHED_CHARS = 300  # of one task's query, as a gap quotes it


@dataclass(frozen=True, slots=True)
class QuestionStatus:
    """One sub-question of a plan, and what came of it."""

    id: str
    question: str
    answered: bool
    by: tuple[str, ...]  # the tasks whose findings answer it
    searched: tuple[str, ...]  # what each task serving it looked for
    why: str  # for a gap: why nothing answers it ("" when answered)

    def wire(self) -> dict[str, Any]:
        """As the API and events show it."""
        out: dict[str, Any] = {"id": self.id, "question": self.question,
                               "answered": self.answered}
        if self.answered:
            return out | {"by": list(self.by)}
        return out | {"searched": list(self.searched), "why": self.why}


def status(subtasks: Iterable[SubtaskRecord]) -> list[QuestionStatus]:
    """Every sub-question of the task's typed plans, in the planner's order (none: []).
    A plan planned again (a later round) replaces the earlier one's questions."""
    subs = list(subtasks)
    planners = [s for s in subs if s.options.questions]
    if not planners:
        return []
    planner = max(planners, key=lambda s: s.options.seq or 0)
    runs = [s for s in subs if s.kind is StepKind.AGENT and s.options.serves
            and planner.id in s.dependencies]
    retried: dict[uuid.UUID, SubtaskRecord] = {}  # a run's last retry that answered
    for s in subs:
        if s.kind is StepKind.CORRECT and s.target_id is not None and s.output is not None:
            retried[s.target_id] = s
    found = []
    for qid, question in planner.options.questions:
        serving = [r for r in runs if qid in r.options.serves]
        by = tuple(r.name for r in serving if _found_something(r))
        found.append(QuestionStatus(
            id=qid, question=question, answered=bool(by), by=by,
            searched=tuple(_searched(r, retried.get(r.id)) for r in serving),
            why="" if by else _why(serving)))
    return found


def summary(found: list[QuestionStatus]) -> dict[str, Any]:
    """`n of m answered` and the gaps, for `task_complete` and the task's detail."""
    answered = sum(q.answered for q in found)
    return {"answered": answered, "of": len(found),
            "questions": [q.wire() for q in found]}


def told(subtasks: Iterable[SubtaskRecord]) -> str:
    """What a task after the retrievals (a synthesis, the report) is told of the question's
    parts: each answered one and by which tasks, each gap and what was searched for it."""
    found = status(subtasks)
    if not found:
        return ""
    lines = ["", "", "# The question's parts, as the engine counted them "
             f"({sum(q.answered for q in found)} of {len(found)} answered)"]
    for q in found:
        if q.answered:
            lines.append(f"- {q.id} answered ({', '.join(q.by)}): {q.question}")
        else:
            searched = "; ".join(q.searched) or "nothing"
            lines.append(f"- {q.id} NOT answered: {q.question} (searched: {searched}; "
                         f"{q.why})")
    lines.append("A report's Gaps are exactly the parts not answered, as listed here.")
    return "\n".join(lines)


def _found_something(run: SubtaskRecord) -> bool:
    out = run.output
    if run.status is not SubtaskStatus.COMPLETED or run.options.gap or out is None:
        return False
    parsed = out.parsed if out.answers else None
    if isinstance(parsed, Mapping) and "findings" in parsed:
        findings = parsed.get("findings")
        return parsed.get("answered") is not False and isinstance(findings, list) \
            and len(findings) > 0
    return bool(out.text.strip())


def _searched(run: SubtaskRecord, retry: SubtaskRecord | None) -> str:
    """What `run` searched last: its own query, else its last retry's (a run that became a
    gap keeps no answer of its own), else its name alone."""
    query = _query(run) or (_query(retry) if retry is not None else None)
    if query is None:
        return run.name  # skipped, failed, or an answer that does not say its query
    said = " ".join(query.split())
    if len(said) > MAX_SEARCHED_CHARS:
        said = said[:MAX_SEARCHED_CHARS].rsplit(" ", 1)[0] + " …"
    return f"{run.name}: {said}"


def _query(run: SubtaskRecord) -> str | None:
    out = run.output
    parsed = out.parsed if out is not None and out.answers else None
    query = parsed.get("query") if isinstance(parsed, Mapping) else None
    return query if isinstance(query, str) and query.strip() else None


def _why(serving: list[SubtaskRecord]) -> str:
    if not serving:
        return "no task of the plan served it"
    reasons = []
    for run in serving:
        if run.options.gap:
            reasons.append(f"{run.name} was skipped ({run.options.gap})")
        elif run.status is SubtaskStatus.FAILED:
            reasons.append(f"{run.name} failed")
        elif run.status is SubtaskStatus.COMPLETED:
            reasons.append(f"{run.name} found nothing in the sources")
        else:
            reasons.append(f"{run.name} has not run")
    return "; ".join(reasons)
