"""A document's `quality` steps (`quality: true`), run by the engine's quality loop as the `dag`
workflow runs them: a run is verified (evaluated, judged, maybe reviewed and corrected) before
it counts; a quality step that fails for good lets its target go on without it."""

from __future__ import annotations

from shoal.engine import graph, quality_loop
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord
from shoal.engine.quality_loop import QualityLoop
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import SubtaskStatus, transition


def verify(step: Step, sub: SubtaskRecord, output: StepOutput) -> None:
    """`sub` answered: it is `verifying` until the loop accepts it (`Workflow.accepted`)."""
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.VERIFYING),
                           output=output, progress=90, error=None)
    graph.emit_subtask(step, sub)
    quality_loop.verify(step, sub)


def answered(loop: QualityLoop, step: Step, sub: SubtaskRecord, output: StepOutput) -> None:
    """A quality step ended: its answer read as the `dag` workflow reads it; the loop decides
    what its target does next."""
    found = quality_loop.quality_output(step, sub, output.text, output)
    if found is None:
        return  # requeued once to repair an answer that was not valid JSON
    if sub.kind is StepKind.CORRECT and found.approval_requests:
        quality_loop.approval_request(step, sub, found)
        return
    loop.step_done(step, graph.complete(step, sub, found))


def gave_up(loop: QualityLoop, step: Step, sub: SubtaskRecord, error: str) -> None:
    """A quality step failed for good: its target goes on without it, as in `dag`."""
    step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
              message=f"'{sub.name}' failed after {sub.attempts} attempt(s): {error}")
    loop.step_done(step, sub)
