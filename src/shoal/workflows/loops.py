"""A document's loops, run: when a step that a loop goes back from completes and the loop's
condition holds, the loop's target runs again (at most `max` times) with the carried entry as
`{feedback}`; at the cap it goes on, or asks a person (`ask_at_cap`)."""

from __future__ import annotations

from dataclasses import replace

from shoal.engine.model import SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.workflows import people
from shoal.workflows.board import Board
from shoal.workflows.document import Loop, StepDoc
from shoal.workflows.runs import Runs


def go_back(runs: Runs, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
    """`sub`'s round of `doc_step` is whole: the first loop from it whose condition holds
    starts its target's next round (`Core.run`), unless it ran its cap."""
    board = runs.board
    for loop in board.loops_from.get(doc_step.id, ()):
        if loop.to in step.task.meta.skip:
            continue
        target = board.steps[loop.to]
        done = len(board.rounds(step, target.id)) - 1
        cap = board.cap(step.task, loop.max)
        if not holds(board, step, loop):
            continue
        if done >= cap:
            said = (f"'{loop.source}' asked to go back to '{loop.to}' again, but the loop "
                    f"ran its {cap} time(s)")
            if board.switch(step.task, loop.ask_at_cap):  # a person decides
                people.ask(step, sub, people.GATE, f"{said}.", "Approve to go on with "
                           "what it has (its open points listed); reject to stop.")
                continue
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                      message=f"{said}; going on.")
            continue
        for run in board.same_round(step, sub):
            step.set_subtask(run, options=replace(run.options, looped=True))
        carried = board.entry(step, loop.carry or loop.when.entry, "")
        runs.core.run(step, target, feedback=carried, via=loop.via)
        return


def holds(board: Board, step: Step, loop: Loop) -> bool:
    """Whether the loop's condition holds on the latest revision of its entry."""
    value = board.value(step, loop.when.entry, loop.when.field or "")
    return value is not None and value == loop.when.equals
