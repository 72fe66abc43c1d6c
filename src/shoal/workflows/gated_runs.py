"""How the runs of a typed plan go (`TypedPlans`, which the interpreter and the `expand` step's
handler hold; the document side is `plan_types`): each planned task is run by its type's role;
a type's gate has a judge score the answer before it counts (the task `verifying` meanwhile);
a score below the threshold retries the task (a `correct` run told the judge's answer and the
gate's hint), warns, or fails the task; a task whose retries are spent, or whose attempts all
failed, becomes a **gap** where its type says so: completed with a gap for an answer, so that
its dependents and the report go on with what exists.

A plan the document wants approved waits at a checkpoint first (`plan_or_ask`): approved, its
subtasks run as planned; edited, the person's plan runs instead (`plan_decided`).

When each planned task starts (in waves or eagerly, within the budget) is `plan_schedule`'s.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from shoal.engine import dag, graph
from shoal.engine.model import (
    StepKind,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
    evolve,
    serving_key,
)
from shoal.engine.options import StepOptions
from shoal.engine.planning import Plan
from shoal.engine.step import Step
from shoal.errors import InvalidInput
from shoal.events import EventType
from shoal.states import SubtaskStatus, transition
from shoal.workflows import checks, expansion, people, reserve
from shoal.workflows.document import Role, StepDoc
from shoal.workflows.plan_schedule import (
    GAP,
    MAX_ASKED_CHARS,
    MAX_JUDGED_CHARS,
    PlanSchedule,
    answer_text,
    type_of,
)
from shoal.workflows.plan_types import IfFailed, OnFail, PlanType, Spent, TypeGate
from shoal.workflows.reserve import SHORT
from shoal.workflows.runs import Runs


class TypedPlans:
    """The runs of typed plans: planned, gated, checked, retried, skipped for the budget."""

    def __init__(self, runs: Runs, schedule: PlanSchedule) -> None:
        self.runs = runs
        self.board = runs.board
        self.schedule = schedule

    # ---- the plan: run, or first approved by a person -------------------------------------------

    def plan_or_ask(self, step: Step, doc_step: StepDoc, planner: SubtaskRecord,
                     answer: str | None) -> None:
        """The planner answered (None: it failed): its subtasks run, or, where the document
        says a person approves a typed plan first, the plan waits at a checkpoint."""
        if not (doc_step.types and self.board.switch(step.task, doc_step.approve_plan)):
            if expansion.add_planned(step, self.board.doc, doc_step, planner, answer,
                                     self.planned_prompt(step, doc_step)):
                self.schedule.hold_first(step, doc_step, planner)
                self.runs.core.move_on(step)
            return
        try:
            plan, kinds = expansion.read_typed(doc_step, answer, expansion.most(step))
        except InvalidInput as exc:
            graph.fail_task(step, f"Step '{doc_step.id}' has no plan: {exc.message}")
            return
        waves = len(dag.layers(plan.graph()))
        questions, serves = expansion.questions_of(doc_step, plan, kinds, answer,
                                                   step.task.description)
        people.ask(step, planner, people.PLAN,
                   f"Step '{doc_step.id}' planned {len(plan.subtasks)} task(s) in {waves} "
                   f"wave(s){' (' + ' '.join(plan.notes) + ')' if plan.notes else ''}: "
                   "approve the plan, answer with an edited one, or reject the task.",
                   "Approve this plan, or answer with an edited one (the same JSON):\n"
                   + expansion.plan_json(plan, kinds, questions, serves))

    def plan_decided(self, step: Step, doc_step: StepDoc, planner: SubtaskRecord,
                      edited: tuple[Plan, tuple[str, ...], str] | None) -> None:
        """A person approved the plan (its subtasks run as planned) or edited it (theirs
        run instead)."""
        prompt = self.planned_prompt(step, doc_step)
        graph.resume(step)
        if edited is None:
            answer = planner.output.text if planner.status is SubtaskStatus.COMPLETED and \
                planner.output is not None else None
            expansion.add_planned(step, self.board.doc, doc_step, planner, answer, prompt)
        else:
            plan, kinds, text = edited
            step.emit(EventType.NOTICE, level="info", subtask_id=str(planner.id),
                      message=f"Step '{doc_step.id}' runs the plan a person edited "
                              f"({len(plan.subtasks)} task(s)).")
            questions, serves = expansion.questions_of(doc_step, plan, kinds, text,
                                                       step.task.description)
            expansion.record_questions(step, planner, questions)
            expansion.add_plan(step, self.board.doc, doc_step, plan, planner.key,
                               planner.options.seq, (planner.id,), prompt, kinds=kinds,
                               questions=questions, serves=serves)
        self.schedule.hold_first(step, doc_step, planner)
        self.runs.core.move_on(step)

    def planned_prompt(self, step: Step, doc_step: StepDoc) -> expansion.Prompt:
        def prompt(role: Role, item: str) -> str:
            return self.board.prompt(step, doc_step, role, "", item)
        return prompt

    # ---- what a typed run is ----------------------------------------------------------------

    def type_of(self, sub: SubtaskRecord) -> PlanType | None:
        """The plan type of a planned run (or of its gate's judge or retry), or None."""
        return type_of(self.board.doc, sub)

    def _plan_step(self, sub: SubtaskRecord) -> StepDoc:
        """The expand step whose plan a typed run (or its judge or retry) belongs to."""
        kind = sub.options.plan_type or ""
        return next(s for s in self.board.doc.steps if kind in s.types)

    def _threshold(self, task: TaskRecord, gate: TypeGate) -> float:
        value = gate.min_score
        return float(value if not isinstance(value, str)
                     else self.board.parameter(task, value.strip("{}")))

    # ---- a planned run produced an answer -----------------------------------------------------

    def gated(self, step: Step, sub: SubtaskRecord, output: StepOutput) -> bool:
        """`sub` answered: if its type has a gate, it waits for its judge (True); else if its
        type has a check, for the check."""
        kind = self.type_of(sub)
        if kind is None or (kind.gate is None and kind.check is None) or \
                sub.kind is not StepKind.AGENT:
            return False
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.VERIFYING),
                               output=output, progress=90, error=None)
        graph.emit_subtask(step, sub)
        if kind.gate is not None:
            self._add_judge(step, sub, kind.gate)
        else:
            self._add_check(step, sub)
        return True

    def _add_check(self, step: Step, target: SubtaskRecord) -> None:
        """Queue Shoal's own check of `target`'s answer (code on a worker with the sources)."""
        runs = [s for s in self.board.same_round(step, target) if "." in s.key]
        self._serving(step, target, StepKind.CHECK, checks.ROLE,
                      checks.instructions(step.task, step.subtasks.values(),
                                          self.board.doc.result_filename,
                                          partial=checks.partial(runs)),
                      name=f"Check: {target.name}", servers=(), tool=None,
                      pinned=checks.TOOL)

    def _add_judge(self, step: Step, target: SubtaskRecord, gate: TypeGate) -> None:
        role = self.board.doc.roles[gate.judge]
        answer = answer_text(target)
        item = (f"{target.name} (a {target.options.plan_type} task)\n\nWhat it was asked:\n"
                f"{target.description[:MAX_ASKED_CHARS]}\n\nIts answer:\n"
                f"{answer[:MAX_JUDGED_CHARS]}")
        self._serving(step, target, StepKind.JUDGE, gate.judge,
                      self.board.prompt(step, self._plan_step(target), role, "", item),
                      name=f"Gate: {target.name}", servers=role.mcp_specs(),
                      tool=role.tools[0] if role.tools else None)

    def _serving(self, step: Step, target: SubtaskRecord, kind: StepKind, role: str,
                 description: str, *, name: str, servers: Any, tool: str | None,
                 output_file: str | None = None, pinned: str | None = None) -> None:
        number = 1 + sum(1 for s in step.subtasks.values()
                         if s.target_id == target.id and s.kind is kind)
        sub = SubtaskRecord(
            id=step.ctx.new_ordered_id(), task_id=step.task.id,
            key=serving_key(kind, number, target), role=role, kind=kind,
            name=(name + (f" (round {number})" if number > 1 else ""))[:255],
            description=description, status=SubtaskStatus.QUEUED, created_at=step.ctx.now,
            dependencies=(target.id,), target_id=target.id, priority=target.priority + 0.5,
            options=StepOptions(plan_type=target.options.plan_type, round=number,
                                mcp_servers=servers, output_file=output_file),
            recommended_tool=tool or target.recommended_tool, pinned_tool=pinned)
        step.add_subtask(sub)
        graph.emit_subtask(step, sub)

    # ---- its judge or its retry produced an answer ---------------------------------------------

    def serving_done(self, step: Step, sub: SubtaskRecord, output: StepOutput) -> None:
        """A gate's judge (its answer checked against the judge's contract), a check or a
        retry of a planned task ended: what it found decides what the task does next."""
        role = self.board.doc.roles.get(sub.role)
        if role is not None and role.output is not None:  # a typed gate's judge
            checked = self.runs.checked(step, sub, output.text, role.output, output)
            if checked is None:
                return
            output = checked
        self.gate_step_done(step, sub, output)
        self.runs.core.move_on(step)

    def gate_step_done(self, step: Step, sub: SubtaskRecord, output: StepOutput) -> None:
        """A gate's judge scored its task, a retry of the task answered, or Shoal's check of
        it did."""
        if sub.kind is StepKind.CHECK:
            output = checks.read(output)
        sub = graph.complete(step, sub, output)
        target = step.subtasks[sub.target_id or uuid.UUID(int=0)]
        kind = self.type_of(target)
        assert kind is not None  # only such runs have these
        if sub.kind is StepKind.CHECK:
            self._check_done(step, target, output)
            return
        if sub.kind is StepKind.CORRECT:
            target = step.set_subtask(
                target, status=transition(target.status, SubtaskStatus.VERIFYING),
                output=evolve(output, corrected_by=str(sub.id)))
            graph.emit_subtask(step, target)
            if self._count(step, target, StepKind.CHECK):  # a repair the check asked for
                self._add_check(step, target)
            else:
                assert kind.gate is not None
                self._add_judge(step, target, kind.gate)
            return
        gate = kind.gate
        assert gate is not None
        score = _field(output.parsed or {}, gate.score)
        least = self._threshold(step.task, gate)
        if isinstance(score, int | float) and not isinstance(score, bool) and score >= least:
            self._accept(step, target)
            return
        said = f"'{target.name}' scored {score!r} at its gate (at least {least:g} needed)"
        if gate.on_fail is OnFail.WARN:
            self._note(step, target, f"{said}; kept, as its type's gate says (warn).")
            self._accept(step, target)
        elif gate.on_fail is OnFail.FAIL:
            graph.fail_task(step, f"{said}.")
        elif (used := self._count(step, target, StepKind.CORRECT)) < self.board.cap(
                step.task, gate.retries):
            if self._retry_short(step, target, said):
                return
            self._note(step, target, f"{said}; retrying ({used + 1} of "
                                     f"{self.board.cap(step.task, gate.retries)}).")
            self._retry(step, target, gate, output, f"{said}.")
        else:
            self._spent(step, target, f"{said}, and its {used} retr{'y' if used == 1 else 'ies'}"
                                      " did not pass")

    def _retry(self, step: Step, target: SubtaskRecord, gate: TypeGate, judged: StepOutput,
               said: str) -> None:
        text = (f"{target.description}\n\n# Another try\nA quality gate judged your previous "
                f"answer: {said}\n" + (f"{gate.hint}\n" if gate.hint else "")
                + "The judge's answer:\n" + json.dumps(dict(judged.parsed or {}),
                                                       ensure_ascii=False)[:3000]
                + "\n\nYour previous answer:\n" + answer_text(target)[:4000])
        step.set_subtask(target, status=transition(target.status, SubtaskStatus.CORRECTING))
        graph.emit_subtask(step, step.subtasks[target.id])
        self._serving(step, target, StepKind.CORRECT, target.role, text,
                      name=f"Retry: {target.name}", servers=target.options.mcp_servers,
                      tool=None, output_file=target.options.output_file)

    def _spent(self, step: Step, target: SubtaskRecord, why: str) -> None:
        """The gate's retries are spent: what its `then` says."""
        kind = self.type_of(target)
        then = kind.gate.then if kind is not None and kind.gate is not None else Spent.FAIL
        if then is Spent.GAP:
            self._gap(step, target, why)
        elif then is Spent.KEEP:
            self._note(step, target, f"{why}; its last answer is kept.")
            self._accept(step, target)
        else:
            graph.fail_task(step, f"{why}.")

    def _accept(self, step: Step, target: SubtaskRecord) -> None:
        kind = self.type_of(target)
        if kind is not None and kind.check is not None and \
                target.status is SubtaskStatus.VERIFYING and \
                not self._count(step, target, StepKind.CHECK):
            self._add_check(step, target)  # past its gate: now Shoal's own check
            return
        output = evolve(target.output or StepOutput(), accepted=True)
        self.runs.core.done(step, self._plan_step(target), graph.complete(step, target, output))

    def _check_done(self, step: Step, target: SubtaskRecord, checked: StepOutput) -> None:
        """Shoal's check of `target` answered: the sentences it failed go back to the
        writer once, with the reasons; after that the checked report stands (what still
        fails is removed from it and listed under its check, by the check itself)."""
        failed = checks.failures(checked)
        if failed and self._count(step, target, StepKind.CHECK) <= checks.REPAIRS:
            self._note(step, target, f"Shoal's citation check failed {len(failed)} sentence(s) "
                                     f"of '{target.name}': sent back to be repaired once.")
            step.set_subtask(target, status=transition(target.status,
                                                       SubtaskStatus.CORRECTING))
            graph.emit_subtask(step, step.subtasks[target.id])
            self._serving(step, target, StepKind.CORRECT, target.role,
                          checks.repair_prompt(target.description, answer_text(target), failed),
                          name=f"Repair: {target.name}", servers=target.options.mcp_servers,
                          tool=None, output_file=target.options.output_file)
            return
        if failed:
            self._note(step, target, f"Shoal's citation check removed {len(failed)} sentence(s) "
                                     f"of '{target.name}' its sources do not support (listed "
                                     "under the report's Citation check).")
        output = evolve(target.output or StepOutput(), accepted=True)
        self.runs.core.done(step, self._plan_step(target), graph.complete(step, target, output))

    def _gap(self, step: Step, target: SubtaskRecord, why: str) -> None:
        """`target` is skipped: completed with a gap for an answer; what depends on it goes on."""
        spent = target.output.usage if target.output is not None else {}
        sub = step.set_subtask(target, status=transition(target.status, SubtaskStatus.COMPLETED),
                               output=StepOutput(text=f"{GAP} {target.name}: {why}.",
                                                 usage=spent),
                               options=evolve(target.options, gap=why), progress=100,
                               completed_at=step.ctx.now, current_attempt_id=None)
        graph.emit_subtask(step, sub)
        self._note(step, sub, f"'{sub.name}' is a gap: {why}. What depends on it goes on "
                              "without it.")
        self.runs.core.done(step, self._plan_step(sub), sub)

    # ---- failures -----------------------------------------------------------------------------

    def typed_failure(self, step: Step, sub: SubtaskRecord, why: str) -> bool:
        """`sub` failed for good (`why`): True if its plan type takes it over — a task that
        degrades becomes a gap, a judge that fails keeps its task's answer with a warning, a
        retry that fails spends the gate."""
        kind = self.type_of(sub)
        if kind is None:
            return False
        if sub.kind is StepKind.AGENT:  # (one that failed already cannot be a gap any more)
            if kind.if_failed is not IfFailed.GAP or sub.status is SubtaskStatus.FAILED:
                return False
            self._gap(step, sub, f"it failed: {why}")
            return True
        if sub.status is not SubtaskStatus.FAILED:
            sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                                   error=why, completed_at=step.ctx.now, current_attempt_id=None)
            graph.emit_subtask(step, sub)
        target = step.subtasks[sub.target_id or uuid.UUID(int=0)]
        if sub.kind is StepKind.CHECK:
            self._note(step, target, f"Shoal's check of '{target.name}' could not run ({why}); "
                                     "its answer is kept unchecked.")
            self.runs.core.done(step, self._plan_step(target), graph.complete(
                step, target, evolve(target.output or StepOutput(), accepted=True)))
        elif sub.kind is StepKind.JUDGE:
            self._note(step, target, f"The gate of '{target.name}' could not judge it ({why}); "
                                     "its answer is kept.")
            self._accept(step, target)
        else:
            self._spent(step, target, f"its retry failed ({why})")
        return True

    def _retry_short(self, step: Step, target: SubtaskRecord, said: str) -> bool:
        """With a reserve, a retry the budget cannot cover does not run: a run that may be
        skipped becomes a gap, a reserved one keeps its answer (True: decided)."""
        doc_step = self._plan_step(target)
        if not self.schedule.reserving(step, doc_step):
            return False
        est = self.schedule.estimate(
            step, [s for s in self.board.same_round(step, target) if "." in s.key])
        if not (est.skippable(target) or est.reserved(target)) or reserve.retry_fits(
                step, est, target):
            return False
        if est.skippable(target):
            self._gap(step, target, f"{said.rstrip('.')}, and its retry was skipped: {SHORT} "
                                    "it with the rest of the plan")
        else:
            self._note(step, target, f"{said}; not retried: {SHORT} a retry with the rest of "
                                     "the plan, so its answer is kept.")
            self._accept(step, target)
        return True

    # ---- small helpers ------------------------------------------------------------------------

    def _count(self, step: Step, target: SubtaskRecord, kind: StepKind) -> int:
        return sum(1 for s in step.subtasks.values() if s.target_id == target.id
                   and s.kind is kind and s.status is SubtaskStatus.COMPLETED)

    def _note(self, step: Step, sub: SubtaskRecord, message: str) -> None:
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id), message=message)




def _field(value: Mapping[str, Any], path: str) -> Any:
    found: Any = value
    for part in path.split("."):
        found = found.get(part) if isinstance(found, Mapping) else None
    return found
