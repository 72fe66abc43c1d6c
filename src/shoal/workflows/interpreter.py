"""A workflow document, run: the `Workflow` protocol for any `WorkflowDocument`.

Each run of a step is one subtask (`key` `step#n`), created when it may start: when every step
it comes `after` has a completed run newer than its own last run (`StepOptions.seq` orders the
task's runs), its prompt rendered from the task and the blackboard (`board`). A role with an
output contract answers in JSON, checked against the contract's JSON Schema; a wrong answer is
sent back once with the problem (the repair), and fails the step if the repair is wrong too.
A loop goes back after a round (`loops`). The task completes when nothing more may start.

What is particular to a kind of step is its handler's (`runs.StepHandler`, looked up by
`DocStepKind` in `handlers`), one module each in `steps`: `agent` (and its conversations),
`map`, `route`, `expand` (typed plans: `gated_runs`, `plan_schedule`), `person`.
This module is what they share: when a round may start, what a finished run leads to, loops,
progress, a person's decision, the task's end.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from shoal.engine import graph, quality_loop
from shoal.engine.inputs import CheckpointDecision, CheckpointExpired, Finished, Start
from shoal.engine.model import (
    SERVING_KINDS,
    CheckpointRecord,
    FileRef,
    StepKind,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
)
from shoal.engine.step import Step
from shoal.engine.workflow import Decided
from shoal.errors import Conflict
from shoal.states import TERMINAL_SUBTASK, TERMINAL_TASK, SubtaskStatus, TaskStatus, transition
from shoal.workflows import completion, dag_roles, expansion, loops, people, phases, quality_steps
from shoal.workflows.board import Board
from shoal.workflows.document import DocStepKind, StepDoc, WorkflowDocument
from shoal.workflows.gated_runs import TypedPlans
from shoal.workflows.plan_schedule import PlanSchedule
from shoal.workflows.routing import Decision
from shoal.workflows.runs import Round, Runs, StepHandler
from shoal.workflows.steps.agent import AgentStep
from shoal.workflows.steps.expand import ExpandStep
from shoal.workflows.steps.map import MapStep
from shoal.workflows.steps.person import PersonStep
from shoal.workflows.steps.route import RouteStep


class DocumentWorkflow:
    """Runs one workflow document."""

    def __init__(self, doc: WorkflowDocument) -> None:
        self.board = Board(doc)
        self.name = doc.name
        self.description = doc.description
        self.runs = Runs(self.board, self)
        self.schedule = PlanSchedule(self.runs)
        self.typed = TypedPlans(self.runs, self.schedule)
        self.routes = RouteStep(self.runs)
        people_steps = PersonStep(self.runs)
        self.handlers: dict[DocStepKind, StepHandler] = {  # how each kind of step runs
            DocStepKind.AGENT: AgentStep(self.runs), DocStepKind.MAP: MapStep(self.runs),
            DocStepKind.EXPAND: ExpandStep(self.runs, self.typed), DocStepKind.ROUTE: self.routes,
            DocStepKind.HUMAN: people_steps, DocStepKind.GATE: people_steps}
        self.quality = quality_loop.QualityLoop(self)  # for `quality` steps
        self.phased = phases.phased(doc)

    @property
    def doc(self) -> WorkflowDocument:
        """The document it runs."""
        return self.board.doc

    # ---- the protocol ---------------------------------------------------------------------

    def start(self, step: Step, inp: Start) -> None:
        if step.task.status is not TaskStatus.PENDING or step.subtasks:
            raise Conflict("The task has already started.", code="already_started")
        planning = inp.plan is None and self.plans_first()
        step.set_task(status=transition(step.task.status, TaskStatus.INITIALIZING if planning
                                        else TaskStatus.IN_PROGRESS), started_at=step.ctx.now)
        graph.emit_task_update(step)
        if inp.plan is not None:  # the user's own plan stands for the first expand step's
            planned = self.plan_step()
            assert planned is not None  # the API lets a plan through only then
            expansion.add_plan(step, self.board.doc, planned, inp.plan, f"{planned.id}#1", 1, (),
                               self.typed.planned_prompt(step, planned), inp.options)
        self._start_ready(step)
        self.runs.progress(step)

    def plans_first(self) -> bool:
        """Whether the task is `initializing` while it plans (`expansion.plans_first`)."""
        return expansion.plans_first(self.board.doc, self.board.route_of)

    def plan_step(self) -> StepDoc | None:
        """The step a user's own plan stands for (`expansion.plan_step`)."""
        return expansion.plan_step(self.board.doc)

    def step_done(self, step: Step, sub: SubtaskRecord, result: Finished) -> None:
        asked = tuple(dict(d) for d in result.denials if d.get("needs_human"))
        output = StepOutput(text=result.output,
                            files=tuple(FileRef.from_json(f) for f in result.files),
                            rejected_files=tuple(dict(r) for r in result.rejected_files),
                            usage=dict(result.usage), approval_requests=asked)
        if sub.kind in SERVING_KINDS and sub.options.plan_type is not None:
            self.typed.serving_done(step, sub, output)  # a typed gate's judge, check, retry
            return
        if sub.kind in SERVING_KINDS:  # a quality step, read as `dag` reads it
            quality_steps.answered(self.quality, step, sub, output)
            return
        doc_step = self.board.step_of(sub)
        handler = self.handlers[doc_step.kind]
        reading = handler.read(step, doc_step, sub, output)
        if reading is None or not self.runs.states_facts(step, doc_step, sub, reading.output):
            return  # sent back (its contract; facts a conversation learned), or failed
        output, decision = reading.output, reading.decision
        planning = sub.kind is StepKind.EXPAND
        if asked and decision is None and not planning:  # a person decides what it asked
            quality_loop.approval_request(step, sub, output)
            return
        # A typed plan's run whose type has a gate: its judge decides what comes next.
        if sub.options.plan_type is not None and self.typed.gated(step, sub, output):
            self.runs.progress(step)
            return
        if doc_step.quality and not planning and decision is None and quality_loop.quality_on(
                step.task, sub):
            quality_steps.verify(step, sub, output)  # `accepted` goes on once accepted
            return
        sub = graph.complete(step, sub, output)
        if handler.completed(step, doc_step, sub, reading):
            self.runs.progress(step)  # a conversation goes on, or a plan was made
            return
        self.done(step, doc_step, sub, decision)

    def attempt_failed(self, step: Step, sub: SubtaskRecord, error: str) -> bool:
        """A planner's failed attempt is not retried: its step plans by the fallbacks at once
        (as `dag`'s planner does); any other run is retried, and a typed plan's run whose
        retries are spent may degrade (`typed_failure`)."""
        if sub.kind is not StepKind.EXPAND:
            return not step.ctx.retry.should_retry(sub.attempts) and self.typed.typed_failure(
                step, sub, f"{error} (after {sub.attempts} attempt(s))")
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=error, completed_at=step.ctx.now)
        graph.emit_subtask(step, sub)
        self.failed(step, sub, f"The planner did not produce a plan ({error}).")
        return True

    def gave_up(self, step: Step, sub: SubtaskRecord, error: str) -> None:
        # A quality step's target goes on without it, as in `dag` (a typed gate's: `failed`).
        if sub.kind in SERVING_KINDS and sub.options.plan_type is None:
            quality_steps.gave_up(self.quality, step, sub, error)
            return
        self.failed(step, sub, f"Step '{sub.name}' failed after {sub.attempts} attempt(s): "
                               f"{error}")

    def accepted(self, step: Step, sub: SubtaskRecord, *, first_time: bool) -> None:
        """The quality loop accepted a run of a `quality` step (again, after a person's
        correction: its entry's value changed, not its revision)."""
        if first_time:
            completion.frequency(self.board, step)
            self.done(step, self.board.step_of(sub), sub)
        else:
            self.runs.state_update(step, self.board.step_of(sub), sub)
            graph.resume(step)
            self.move_on(step)

    def handle(self, step: Step, inp: Decided) -> None:
        """A person decided a question or a gate (or its deadline passed); anything else is
        the quality loop's (its checkpoints, and quality steps no worker can take)."""
        open_cp = (step.checkpoints.get(inp.checkpoint_id)
                   if isinstance(inp, CheckpointDecision | CheckpointExpired) else None)
        if open_cp is None or open_cp.reason not in (people.QUESTION, people.GATE, people.PLAN):
            self.quality.handle(step, inp)
            self.move_on(step)
            return
        decision = people.expired(step, open_cp) if isinstance(inp, CheckpointExpired) else inp
        if isinstance(decision, CheckpointDecision):  # (None: escalated, it keeps waiting)
            self._decided(step, decision, open_cp)

    def _decided(self, step: Step, inp: CheckpointDecision, open_cp: CheckpointRecord) -> None:
        """A person decided: rejected, the task is cancelled; a plan runs (as edited); a run
        that waited for them goes on with what they said, by its step's handler."""
        planned = self.board.steps.get(str(open_cp.data.get("step")))
        edited = expansion.edited_plan(planned, inp.answer or "", expansion.most(step)) if (
            open_cp.reason == people.PLAN and inp.action == "answer" and planned) else None
        cp = people.decided(step, inp)
        if inp.action == "reject":
            graph.cancel(step, f"Rejected at a {cp.reason}" + (f": {inp.reason}"
                                                               if inp.reason else "."))
            return
        if cp.reason == people.PLAN and planned is not None:
            self.typed.plan_decided(step, planned,
                                    step.subtasks[cp.subtask_id or uuid.UUID(int=0)], edited)
            return
        sub = step.subtasks[cp.subtask_id] if cp.subtask_id else None
        if sub is not None and sub.status is SubtaskStatus.IN_PROGRESS:
            doc_step = self.board.step_of(sub)
            self.handlers[doc_step.kind].decided(step, doc_step, sub, people.said(inp, cp))
        graph.resume(step)
        self.move_on(step)

    def budget_ran_out(self, step: Step, why: str) -> None:
        self.schedule.budget_ran_out(step, why)

    def phase(self, step: Step) -> str:
        return phases.phase_of(self.board.doc, step.task.status, step.subtasks.values(),
                               [cp.reason for cp in step.checkpoints.values()])

    def phases_moved(self, before: str, after: str) -> Sequence[str]:
        return phases.moved(before, after)

    def completion(self, step: Step) -> Mapping[str, Any]:
        return completion.summary(self.runs, step)

    def instructions(
        self, task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
        target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
        guidance: Sequence[str] = (),
    ) -> str:
        return dag_roles.instructions_in(self.board.doc, task, sub, tools, target=target,
                                         files=files, guidance=guidance)

    # ---- the core its step handlers call (`runs.Core`) ---------------------------------------

    def run(self, step: Step, doc_step: StepDoc, *, feedback: str | None,
            deps: tuple[uuid.UUID, ...] | None = None, via: str | None = None) -> None:
        """Start a round of `doc_step`, by its kind's handler."""
        self.handlers[doc_step.kind].start(step, doc_step, Round(
            self.board.deps(step, doc_step) if deps is None else deps, feedback or "", via))

    def done(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             decision: Decision | None = None) -> None:
        """A run completed (and, with `quality`, was accepted): its round may be whole, and
        what comes after may start."""
        if sub.options.plan_type is not None:  # a typed plan's runs: in waves, or eagerly
            self.schedule.release(step, doc_step, sub)
        else:  # an expand step's planned runs wait on others
            graph.queue_ready_dependents(step, sub)
        total, done = step.round_counts().get(sub.key.partition(".")[0], (0, 0))
        if done < total:  # a map or expand step's round is whole once every run is done;
            self.runs.progress(step)  # until then nothing new may start (counted, not scanned)
            return
        if any(s.status is not SubtaskStatus.COMPLETED for s in self.board.same_round(step, sub)):
            self.move_on(step)
            return
        self.runs.state_update(step, doc_step, sub)
        if decision is not None:
            self.routes.take(step, doc_step, decision, sub)
        elif doc_step.id in self.board.route_of:
            self.routes.after_routed(step, doc_step, sub)
        loops.go_back(self.runs, step, doc_step, sub)
        self.move_on(step)

    def failed(self, step: Step, sub: SubtaskRecord, why: str) -> None:
        """`sub` failed for good: its step's handler may take it over (a planner, a router);
        else a routed step's route goes on without it, and any other step fails the task."""
        if sub.kind in SERVING_KINDS and self.typed.typed_failure(step, sub, why):
            self.move_on(step)  # a typed gate's judge or retry: its task goes on
            return
        doc_step = self.board.step_of(sub)
        if not self.handlers[doc_step.kind].failed(step, doc_step, sub, why):
            self.routes.without(step, doc_step, sub, why)

    def refused(self, step: Step, sub: SubtaskRecord, why: str, problem: str) -> None:
        if self.typed.typed_failure(step, sub, why):  # a typed plan's run may degrade instead
            self.move_on(step)
            return
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=problem, completed_at=step.ctx.now,
                               current_attempt_id=None)
        graph.emit_subtask(step, sub)
        self.failed(step, sub, why)

    def move_on(self, step: Step) -> None:
        """Start what may start, show progress, and end the task once nothing runs and
        nothing more may start."""
        self._start_ready(step)
        self.runs.progress(step)
        if (step.task.status is TaskStatus.IN_PROGRESS and not step.checkpoints
                and all(s.status in TERMINAL_SUBTASK for s in step.subtasks.values())
                and not any(self.board.ready(step, s) for s in self.board.doc.steps)):
            self.schedule.mark_partial(step)  # a plan that skipped runs for its budget says so
            graph.complete_task(self, step)

    # ---- what may start ---------------------------------------------------------------------

    def _start_ready(self, step: Step) -> None:
        """Create a round of every step that may start now (none once the task has ended),
        again while a step that ends at once (a passing gate) lets more start."""
        while step.task.status not in TERMINAL_TASK:
            before = len(step.subtasks)
            for doc_step in self.board.doc.steps:
                if step.task.status in TERMINAL_TASK:
                    return
                if self.board.ready(step, doc_step):
                    self.run(step, doc_step, feedback=None)
            if len(step.subtasks) == before:
                return
