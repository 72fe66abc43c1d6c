"""The `dag` workflow (seed 004): a planner's output becomes a graph of coding subtasks, each
run once its dependencies complete and checked by the quality loop.

A task starts with one `expand` step (the planner) unless the user sent their own plan; the
planner's answer, or a fallback when it gave none, becomes `agent` subtasks with dependencies.
When an agent subtask run by an AI tool produces its output, it goes to `verifying` (its
dependents wait) and the quality loop (`engine.quality_loop`) evaluates, maybe reviews and
corrects it; once accepted, its dependents run. The task completes when every agent subtask
has, and fails fast when one fails for good. The seed's checkpoint frequency may pause the task
after a share of its subtasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from shoal.engine import dag, graph, planning, quality
from shoal.engine import quality_loop as loop
from shoal.engine.inputs import Finished, Start
from shoal.engine.model import (
    SERVING_KINDS,
    FileRef,
    StepKind,
    StepOptions,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
)
from shoal.engine.step import Step
from shoal.engine.workflow import Decided
from shoal.errors import Conflict
from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus, transition
from shoal.workflows import dag_roles

PLANNER_KEY = "planner"


class DagWorkflow:
    """Plan, then a graph of coding subtasks under the quality loop."""

    name = "dag"
    description = ("A planner breaks the task into a graph of coding subtasks; each runs on a "
                   "worker once its dependencies are done, and is evaluated, peer-reviewed and "
                   "corrected; checkpoints ask a person where the scores or the frequency say.")

    def __init__(self) -> None:
        self.quality = loop.QualityLoop(self)

    # ---- start and planning ---------------------------------------------------------------

    def start(self, step: Step, inp: Start) -> None:
        if step.task.status is not TaskStatus.PENDING or step.subtasks:
            raise Conflict("The task has already started.", code="already_started")
        if inp.plan is not None:
            _expand(step, inp.plan, options=inp.options)
            step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS),
                          started_at=step.ctx.now)
            graph.emit_task_update(step)
            return
        planner = SubtaskRecord(
            id=step.ctx.new_id(), task_id=step.task.id, key=PLANNER_KEY, role="planner",
            kind=StepKind.EXPAND, name="Plan the task",
            description="Decompose the task into subtasks.", status=SubtaskStatus.QUEUED,
            created_at=step.ctx.now,
            recommended_tool=step.task.tool_preferences[0] if step.task.tool_preferences
            else None,
            priority=1e9,
        )
        step.add_subtask(planner)
        step.set_task(status=transition(step.task.status, TaskStatus.INITIALIZING),
                      started_at=step.ctx.now)
        graph.emit_task_update(step)
        graph.emit_subtask(step, planner)

    # ---- steps ----------------------------------------------------------------------------

    def step_done(self, step: Step, sub: SubtaskRecord, result: Finished) -> None:
        asked = tuple(dict(d) for d in result.denials if d.get("needs_human"))
        output = StepOutput(
            text=result.output, files=tuple(FileRef.from_json(f) for f in result.files),
            rejected_files=tuple(dict(r) for r in result.rejected_files),
            usage=dict(result.usage), approval_requests=asked)
        answered = loop.quality_output(step, sub, result.output, output)
        if answered is None:
            return  # requeued once to repair an answer that was not valid JSON
        output = answered
        if sub.kind in (StepKind.AGENT, StepKind.CORRECT) and asked:
            loop.approval_request(step, sub, output)
            return
        if sub.kind is StepKind.AGENT and loop.quality_on(step.task, sub):
            sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.VERIFYING),
                                   output=output, progress=90, error=None)
            graph.emit_subtask(step, sub)
            loop.verify(step, sub)
            return
        sub = graph.complete(step, sub, output)
        if sub.kind is StepKind.EXPAND:
            _planner_done(step, result.output, "")
            return
        if sub.kind in SERVING_KINDS:
            self.quality.step_done(step, sub)
            return
        self.accepted(step, sub, first_time=False)

    def attempt_failed(self, step: Step, sub: SubtaskRecord, error: str) -> bool:
        if sub.kind is not StepKind.EXPAND:
            return False
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=error, completed_at=step.ctx.now)
        graph.emit_subtask(step, sub)
        _planner_done(step, None, f"The planner did not produce a plan ({error}).")
        return True

    def gave_up(self, step: Step, sub: SubtaskRecord, error: str) -> None:
        if sub.kind in SERVING_KINDS:
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                      message=f"'{sub.name}' failed after {sub.attempts} attempt(s): {error}")
            self.quality.step_done(step, sub)
            return
        graph.fail_task(step, f"Subtask '{sub.name}' failed after {sub.attempts} attempt(s): "
                              f"{error}")

    def accepted(self, step: Step, sub: SubtaskRecord, *, first_time: bool) -> None:
        """`sub` is complete and accepted: its dependents may run; maybe a checkpoint opens
        (the frequency rule counts a subtask once, when it is first accepted)."""
        graph.queue_ready_dependents(step, sub)
        graph.update_progress(step)
        if first_time and step.task.status is TaskStatus.IN_PROGRESS:
            agents = [s for s in step.subtasks.values() if s.kind is StepKind.AGENT]
            done = sum(1 for s in agents if s.status is SubtaskStatus.COMPLETED)
            if quality.frequency_checkpoint(step.task.checkpoint_frequency, done, len(agents)):
                loop.open_checkpoint(
                    step, "frequency", None,
                    message=f"{done} of {len(agents)} subtasks are done (checkpoint "
                            f"frequency: {step.task.checkpoint_frequency}).")
        graph.complete_task_if_done(self, step)

    def handle(self, step: Step, inp: Decided) -> None:
        self.quality.handle(step, inp)

    def completion(self, step: Step) -> Mapping[str, Any]:
        return {"evaluation_scores": loop.task_scores(step)}

    def instructions(
        self, task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
        target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
        guidance: Sequence[str] = (),
    ) -> str:
        return dag_roles.instructions_for(task, sub, tools, target=target, files=files,
                                          guidance=guidance)


def _expand(
    step: Step, plan: planning.Plan, *, options: tuple[Mapping[str, Any], ...] = ()
) -> None:
    """Add the plan's subtasks to the graph; the ones without dependencies are queued."""
    ids = {p.key: step.ctx.new_id() for p in plan.subtasks}
    edges = {p.key: tuple(p.dependencies) for p in plan.subtasks}
    weights = {p.key: 1.0 for p in plan.subtasks}
    lengths = dag.remaining_path_lengths(edges, weights=weights)
    for i, p in enumerate(plan.subtasks):
        sub = SubtaskRecord(
            id=ids[p.key], task_id=step.task.id, key=p.key, role="coder", name=p.name,
            description=p.description, created_at=step.ctx.now,
            status=SubtaskStatus.PENDING if p.dependencies else SubtaskStatus.QUEUED,
            dependencies=tuple(ids[k] for k in p.dependencies),
            recommended_tool=p.recommended_tool, pinned_tool=p.tool,
            complexity=p.complexity, priority=lengths.get(p.key, 1.0),
            options=StepOptions.from_json(options[i]) if i < len(options) else StepOptions(),
        )
        step.add_subtask(sub)
    for note in plan.notes:
        step.emit(EventType.NOTICE, level="warning", message=note)
    step.emit(
        EventType.TASK_UPDATE, status=step.task.status.value, progress=step.task.progress,
        plan_source=plan.source,
        plan=[graph.subtask_summary(step.subtasks[ids[p.key]]) for p in plan.subtasks],
    )


def _planner_done(step: Step, text: str | None, why: str) -> None:
    """Expand the graph from the planner's output, or from a fallback when it gave none."""
    plan = planning.decompose(text, step.task.description, step.task.meta.requirements,
                              max_subtasks=min(step.ctx.max_subtasks, 50))
    if text is None:
        plan = replace(plan, notes=(why, *plan.notes))
    _expand(step, plan)
    if step.task.status is TaskStatus.INITIALIZING:
        step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS))
    graph.update_progress(step)
