"""How a document's declared stages are kept (`DocumentWorkflow` mixes this in; the document
side is `stages`): a round of a step moves the task to the step's stage, or fails the task when
the document does not allow the move."""

from __future__ import annotations

from collections.abc import Iterable

from shoal.engine import graph
from shoal.engine.model import SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.workflows import stages as stage_machine
from shoal.workflows.board import Board
from shoal.workflows.document import StepDoc


class StagedRuns(Board):
    """The stage half of `DocumentWorkflow`."""

    def _enter_stage(self, step: Step, doc_step: StepDoc, via: str | None = None) -> bool:
        """Move the task to `doc_step`'s stage (a `stage` event; through a loop's `via`
        stage, two), or fail it saying why the document does not allow the move; False
        then."""
        stages, stage = self.doc.stages, doc_step.stage
        if stages is None or stage is None:
            return True
        now = self.stage_now(step.subtasks.values(), completed=False) or stages.initial
        if (why := stage_machine.refusal(stages, now, doc_step.id, stage, via)) is not None:
            graph.fail_task(step, why)
            return False
        if via is not None and via != now:
            step.emit(EventType.STAGE, stage=via, previous=now, step=doc_step.id)
            now = via
        if stage != now:
            step.emit(EventType.STAGE, stage=stage, previous=now, step=doc_step.id)
        return True

    def stage_now(self, subtasks: Iterable[SubtaskRecord], *, completed: bool) -> str | None:
        """The task's declared stage (None: the document declares none)."""
        if self.doc.stages is None:
            return None
        return stage_machine.stage_of(self.doc.stages, (
            (s.options.seq or 0, self._steps[s.key.split("#", 1)[0]].stage)
            for s in subtasks if s.key.split("#", 1)[0] in self._steps), completed)
