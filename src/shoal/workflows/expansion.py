"""An `expand` step: its role plans subtasks with dependencies, and the step's `each` role runs
every one of them (seed 004's planner, for any document).

The plan is read as the `dag` workflow reads its planner (`engine.planning.decompose`: the JSON,
else a template, else a split of the request, with a notice saying why). Each planned subtask
is a run `step#n.i` of the same round as the plan, after the plan and the subtasks it depends
on; the step's entry is their answers in plan order once all are done.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from shoal.engine import dag, graph, planning
from shoal.engine.model import StepKind, StepOptions, SubtaskRecord, evolve
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import SubtaskStatus
from shoal.workflows.document import StepDoc, WorkflowDocument

MAX_PLANNED = 50  # subtasks one expand step may plan
PLAN_FORMAT = (
    "\n\nAnswer with only a JSON object listing at most {most} subtasks, each depending only on "
    'earlier ones: {{"subtasks": [{{"name": "…", "description": "…", "dependencies": '
    '["name of an earlier subtask"]}}]}}')


def add_planned(step: Step, doc: WorkflowDocument, doc_step: StepDoc, planner: SubtaskRecord,
                answer: str | None, prompt: Callable[[str], str]) -> None:
    """The runs of the subtasks the planner's `answer` plans; `prompt` renders the `each`
    role's prompt for one (`{item}` is its name and description). With no `answer` (the
    planner failed for good), the request is planned by the fallbacks alone."""
    most = min(step.ctx.max_subtasks, MAX_PLANNED)
    plan = planning.decompose(answer, step.task.description, step.task.meta.requirements,
                              max_subtasks=most)
    for note in plan.notes:
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(planner.id),
                  message=f"Step '{doc_step.id}': {note}")
    add_plan(step, doc, doc_step, plan, planner.key, planner.options.seq, (planner.id,),
             prompt)


def add_plan(step: Step, doc: WorkflowDocument, doc_step: StepDoc, plan: planning.Plan,
             key: str, seq: int | None, after: tuple[uuid.UUID, ...],
             prompt: Callable[[str], str],
             options: tuple[Mapping[str, Any], ...] = ()) -> None:
    """One run `key.i` per subtask of `plan` (the planner's, or the user's own with its
    per-subtask `options`), each after `after` and the subtasks it depends on."""
    assert doc_step.each is not None  # the document check says so
    role = doc.roles[doc_step.each]
    servers = role.mcp_specs()
    ids = {p.key: step.ctx.new_id() for p in plan.subtasks}
    # The longest chain still ahead first, as the `dag` workflow schedules its plan.
    lengths = dag.remaining_path_lengths(plan.graph(), weights={k: 1.0 for k in ids})
    for i, planned in enumerate(plan.subtasks, start=1):
        own = StepOptions.from_json(options[i - 1]) if i <= len(options) else StepOptions()
        sub = SubtaskRecord(
            id=ids[planned.key], task_id=step.task.id, key=f"{key}.{i}",
            role=doc_step.each, kind=StepKind.AGENT, name=planned.name,
            description=planned.description if role.builtin is not None
            else prompt(f"{planned.name}: {planned.description}"),
            status=SubtaskStatus.PENDING if planned.dependencies else SubtaskStatus.QUEUED,
            created_at=step.ctx.now,
            dependencies=(*after, *(ids[d] for d in planned.dependencies)),
            options=evolve(own, seq=seq, mcp_servers=servers),
            recommended_tool=role.tools[0] if role.tools else planned.recommended_tool,
            pinned_tool=planned.tool, complexity=planned.complexity,
            priority=lengths.get(planned.key, 1.0))
        step.add_subtask(sub)  # announced by the plan's `task_update` below, as one event
    step.emit(EventType.TASK_UPDATE, status=step.task.status.value, progress=step.task.progress,
              plan_source=plan.source, step=doc_step.id,
              plan=[graph.subtask_summary(step.subtasks[ids[p.key]]) for p in plan.subtasks])
