"""Declared stages, run by the engine with no I/O: each round moves the task to its step's
stage (a `stage` event), a move the document does not allow fails the task saying why, and the
document check refuses steps and loops that would break the stages, naming the line."""

from __future__ import annotations

import json

import pytest

from shoal.events import EventType
from shoal.states import TaskStatus
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import Run

STAGED = """\
name: staged
version: 1
description: Draft, check, and draft again while the checker asks.
parameters:
  rounds: {type: integer, default: 2, minimum: 0, maximum: 5}
roles:
  writer: {prompt: "Write about {query}. {feedback}"}
  checker:
    prompt: "Check {draft}"
    output: {type: object, required: [again], properties: {again: {type: boolean}}}
stages:
  initial: init
  allowed: {init: [drafting], drafting: [checking], checking: [drafting, complete]}
  final: complete
steps:
  - {id: draft, kind: agent, role: writer, stage: drafting}
  - {id: check, kind: agent, role: checker, after: [draft], stage: checking}
loops:
  - {from: check, to: draft, when: {entry: check, field: again, equals: true},
     max: "{rounds}"}
"""


def moves(run: Run) -> list[tuple[str, str]]:
    return [(str(d["previous"]), str(d["stage"])) for t, d in run.events
            if t is EventType.STAGE]


def test_each_round_moves_the_task_to_its_steps_stage() -> None:
    run = Run(STAGED)
    run.answer("draft#1", "A draft")
    run.answer("check#1", json.dumps({"again": True}))
    run.answer("draft#2", "A better draft")
    run.answer("check#2", json.dumps({"again": False}))
    assert run.state.task.status is TaskStatus.COMPLETED
    assert moves(run) == [("init", "drafting"), ("drafting", "checking"),
                          ("checking", "drafting"), ("drafting", "checking")]
    complete = [d for t, d in run.events if t is EventType.TASK_COMPLETE][-1]
    assert complete["stage"] == "complete"


def test_a_move_the_document_does_not_allow_fails_the_task_saying_why() -> None:
    """Two steps after one, in stages that may not follow each other: the second to start
    would move the task from the first's stage to its own."""
    run = Run("""\
name: forked
version: 1
description: One step, then two at once in different stages.
roles:
  doer: {prompt: "Do {query}"}
stages:
  initial: init
  allowed: {init: [start], start: [left, right]}
steps:
  - {id: begin, kind: agent, role: doer, stage: start}
  - {id: a, kind: agent, role: doer, after: [begin], stage: left}
  - {id: b, kind: agent, role: doer, after: [begin], stage: right}
""")
    run.answer("begin#1", "begun")
    assert run.state.task.status is TaskStatus.FAILED
    assert run.state.task.error == ("Step 'b' belongs to stage 'right', which may not follow "
                                    "'left' (the document allows: nothing).")
    assert moves(run) == [("init", "start"), ("start", "left")]


@pytest.mark.parametrize(("change", "field", "problem"), [
    ("allowed: {init: [drafting], drafting: [checking], checking: [drafting, complete]}",
     "loops.0.to", "back to 'drafting', which may not follow it"),
    ("{id: check, kind: agent, role: checker, after: [draft], stage: checking}",
     "steps.1.stage", "needs one of"),
    ("initial: init", "steps.0.stage", "may not come first"),
])
def test_the_check_refuses_what_would_break_the_stages_naming_the_line(
        change: str, field: str, problem: str) -> None:
    broken = {
        "allowed: {init: [drafting], drafting: [checking], checking: [drafting, complete]}":
            "allowed: {init: [drafting], drafting: [checking], checking: [complete]}",
        "{id: check, kind: agent, role: checker, after: [draft], stage: checking}":
            "{id: check, kind: agent, role: checker, after: [draft]}",
        "initial: init": "initial: complete",
    }[change]
    with pytest.raises(DocumentError) as caught:
        load_document(STAGED.replace(change, broken), source="staged.yaml")
    details = caught.value.details
    assert details["field"] == field
    assert problem in str(details["problem"])
    assert isinstance(details["line"], int)
    assert details["line"] > 1


def test_a_stage_without_declared_stages_is_refused() -> None:
    with pytest.raises(DocumentError) as caught:
        load_document(STAGED.split("stages:\n")[0] + "steps:\n"
                      "  - {id: draft, kind: agent, role: writer, stage: drafting}\n")
    assert "declare `stages`" in str(caught.value.details["problem"])
