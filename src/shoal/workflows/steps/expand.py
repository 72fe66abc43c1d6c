"""The `expand` step's handler: its role plans subtasks (`expansion`), which run as planned
(typed plans: `gated_runs`), after a person approved the plan where the document says so; a
planner that fails leaves its step to plan by the fallbacks."""

from __future__ import annotations

from shoal.engine import graph
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus, transition
from shoal.workflows import expansion
from shoal.workflows.document import StepDoc
from shoal.workflows.gated_runs import TypedPlans
from shoal.workflows.runs import Reading, Round, Runs


class ExpandStep:
    """Runs `expand` steps: the planner's run, then the runs it planned."""

    def __init__(self, runs: Runs, typed: TypedPlans) -> None:
        self.runs = runs
        self.typed = typed

    def start(self, step: Step, doc_step: StepDoc, rnd: Round) -> None:
        if (opened := self.runs.opened(step, doc_step, rnd.via)) is None:
            return
        number, seq = opened
        role = self.runs.board.doc.roles[doc_step.role] if doc_step.role else None
        asked = expansion.plan_format(doc_step, expansion.most(step)) if (
            role is None or role.builtin is None) else ""
        self.runs.one_run(step, doc_step, number, None, seq, deps=rnd.deps,
                          feedback=rnd.feedback, asked=asked)

    def read(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> Reading | None:
        """The planner's plan, checked against the plan's schema for a typed plan; a planned
        run's answer, against its role's contract."""
        if sub.kind is StepKind.EXPAND and doc_step.types:
            checked = self.runs.checked(step, sub, output.text, expansion.plan_schema(
                doc_step, expansion.most(step)), output)
        else:
            checked = self.runs.answer_checked(step, sub, output)
        return None if checked is None else Reading(checked)

    def completed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  reading: Reading) -> bool:
        """The plan is made: its subtasks run, or wait for a person to approve them."""
        if sub.kind is not StepKind.EXPAND:
            return False
        planned(step)
        self.typed.plan_or_ask(step, doc_step, sub, reading.output.text)
        return True

    def failed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> bool:
        """The planner failed: the step plans without it (`default_plan`, or nothing)."""
        if sub.kind is not StepKind.EXPAND:
            return False
        if sub.status is not SubtaskStatus.FAILED:
            sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                                   error=why, completed_at=step.ctx.now)
            graph.emit_subtask(step, sub)
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"{why.rstrip('.')}. Step '{doc_step.id}' plans without it.")
        planned(step)
        self.typed.plan_or_ask(step, doc_step, sub, None)
        return True

    def decided(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                answer: str | None) -> None:
        self.runs.person_answered(step, doc_step, sub, answer or "")


def planned(step: Step) -> None:
    """The plan is made (or its planner failed): the task is no longer initializing."""
    if step.task.status is TaskStatus.INITIALIZING:
        step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS))
