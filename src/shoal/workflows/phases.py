"""The phase of a task whose document plans typed tasks (seed 002: initializing → planning →
planned → executing → synthesizing → complete | failed), read from its subtasks: the engine
says each change in a `phase` event, and the task's detail shows it."""

from __future__ import annotations

from collections.abc import Iterable

from shoal.engine.model import StepKind, SubtaskRecord
from shoal.states import TERMINAL_SUBTASK, TERMINAL_TASK, SubtaskStatus, TaskStatus
from shoal.workflows.document import WorkflowDocument
from shoal.workflows.plan_types import Phase

PLAN_CHECKPOINT = "plan"  # `people.PLAN`: a plan waiting for a person


def moved(before: str, after: str) -> list[str]:
    """The phases from `before` to `after`: a plan made and started in one decision was
    `planned` in between."""
    if before == Phase.PLANNING and after in (Phase.EXECUTING, Phase.SYNTHESIZING):
        return [Phase.PLANNED, after]
    return [after]


def phased(doc: WorkflowDocument) -> bool:
    """Whether `doc`'s tasks go through phases: it has a step with a typed plan."""
    return any(s.types for s in doc.steps)


def phase_of(doc: WorkflowDocument, status: TaskStatus, subtasks: Iterable[SubtaskRecord],
             waiting: Iterable[str]) -> Phase:
    """The phase of a task of `doc` in `status` with these subtasks and open checkpoints
    (`waiting`: their reasons)."""
    if status is TaskStatus.COMPLETED:
        return Phase.COMPLETE
    if status in TERMINAL_TASK:
        return Phase.FAILED
    subs = list(subtasks)
    planner = next((s for s in reversed(subs) if s.kind is StepKind.EXPAND), None)
    if planner is None:
        return Phase.INITIALIZING
    if planner.status not in TERMINAL_SUBTASK:
        return Phase.PLANNING if planner.attempts or planner.status is \
            SubtaskStatus.IN_PROGRESS else Phase.INITIALIZING
    if PLAN_CHECKPOINT in waiting:
        return Phase.PLANNED
    types = {name: kind for s in doc.steps for name, kind in s.types.items()}
    left = {types[s.options.plan_type].phase for s in subs
            if s.kind is StepKind.AGENT and s.options.plan_type in types
            and s.status is not SubtaskStatus.COMPLETED}
    if not left:
        return Phase.SYNTHESIZING if any(s.options.plan_type for s in subs) else Phase.PLANNED
    return Phase.EXECUTING if Phase.EXECUTING in left else Phase.SYNTHESIZING
