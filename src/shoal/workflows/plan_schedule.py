"""When the runs of a typed plan start (`PlanSchedule`; the gates are `gated_runs`'): with
`schedule: waves`, a task is queued only once every task of the waves before its own has
completed, gates decided (a barrier per topological layer, as the seed's waves); with `eager`,
once the tasks it depends on have. Either way it is told what those tasks found (`inputs`).

With a budget, the runs not started yet whose type allows it are skipped as gaps while the
budget left cannot cover the rest of the plan; with a reserve (`reserve`), such runs start one
at a time until one has completed, and a plan whose budget ran out gets its result written from
what is done (`partial_report`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from shoal.engine import graph
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord, TaskRecord, evolve
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import TERMINAL_TASK, SubtaskStatus, transition
from shoal.workflows import partial_report, questions, reserve
from shoal.workflows.document import StepDoc, WorkflowDocument
from shoal.workflows.plan_types import IfFailed, PlanType, Schedule
from shoal.workflows.reserve import SHORT
from shoal.workflows.runs import Runs

MAX_INPUT_CHARS = 16_000  # of one dependency's answer in a task's prompt (a report, say)
MAX_INPUTS_CHARS = 48_000  # of all of them
MAX_JUDGED_CHARS = 8_000  # of the answer a judge reads
MAX_ASKED_CHARS = 3_000  # of what its task was asked, that a judge reads
GAP = "[gap]"  # how a gap's answer begins
INPUTS_HEADING = "# What the tasks this one depends on found"


def type_of(doc: WorkflowDocument, sub: SubtaskRecord) -> PlanType | None:
    """The plan type of a planned run (or of its gate's judge or retry), or None."""
    kind = sub.options.plan_type
    if kind is None:
        return None
    target = sub.target_id is not None
    return next((s.types[kind] for s in doc.steps if kind in s.types and (
        target or sub.key.startswith(s.id + "#"))), None)


class PlanSchedule:
    """Which runs of a typed plan may start, within its budget."""

    def __init__(self, runs: Runs) -> None:
        self.board = runs.board

    def _type_of(self, sub: SubtaskRecord) -> PlanType | None:
        return type_of(self.board.doc, sub)

    def _schedule(self, task: TaskRecord, doc_step: StepDoc) -> Schedule:
        value = doc_step.schedule
        if isinstance(value, str) and value.startswith("{"):
            return Schedule(str(self.board.parameter(task, value.strip("{}"))))
        return Schedule(value)

    def release(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        """Queue the runs of `sub`'s plan that may start now, each told what the tasks it
        depends on found: in waves, every run of the lowest wave not yet completed. First, if
        the task's budget cannot cover the runs not started yet, skip those whose type allows
        it (`_afford`); with a reserve, such runs start one at a time until one has completed
        (`reserve.may_start`)."""
        subs = step.subtasks
        runs = [s for s in self.board.same_round(step, sub) if "." in s.key]
        if step.task.meta.budget is not None and self._afford(step, doc_step, runs):
            runs = [subs[s.id] for s in runs]
        if self._schedule(step.task, doc_step) is Schedule.WAVES:
            waiting = [s.options.wave or 0 for s in runs if s.status is not SubtaskStatus.COMPLETED]
            if not waiting:
                return
            wave = min(waiting)
            ready = [s for s in runs if s.status is SubtaskStatus.PENDING
                     and (s.options.wave or 0) <= wave]
        else:
            ready = [s for s in runs if s.status is SubtaskStatus.PENDING]
        ready = [s for s in ready
                 if all(subs[d].status is SubtaskStatus.COMPLETED for d in s.dependencies)]
        if ready and self.reserving(step, doc_step):
            ready = reserve.may_start(self.estimate(step, runs), ready)
        if ready and self._schedule(step.task, doc_step) is Schedule.WAVES:
            total = 1 + max(s.options.wave or 0 for s in runs)
            step.emit(EventType.NOTICE, level="info", wave=wave + 1, waves=total,
                      message=f"Wave {wave + 1} of {total} starts: "
                              + ", ".join(s.name for s in ready) + ".")
        for other in ready:
            kind = type_of(self.board.doc, other)  # after the retrievals: told what they answered
            parts = questions.told(subs.values()) if kind and not kind.serves else ""
            queued = step.set_subtask(other, status=SubtaskStatus.QUEUED,
                                      description=other.description + self._inputs(
                                          step, other) + parts)
            graph.emit_subtask(step, queued)

    def _afford(self, step: Step, doc_step: StepDoc, runs: list[SubtaskRecord]) -> bool:
        """Skip, as gaps, the runs not started yet whose type allows it (`if_budget_short`),
        lowest priority first (the later in the plan among equals), while the budget left
        cannot cover the rest of the plan: with a reserve, as `reserve` estimates it; else
        the runs not started at what each completed run has cost so far (the planner's and
        the gates' spending included, so the estimate errs high). True if any was skipped."""
        if self.reserving(step, doc_step):
            skipped = reserve.to_skip(step, self.estimate(step, runs))
        else:
            skipped = self._at_average(step, runs)
        why = f"skipped: {SHORT} it with the rest of the plan"
        for run in skipped:
            gap = step.set_subtask(run, status=transition(run.status, SubtaskStatus.COMPLETED),
                                   output=StepOutput(text=f"{GAP} {run.name}: {why}."),
                                   options=evolve(run.options, gap=why), progress=100,
                                   completed_at=step.ctx.now)
            graph.emit_subtask(step, gap)
        if skipped:
            step.emit(EventType.NOTICE, level="warning", partial=True, message=(
                f"The budget left cannot cover the rest of the plan: skipped "
                f"{', '.join(s.name for s in skipped)}; the result will say what is missing."))
        return bool(skipped)

    def _at_average(self, step: Step, runs: list[SubtaskRecord]) -> list[SubtaskRecord]:
        budget = step.task.meta.budget
        done = sum(1 for s in runs if s.status is SubtaskStatus.COMPLETED and not s.options.gap)
        waiting = [s for s in runs if s.status is SubtaskStatus.PENDING]
        if budget is None or not done or not waiting:
            return []
        tokens, cost = graph.spending(step.task, step.attempts.values())

        def short(left: int) -> bool:
            return any(limit is not None and spent + spent / done * left > limit
                       for spent, limit in ((tokens, budget.tokens), (cost, budget.cost_usd)))
        skippable = sorted((s for s in waiting if (kind := type_of(self.board.doc, s)) is not None
                            and kind.if_budget_short is IfFailed.GAP),
                           key=lambda s: (s.priority, -int(s.key.rpartition(".")[2])))
        skipped: list[SubtaskRecord] = []
        while skippable and short(len(waiting) - len(skipped)):
            skipped.append(skippable.pop(0))
        return skipped

    # ---- the budget's reserve (`reserve`) and a partial result (`partial_report`) -----------

    def reserving(self, step: Step, doc_step: StepDoc) -> bool:
        """Whether the task's budget keeps a reserve for the plan of `doc_step`."""
        return step.task.meta.budget is not None and any(
            k.reserved for k in doc_step.types.values())

    def estimate(self, step: Step, runs: list[SubtaskRecord]) -> reserve.Estimate:
        reading = reserve.Reading(answer=lambda s: min(len(answer_text(s)), MAX_INPUT_CHARS),
                                  given=_given_chars, judged=self._judged_chars)
        return reserve.Estimate(step, sorted(runs, key=_plan_index), self._type_of, reading)

    def _judged_chars(self, kind: PlanType, prompt: int, answer: int) -> int:
        assert kind.gate is not None  # asked only of a type with a gate
        judge = self.board.doc.roles[kind.gate.judge]
        contract = len(json.dumps(judge.output, indent=1)) if judge.output else 0
        return (len(judge.prompt) + contract + min(prompt, MAX_ASKED_CHARS)
                + min(answer, MAX_JUDGED_CHARS) + 200)

    def hold_first(self, step: Step, doc_step: StepDoc, planner: SubtaskRecord) -> None:
        """The plan was made: with a reserve, skip what the budget cannot cover already, and
        let only one run that may be skipped start until one has completed."""
        if not self.reserving(step, doc_step) or step.task.status in TERMINAL_TASK:
            return
        runs = [s for s in self.board.same_round(step, planner) if "." in s.key]
        if self._afford(step, doc_step, runs):
            runs = [step.subtasks[s.id] for s in runs]
        queued = [s for s in runs if s.status is SubtaskStatus.QUEUED]
        allowed = {s.id for s in reserve.may_start(self.estimate(step, runs), queued)}
        for run in queued:
            if run.id not in allowed:
                graph.emit_subtask(step, step.set_subtask(run, status=SubtaskStatus.PENDING))

    def budget_ran_out(self, step: Step, why: str) -> None:
        """The budget ran out (`why`): a plan with a reserve gets its result written from
        what is done (`partial_report.when_out`)."""
        for runs in self._reserved_plans(step):
            partial_report.when_out(step, runs, self._type_of, self.board.doc.result_filename, why)

    def mark_partial(self, step: Step) -> None:
        """The task is about to complete: a plan with a reserve that skipped runs for the
        budget gets its result marked partial (`partial_report.when_done`)."""
        for runs in self._reserved_plans(step):
            if any(s.kind is StepKind.CHECK and s.target_id in {r.id for r in runs}
                   for s in step.subtasks.values()):
                continue  # Shoal's check wrote the result, marked already (`checks.partial`)
            partial_report.when_done(step, runs, self._type_of, self.board.doc.result_filename)

    def _reserved_plans(self, step: Step) -> list[list[SubtaskRecord]]:
        """The runs of the latest plan of each expand step that has reserved types."""
        found = []
        for doc_step in self.board.doc.steps:
            if not any(k.reserved for k in doc_step.types.values()):
                continue
            rounds = [r for r in self.board.rounds(step, doc_step.id)
                      if any("." in s.key for s in r)]
            if rounds:
                found.append(sorted((s for s in rounds[-1] if "." in s.key), key=_plan_index))
        return found

    def _inputs(self, step: Step, run: SubtaskRecord) -> str:
        """What the planned tasks `run` depends on found, each in a `<result>` element (a gap
        in a `<gap>`), so that an answer's own Markdown headings cannot be mistaken for them."""
        deps = [step.subtasks[d] for d in run.dependencies
                if step.subtasks[d].kind is StepKind.AGENT and "." in step.subtasks[d].key]
        if not deps:
            return ""
        parts = [f"\n\n{INPUTS_HEADING}"]
        budget = MAX_INPUTS_CHARS
        for dep in deps:
            name = _attribute(dep.name)
            if dep.options.gap:
                parts.append(f'<gap task="{name}">Not answered: {dep.options.gap}.</gap>')
                continue
            text = answer_text(dep)[:min(MAX_INPUT_CHARS, max(budget, 0))]
            budget -= len(text)
            parts.append(f'<result task="{name}" type="{dep.options.plan_type}">\n{text}\n'
                         "</result>")
        return "\n".join(parts)



def answer_text(sub: SubtaskRecord) -> str:
    if sub.output is None:
        return ""
    if sub.output.answers and sub.output.parsed is not None:
        return json.dumps(dict(sub.output.parsed), ensure_ascii=False, indent=1)
    return sub.output.text


def _attribute(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _given_chars(answers: Sequence[int]) -> int:
    """What answers of these lengths add to a prompt, as `_inputs` writes them."""
    if not answers:
        return 0
    shown = min(sum(min(a, MAX_INPUT_CHARS) for a in answers), MAX_INPUTS_CHARS)
    return len(INPUTS_HEADING) + shown + 80 * len(answers)


def _plan_index(sub: SubtaskRecord) -> int:
    return int(sub.key.rpartition(".")[2])
