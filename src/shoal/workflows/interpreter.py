"""A workflow document, run: the `Workflow` protocol for any `WorkflowDocument`.

Each run of a step is one subtask (`key` `step#n`), created when it may start: when every step
it comes `after` has a completed run newer than its own last run (`StepOptions.seq` orders the
task's runs). Its prompt is rendered then, from the task's description (`{query}`), its
parameters, and the blackboard: the latest completed run of the step that `writes` each entry
(`{draft}`, or `{feedback.verdict}` for a field of an answer with a contract). A role with an
output contract answers in JSON, checked against the contract's JSON Schema; a wrong answer is
sent back once with the problem (the repair), and fails the step if the repair is wrong too.
When a step that a loop goes back from completes and the loop's condition holds, the loop's
target runs again (at most `max` times) with the carried entry as `{feedback}`, and the steps
after the looping one wait for the next round. The task completes when nothing runs and
nothing more may start.

This first interpreter runs `agent` steps; documents with other kinds are checked but not run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import jsonschema

from shoal.engine import answers, graph
from shoal.engine.inputs import Finished, Start
from shoal.engine.model import (
    FileRef,
    StepKind,
    StepOptions,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
)
from shoal.engine.step import Step
from shoal.engine.workflow import Decided
from shoal.errors import Conflict, InvalidInput
from shoal.events import EventType
from shoal.states import TERMINAL_SUBTASK, SubtaskStatus, TaskStatus, transition
from shoal.workflows.document import DocStepKind, Loop, StepDoc, WorkflowDocument

_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)((?:\.[a-zA-Z0-9_]+)*)\}")
MAX_ENTRY_CHARS = 12_000  # of one blackboard entry in a prompt


class DocumentWorkflow:
    """Runs one workflow document."""

    def __init__(self, doc: WorkflowDocument) -> None:
        unsupported = sorted({s.kind.value for s in doc.steps} - {DocStepKind.AGENT.value})
        if unsupported:
            raise InvalidInput(f"Workflow '{doc.name}' uses step kinds not run yet: "
                               f"{', '.join(unsupported)}.", details={"field": "steps"})
        self.doc = doc
        self.name = doc.name
        self.description = doc.description
        self._steps = {s.id: s for s in doc.steps}
        self._writer = {s.entry: s for s in doc.steps}
        self._loops_from: dict[str, list[Loop]] = {}
        for loop in doc.loops:
            self._loops_from.setdefault(loop.source, []).append(loop)

    # ---- the protocol ---------------------------------------------------------------------

    def start(self, step: Step, inp: Start) -> None:
        if step.task.status is not TaskStatus.PENDING or step.subtasks:
            raise Conflict("The task has already started.", code="already_started")
        step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS),
                      started_at=step.ctx.now)
        graph.emit_task_update(step)
        self._start_ready(step)
        self._progress(step)

    def step_done(self, step: Step, sub: SubtaskRecord, result: Finished) -> None:
        doc_step = self._step_of(sub)
        output = StepOutput(text=result.output,
                            files=tuple(FileRef.from_json(f) for f in result.files),
                            rejected_files=tuple(dict(r) for r in result.rejected_files),
                            usage=dict(result.usage))
        contract = self.doc.roles[doc_step.role].output if doc_step.role else None
        if contract is not None:
            checked = self._checked_answer(step, sub, result.output, contract, output)
            if checked is None:
                return
            output = checked
        sub = graph.complete(step, sub, output)
        step.emit(EventType.NOTICE, level="info", subtask_id=str(sub.id),
                  message=f"'{doc_step.entry}' revision {self._revision(step, doc_step)} "
                          f"written by '{doc_step.id}'.")
        self._maybe_loop(step, doc_step, sub)
        self._start_ready(step)
        self._progress(step)
        graph.complete_task_if_done(self, step)

    def attempt_failed(self, step: Step, sub: SubtaskRecord, error: str) -> bool:
        return False

    def gave_up(self, step: Step, sub: SubtaskRecord, error: str) -> None:
        graph.fail_task(step, f"Step '{sub.name}' failed after {sub.attempts} attempt(s): "
                              f"{error}")

    def accepted(self, step: Step, sub: SubtaskRecord, *, first_time: bool) -> None:
        graph.complete_task_if_done(self, step)  # no quality policy is attached yet

    def handle(self, step: Step, inp: Decided) -> None:
        raise Conflict("This workflow has no checkpoint to decide.", code="no_checkpoint")

    def completion(self, step: Step) -> Mapping[str, Any]:
        return {"state": {entry: self._revision(step, s) for entry, s in self._writer.items()
                          if self._revision(step, s)}}

    def instructions(
        self, task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
        target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
        guidance: Sequence[str] = (),
    ) -> str:
        text = sub.description
        if sub.options.repair:
            text += ("\n\nYour previous answer did not match the required JSON: "
                     f"{sub.options.repair}\nAnswer again with only the JSON.")
        return text

    # ---- runs -----------------------------------------------------------------------------

    def _progress(self, step: Step) -> None:
        """5 % for starting, then the share of the document's steps that have completed a run
        (a loop going back does not take progress back)."""
        done = {s.key.split("#", 1)[0] for s in step.subtasks.values()
                if s.status is SubtaskStatus.COMPLETED}
        progress = 5 + int(90 * len(done) / len(self.doc.steps))
        if progress > step.task.progress:
            step.set_task(progress=progress)
            graph.emit_task_update(step)

    def _start_ready(self, step: Step) -> None:
        """Create a run of every step that may start now."""
        for doc_step in self.doc.steps:
            if self._ready(step, doc_step):
                self._run(step, doc_step, feedback=None)

    def _ready(self, step: Step, doc_step: StepDoc) -> bool:
        runs = self._runs(step, doc_step.id)
        if runs and runs[-1].status not in TERMINAL_SUBTASK:
            return False
        if not doc_step.after:
            return not runs
        newest = 0
        for dep in doc_step.after:
            last = self._runs(step, dep)[-1:]
            if not last or last[0].status is not SubtaskStatus.COMPLETED or last[0].options.looped:
                return False
            newest = max(newest, last[0].options.seq or 0)
        return not runs or newest > (runs[-1].options.seq or 0)

    def _run(self, step: Step, doc_step: StepDoc, *, feedback: str | None) -> SubtaskRecord:
        number = len(self._runs(step, doc_step.id)) + 1
        seq = 1 + sum(1 for s in step.subtasks.values() if s.options.seq is not None)
        role = self.doc.roles[doc_step.role] if doc_step.role else None
        prompt = self._render(step, role.prompt if role else "", feedback or "")
        if role is not None and role.output is not None:
            prompt += ("\n\nAnswer with only a JSON value that matches this JSON Schema:\n"
                       + json.dumps(role.output, indent=1))
        deps = tuple(self._runs(step, dep)[-1].id for dep in doc_step.after)
        sub = SubtaskRecord(
            id=step.ctx.new_id(), task_id=step.task.id, key=f"{doc_step.id}#{number}",
            role=doc_step.role or doc_step.id, kind=StepKind.AGENT,
            name=doc_step.id if number == 1 else f"{doc_step.id} (round {number})",
            description=prompt, status=SubtaskStatus.QUEUED, created_at=step.ctx.now,
            dependencies=deps, options=StepOptions(seq=seq),
            recommended_tool=role.tools[0] if role and role.tools else None,
            priority=float(len(self.doc.steps) - self.doc.steps.index(doc_step)))
        step.add_subtask(sub)
        graph.emit_subtask(step, sub)
        return sub

    def _maybe_loop(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        for loop in self._loops_from.get(doc_step.id, ()):
            target = self._steps[loop.to]
            done = len(self._runs(step, target.id)) - 1
            cap = self._cap(step.task, loop)
            if not self._holds(step, loop):
                continue
            if done >= cap:
                step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                          message=f"'{loop.source}' asked to go back to '{loop.to}' again, but "
                                  f"the loop ran its {cap} time(s); going on.")
                continue
            step.set_subtask(sub, options=replace(sub.options, looped=True))
            carried = self._entry(step, loop.carry or loop.when.entry, "")
            self._run(step, target, feedback=carried)
            return

    def _holds(self, step: Step, loop: Loop) -> bool:
        value = self._value(step, loop.when.entry, loop.when.field or "")
        return value is not None and value == loop.when.equals

    def _cap(self, task: TaskRecord, loop: Loop) -> int:
        if isinstance(loop.max, int):
            return loop.max
        return int(self._parameter(task, loop.max.strip("{}")))

    # ---- the blackboard -------------------------------------------------------------------

    def _runs(self, step: Step, step_id: str) -> list[SubtaskRecord]:
        """The runs of a step, oldest first."""
        prefix = f"{step_id}#"
        runs = [s for s in step.subtasks.values() if s.key.startswith(prefix)]
        return sorted(runs, key=lambda s: s.options.seq or 0)

    def _latest(self, step: Step, entry: str) -> SubtaskRecord | None:
        writer = self._writer.get(entry)
        if writer is None:
            return None
        done = [s for s in self._runs(step, writer.id) if s.status is SubtaskStatus.COMPLETED]
        return done[-1] if done else None

    def _revision(self, step: Step, doc_step: StepDoc) -> int:
        return sum(1 for s in self._runs(step, doc_step.id)
                   if s.status is SubtaskStatus.COMPLETED)

    def _value(self, step: Step, entry: str, path: str) -> Any:
        """An entry's latest revision: its checked answer if it has one, else its text; or a
        field of the answer along `path` (`verdict`, `a.b`)."""
        latest = self._latest(step, entry)
        if latest is None or latest.output is None:
            return None
        value: Any = latest.output.parsed if latest.output.answers else latest.output.text
        for part in filter(None, path.split(".")):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    def _entry(self, step: Step, entry: str, path: str) -> str:
        value = self._value(step, entry, path)
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, indent=1)
        return text[:MAX_ENTRY_CHARS]

    def _parameter(self, task: TaskRecord, name: str) -> Any:
        if name in task.meta.parameters:
            return task.meta.parameters[name]
        return self.doc.parameters[name].default

    def _render(self, step: Step, template: str, feedback: str) -> str:
        def fill(match: re.Match[str]) -> str:
            name, path = match.group(1), match.group(2).lstrip(".")
            if name == "query":
                return step.task.description
            if name == "feedback":
                return feedback
            if name in self.doc.parameters:
                return str(self._parameter(step.task, name))
            if name in self._writer:
                return self._entry(step, name, path)
            return match.group(0)
        return _PLACEHOLDER.sub(fill, template)

    def _step_of(self, sub: SubtaskRecord) -> StepDoc:
        return self._steps[sub.key.split("#", 1)[0]]

    def _checked_answer(self, step: Step, sub: SubtaskRecord, text: str,
                        contract: Mapping[str, Any], output: StepOutput) -> StepOutput | None:
        """`output` with the answer checked against the role's contract; None when the step
        was sent back to repair it, or failed."""
        problem = _contract_problem(text, contract)
        if problem is None:
            return replace(output, answers=True,
                           parsed=_as_mapping(answers.extract_json(text)))
        if not sub.options.repair:
            sub = step.set_subtask(
                sub, status=transition(sub.status, SubtaskStatus.QUEUED),
                current_attempt_id=None, options=replace(sub.options, repair=problem),
                error=problem)
            graph.emit_subtask(step, sub, repair=True)
            return None
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=problem, completed_at=step.ctx.now,
                               current_attempt_id=None)
        graph.emit_subtask(step, sub)
        graph.fail_task(step, f"Step '{sub.name}' answered twice without matching its "
                              f"contract: {problem}")
        return None


def _contract_problem(text: str, contract: Mapping[str, Any]) -> str | None:
    found = answers.find_json(text)
    if not found.found:
        return "the answer holds no JSON" + (f" ({found.error})" if found.error else "")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(contract).iter_errors(found.value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or 'the answer'}: {error.message}"[:500]


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {"value": value}
