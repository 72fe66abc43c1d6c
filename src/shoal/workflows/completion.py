"""What a document's task reports as it goes and when it ends: the checkpoint frequency over
its `quality` steps' runs, and what its `task_complete` event says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shoal.engine import quality, quality_loop
from shoal.engine.model import StepKind
from shoal.engine.step import Step
from shoal.states import SubtaskStatus, TaskStatus
from shoal.workflows import checks, questions
from shoal.workflows.board import Board
from shoal.workflows.runs import Runs


def frequency(board: Board, step: Step) -> None:
    """The seed's checkpoint frequency, over the runs of `quality` steps: a run counts once,
    when first accepted (before the task may complete)."""
    if step.task.status is not TaskStatus.IN_PROGRESS:
        return
    runs = [s for s in step.subtasks.values()
            if s.kind is StepKind.AGENT and board.step_of(s).quality]
    done = sum(1 for s in runs if s.status is SubtaskStatus.COMPLETED)
    if quality.frequency_checkpoint(step.task.checkpoint_frequency, done, len(runs)):
        quality_loop.open_checkpoint(
            step, "frequency", None,
            message=f"{done} of {len(runs)} subtasks are done (checkpoint frequency: "
                    f"{step.task.checkpoint_frequency}).")


def summary(runs: Runs, step: Step) -> Mapping[str, Any]:
    """The revisions of each entry; with `quality` steps, the mean scores as in `dag`."""
    board = runs.board
    revisions = {entry: board.revision(step, s) for entry, s in board.writer.items()}
    done: dict[str, Any] = {"state": {entry: n for entry, n in revisions.items() if n}}
    if board.doc.stages is not None:
        done["stage"] = runs.stage_now(step.subtasks.values(), completed=True)
    gaps = [s.name for s in step.subtasks.values() if s.options.gap]
    if gaps:  # a typed plan that degraded: its result is partial
        done |= {"partial": True, "gaps": gaps}
    if asked := questions.status(step.subtasks.values()):  # "n of m answered", counted
        done["questions"] = questions.summary(asked)
    if (cited := checks.figures(step.subtasks.values())) is not None:  # computed in code
        done["citations"] = cited
    if not any(s.quality for s in board.doc.steps):
        return done
    return done | {"evaluation_scores": quality_loop.task_scores(step)}
