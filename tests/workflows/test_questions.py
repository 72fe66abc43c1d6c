"""Sub-questions of a typed plan (`questions` on an `expand` step): the planner names them, each
task of a type that `serves` them says which it serves, and the engine — not a model — counts
each answered (a serving task found something) or a gap (with what was searched), tells the
tasks after the retrievals, and says "n of m answered" when the task completes."""

from __future__ import annotations

import json

import pytest

from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus
from shoal.workflows.loading import DocumentError, load_document
from shoal.workflows.questions import status
from tests.workflows.test_interpreter import Run
from tests.workflows.test_typed_plans import by_name

ASKED = """\
name: asked
version: 1
description: Name the question's parts, search each, write it up.
roles:
  planner: {prompt: "Plan: {query}"}
  finder:
    prompt: "Find: {item}"
    output:
      type: object
      required: [query, answered, findings]
      properties:
        query: {type: string}
        answered: {type: boolean}
        findings: {type: array, items: {type: object}}
  writer: {prompt: "Write: {item}"}
steps:
  - id: plan
    kind: expand
    role: planner
    questions: {min: 1, max: 4}
    types:
      find: {role: finder, serves: true, if_failed: gap}
      write: {role: writer, writes_result: true}
    default_plan:
      - {name: Look, type: find, description: look it up}
      - {name: Write up, type: write, description: write it, dependencies: [Look]}
result: plan
"""
PLAN = {"questions": [{"id": "q1", "question": "How is it tuned?"},
                      {"id": "q2", "question": "Is it thread safe?"},
                      {"id": "q3", "question": "Who wrote it?"}],
        "subtasks": [
            {"name": "Tuning", "type": "find", "description": "tuning", "serves": ["q1"]},
            {"name": "Threads", "type": "find", "description": "threads", "serves": ["q2", "q9"]},
            {"name": "Write", "type": "write", "description": "the report",
             "dependencies": ["Tuning", "Threads"]}]}


def found(query: str, *findings: str) -> str:
    return json.dumps({"query": query, "answered": bool(findings),
                       "findings": [{"text": f, "citation": "doc.md"} for f in findings]})


def test_each_part_is_answered_or_a_gap_saying_what_was_searched() -> None:
    run = Run(ASKED)
    planner = run.queued()[0]
    assert '"questions"' in planner.description
    assert '"serves"' in planner.description
    run.answer("plan#1", json.dumps(PLAN))
    tuning, threads = by_name(run, "Tuning"), by_name(run, "Threads")
    assert tuning.options.serves == ("q1",)
    assert threads.options.serves == ("q2",)  # an id the plan does not name is dropped
    assert "It serves sub-question q2: Is it thread safe?" in threads.description
    run.answer(tuning.key, found("gc tuning options", "The pool grows by 10 %."))
    run.answer(threads.key, found("thread safety lock"))  # searched, found nothing
    writer = by_name(run, "Write")
    assert writer.status is SubtaskStatus.QUEUED
    assert "(1 of 3 answered)" in writer.description
    assert "- q1 answered (Tuning): How is it tuned?" in writer.description
    assert ("- q2 NOT answered: Is it thread safe? (searched: Threads: thread safety lock; "
            "Threads found nothing in the sources)") in writer.description
    assert ("- q3 NOT answered: Who wrote it? (searched: nothing; no task of the plan served "
            "it)") in writer.description
    run.answer(writer.key, "# Report")
    assert run.state.task.status is TaskStatus.COMPLETED
    [done] = [d for t, d in run.events if t is EventType.TASK_COMPLETE]
    counted = done["questions"]
    assert (counted["answered"], counted["of"]) == (1, 3)
    assert counted["questions"][0] == {"id": "q1", "question": "How is it tuned?",
                                       "answered": True, "by": ["Tuning"]}
    assert counted["questions"][1]["searched"] == ["Threads: thread safety lock"]
    assert counted["questions"][2]["why"] == "no task of the plan served it"


def test_a_serving_task_that_names_no_part_is_sent_back_once() -> None:
    """The plan's contract requires `serves` on a serving type's tasks and the list of
    sub-questions: an answer without them is repaired like any contract miss."""
    run = Run(ASKED)
    plan = {"subtasks": [{"name": "Look", "type": "find", "description": "x"}]}
    run.answer("plan#1", json.dumps(plan))
    again = run.queued()[0]
    assert again.options.repair is not None
    assert "questions" in again.options.repair


def test_the_default_plan_asks_the_request_itself() -> None:
    """No usable plan: the default plan runs, with one sub-question, the request, served by
    every task of a serving type; a gap (a failed search) leaves it unanswered."""
    run = Run(ASKED)
    run.answer("plan#1", "not a plan")
    run.answer(run.queued()[0].key, "still not a plan")  # the one repair
    look = by_name(run, "Look")
    assert look.options.serves == ("q1",)
    [q] = status(run.state.subtasks.values())
    assert (q.id, q.question, q.answered) == ("q1", run.state.task.description, False)


def test_the_document_says_where_questions_and_serves_belong() -> None:
    untyped = ASKED.replace("    types:\n", "    each: finder\n    xtypes:\n")
    with pytest.raises(DocumentError):
        load_document(untyped)
    no_serving = ASKED.replace("serves: true, ", "")
    with pytest.raises(DocumentError) as refused:
        load_document(no_serving)
    assert refused.value.message.startswith("<document>:20: steps.0.questions: no type "
                                            "`serves` the sub-questions")
    no_questions = ASKED.replace("    questions: {min: 1, max: 4}\n", "")
    with pytest.raises(DocumentError) as refused:
        load_document(no_questions)
    assert "give the step some" in refused.value.message
