"""`human` and `gate` steps, run by the engine with no I/O: a question pauses the task until a
person answers, and the answer is the step's output; a gate passes a score at or above its
threshold at once, and below it asks a person, fails the task, or goes on."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from shoal.engine.inputs import CheckpointDecision, CheckpointExpired
from shoal.engine.model import Deadline, StepKind
from shoal.errors import Conflict
from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import NOW, Run

INTERVIEW = """\
name: interview
version: 1
description: Ask who it is for, draft, score, and let a gate decide.
roles:
  drafter: {prompt: "Draft a proposal on {query} for {audience}"}
  scorer:
    prompt: "Score this draft from 0 to 10: {draft}"
    output: {type: object, required: [score], properties: {score: {type: number}}}
  editor: {prompt: "Polish {draft}"}
steps:
  - {id: audience, kind: human, question: "Who is the proposal about {query} for?"}
  - {id: draft, kind: agent, role: drafter, after: [audience]}
  - {id: score, kind: agent, role: scorer, after: [draft]}
  - {id: quality, kind: gate, over: score.score, min_score: 7, after: [score]}
  - {id: polish, kind: agent, role: editor, after: [quality]}
"""


def started(document: str = INTERVIEW) -> Run:
    return Run(document)


def pending(run: Run) -> list[dict[str, object]]:
    return [d for t, d in run.events if t is EventType.CHECKPOINT_READY]


def answered(run: Run, text: str = "City planners") -> Run:
    cp = pending(run)[-1]
    run.decide(CheckpointDecision(_id(cp), "answer", None, answer=text))
    return run


def _id(data: dict[str, object]) -> uuid.UUID:
    return uuid.UUID(str(data["checkpoint_id"]))


def scored(run: Run, score: float) -> Run:
    run.answer("draft#1", "A proposal")
    run.answer("score#1", json.dumps({"score": score}))
    return run


def test_a_question_pauses_the_task_and_the_answer_feeds_the_next_prompt() -> None:
    run = started()
    (ask,) = [s for s in run.state.subtasks.values()]
    assert (ask.key, ask.kind, ask.status) == ("audience#1", StepKind.HUMAN,
                                               SubtaskStatus.IN_PROGRESS)
    assert run.state.task.status is TaskStatus.AWAITING_INPUT
    ready = pending(run)[-1]
    assert ready["reason"] == "question"
    assert ready["question"] == "Who is the proposal about Bonjour tout for?"
    assert run.keys() == []  # nothing else may start before the answer
    answered(run)
    assert run.state.task.status.value == "in_progress"
    assert run.keys() == ["draft#1"]
    assert run.queued()[0].description == "Draft a proposal on Bonjour tout for City planners"


def test_a_question_takes_an_answer_not_an_approval() -> None:
    run = started()
    with pytest.raises(Conflict, match="answer or reject"):
        run.decide(CheckpointDecision(_id(pending(run)[-1]), "approve", None))


def test_a_score_at_the_threshold_passes_the_gate_at_once() -> None:
    run = scored(answered(started()), 7)
    gate = next(s for s in run.state.subtasks.values() if s.key == "quality#1")
    assert gate.status is SubtaskStatus.COMPLETED
    assert gate.output is not None
    assert gate.output.text == "'score.score' is 7, at least 7"
    assert run.keys() == ["polish#1"]


def test_a_low_score_asks_a_person_who_may_let_it_go_on() -> None:
    run = scored(answered(started()), 4.5)
    assert run.state.task.status is TaskStatus.CHECKPOINT
    assert pending(run)[-1]["reason"] == "gate"
    assert "'score.score' is 4.5, below 7" in str(pending(run)[-1]["message"])
    run.decide(CheckpointDecision(_id(pending(run)[-1]), "approve", None))
    assert run.keys() == ["polish#1"]
    run.answer("polish#1", "Polished")
    assert run.state.task.status.value == "completed"


def test_rejecting_a_gate_cancels_the_task() -> None:
    run = scored(answered(started()), 4.5)
    run.decide(CheckpointDecision(_id(pending(run)[-1]), "reject", None, reason="Too weak"))
    assert run.state.task.status is TaskStatus.CANCELLED
    assert run.state.task.error == "Rejected at a gate: Too weak"


@pytest.mark.parametrize(("on_fail", "status"), [("fail", "failed"), ("continue", "in_progress")])
def test_a_gate_may_fail_the_task_or_go_on(on_fail: str, status: str) -> None:
    doc = INTERVIEW.replace("min_score: 7,", f"min_score: 7, on_fail: {on_fail},")
    run = scored(answered(started(doc)), 2)
    assert run.state.task.status.value == status
    if on_fail == "continue":
        assert run.keys() == ["polish#1"]
        notice = [str(d["message"]) for t, d in run.events if t is EventType.NOTICE][-1]
        assert "going on (on_fail: continue)" in notice
    else:
        assert "'score.score' is 2, below 7" in (run.state.task.error or "")


def test_a_gate_over_no_number_fails_the_task_saying_so() -> None:
    doc = INTERVIEW.replace("properties: {score: {type: number}}", "properties: {}")
    run = answered(started(doc))
    run.answer("draft#1", "A proposal")
    run.answer("score#1", json.dumps({"score": "high"}))
    assert run.state.task.status is TaskStatus.FAILED
    assert 'holds no number ("high")' in (run.state.task.error or "")


def test_a_deadline_that_approves_lets_the_gate_go_on() -> None:
    run = scored(answered(started()), 3)
    task = replace(run.state.task, meta=replace(run.state.task.meta,
                                                checkpoint_deadline=Deadline(60, "approve")))
    run.state = replace(run.state, task=task)
    cp = next(iter(run.state.checkpoints.values()))
    run.state.checkpoints[cp.id] = replace(cp, deadline_at=NOW - timedelta(seconds=1),
                                           deadline_action="approve")
    run.decide(CheckpointExpired(cp.id))
    assert run.keys() == ["polish#1"]


@pytest.mark.parametrize(("change", "words"), [
    (("over: score.score, ", ""), "a gate step needs `over`"),
    (("about {query} for?", "about {reader} for?"), "question names {reader}"),
])
def test_people_steps_that_cannot_work_are_refused(change: tuple[str, str], words: str) -> None:
    assert change[0] in INTERVIEW
    with pytest.raises(DocumentError, match=words.replace("{", r"\{").replace("}", r"\}")):
        load_document(INTERVIEW.replace(*change))


def test_a_deadline_that_escalates_keeps_the_question_waiting_flagged() -> None:
    run = started()
    cp = next(iter(run.state.checkpoints.values()))
    run.state.checkpoints[cp.id] = replace(cp, deadline_at=NOW - timedelta(seconds=1),
                                           deadline_action="escalate")
    run.decide(CheckpointExpired(cp.id))
    waiting = run.state.checkpoints[cp.id]
    assert (waiting.deadline_at, waiting.data["escalated"]) == (None, True)
    assert run.state.task.status is TaskStatus.AWAITING_INPUT
