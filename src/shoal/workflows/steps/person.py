"""The handler of the steps a person decides (`human`, `gate`; `people`): a `human` step asks
its question; a `gate` compares now and asks only if it must. Neither goes to a worker: the
subtask is in progress until decided."""

from __future__ import annotations

from shoal.engine.model import StepKind, StepOutput, SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.engine.step import Step
from shoal.states import SubtaskStatus
from shoal.workflows import people
from shoal.workflows.document import DocStepKind, StepDoc
from shoal.workflows.runs import Reading, Round, Runs

_KINDS = {DocStepKind.HUMAN: StepKind.HUMAN, DocStepKind.GATE: StepKind.GATE}


class PersonStep:
    """Runs `human` and `gate` steps."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    def start(self, step: Step, doc_step: StepDoc, rnd: Round) -> None:
        if (opened := self.runs.opened(step, doc_step, rnd.via)) is None:
            return
        number, seq = opened
        board = self.runs.board
        question = board.render(step, doc_step, doc_step.question or "", "", "")
        sub = SubtaskRecord(
            id=step.ctx.new_ordered_id(), task_id=step.task.id, key=f"{doc_step.id}#{number}",
            role=doc_step.kind.value, kind=_KINDS[doc_step.kind],
            name=doc_step.id + (f" (round {number})" if number > 1 else ""),
            description=question or f"Gate: {doc_step.over} at least {doc_step.min_score:g}",
            status=SubtaskStatus.IN_PROGRESS, created_at=step.ctx.now,
            started_at=step.ctx.now, dependencies=rnd.deps, options=StepOptions(seq=seq))
        step.add_subtask(sub)
        self.runs.emit_created(step, sub)
        if doc_step.kind is DocStepKind.HUMAN:
            people.ask(step, sub, people.QUESTION, f"Step '{doc_step.id}' asks: {question}",
                       question)
            return
        assert doc_step.over is not None  # the document check says so
        entry, _, path = doc_step.over.partition(".")
        passed, verdict = people.judged(step, doc_step, sub, board.value(step, entry, path))
        if passed:
            self.decided(step, doc_step, sub, verdict)

    def read(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> Reading:
        return Reading(output)  # (no worker runs it)

    def completed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  reading: Reading) -> bool:
        return False

    def failed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> bool:
        return False

    def decided(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                answer: str | None) -> None:
        """A person answered, or let the task go on: the step's entry is what they said."""
        self.runs.person_answered(step, doc_step, sub, answer or "")
