"""Typed plans, run by the engine with no I/O: each planned task's type picks its role; a gate's
judge scores it before it counts (retry with a hint, warn, or a gap once retries are spent); a
task that keeps failing degrades into a gap; `waves` holds a layer until every gate of the one
before has decided, `eager` does not; a plan that cannot be read falls back to the default."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from shoal.engine.inputs import CheckpointDecision, Dispatched, Finished
from shoal.engine.model import (
    AttemptRecord,
    Budget,
    CheckpointRecord,
    StepKind,
    SubtaskRecord,
    evolve,
)
from shoal.errors import InvalidInput
from shoal.events import EventType
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows.event_names import renamer
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import NOW, Run
from tests.workflows.test_routing import fail

STUDY = """\
name: study
version: 1
description: Plan typed tasks, gate them, write it up.
parameters:
  schedule: {type: string, default: waves, choices: [waves, eager]}
  find_min: {type: number, default: 0.7, minimum: 0, maximum: 1}
roles:
  planner: {prompt: "Plan the research: {query}"}
  finder: {prompt: "Find: {item}"}
  counter: {prompt: "Count: {item}"}
  writer: {prompt: "Write: {item}"}
  judge:
    prompt: "Judge this: {item}"
    output:
      type: object
      required: [score]
      properties: {score: {type: number}, feedback: {type: string}}
steps:
  - id: plan
    kind: expand
    role: planner
    schedule: "{schedule}"
    types:
      find:
        role: finder
        description: look something up in the sources
        if_failed: gap
        gate: {judge: judge, min_score: "{find_min}", retries: 1, hint: Expand the query.}
      count: {role: counter, gate: {judge: judge, min_score: 0.6, on_fail: warn}}
      write: {role: writer}
    default_plan:
      - {name: Look, type: find, description: look it up}
      - {name: Write up, type: write, description: write it, dependencies: [Look]}
"""
PLAN = json.dumps({"subtasks": [
    {"name": "Find A", "type": "find", "description": "passages on A"},
    {"name": "Count B", "type": "count", "description": "rows of B"},
    {"name": "Find C", "type": "find", "description": "passages on C", "dependencies": [0]},
    {"name": "Write", "type": "write", "description": "the report",
     "dependencies": ["Find C", "Count B"]}]})


def by_name(run: Run, name: str) -> SubtaskRecord:
    return next(s for s in run.state.subtasks.values() if s.name == name)


def judge_of(run: Run, target: SubtaskRecord, kind: StepKind = StepKind.JUDGE) -> SubtaskRecord:
    return next(s for s in run.queued() if s.target_id == target.id and s.kind is kind)


def judged(run: Run, name: str, answer: str, score: float) -> None:
    """Answer the run `name`, then its gate's judge with `score`."""
    target = by_name(run, name)
    run.answer(target.key, answer)
    run.answer(judge_of(run, target).key, json.dumps({"score": score, "feedback": "thin"}))


def notices(run: Run) -> list[str]:
    return [str(d["message"]) for t, d in run.events if t is EventType.NOTICE]


def test_each_type_runs_by_its_role_and_a_wave_waits_for_every_gate_before_it() -> None:
    run = Run(STUDY)
    planner = run.queued()[0]
    assert '"type"' in planner.description
    assert "- find: look something up" in \
        planner.description
    run.answer("plan#1", PLAN)
    planned = [d for t, d in run.events if t is EventType.TASK_UPDATE and "plan" in d][-1]
    assert (planned["types"], planned["waves"]) == (["find", "count", "find", "write"], 3)
    assert {s.name for s in run.queued()} == {"Find A", "Count B"}
    assert by_name(run, "Count B").role == "counter"
    assert by_name(run, "Count B").description == "Count: Count B: rows of B"
    judged(run, "Find A", "A is 3", 0.9)
    assert by_name(run, "Find A").status is SubtaskStatus.COMPLETED
    # Find C's own dependency is done, but its wave waits for Count B's gate.
    assert by_name(run, "Find C").status is SubtaskStatus.PENDING
    count = by_name(run, "Count B")
    run.answer(count.key, "B has 12 rows")
    assert by_name(run, "Count B").status is SubtaskStatus.VERIFYING
    assert "B has 12 rows" in judge_of(run, count).description
    assert by_name(run, "Find C").status is SubtaskStatus.PENDING  # the gate has not decided
    run.answer(judge_of(run, count).key, json.dumps({"score": 0.4}))
    assert any("kept, as its type's gate says (warn)" in n for n in notices(run))
    find_c = by_name(run, "Find C")
    assert find_c.status is SubtaskStatus.QUEUED
    assert '<result task="Find A" type="find">\nA is 3\n</result>' in find_c.description
    assert "Count B" not in find_c.description  # not a dependency of its own
    assert any(n.startswith("Wave 2 of 3 starts: Find C") for n in notices(run))
    judged(run, "Find C", "C is 5", 0.8)
    write = by_name(run, "Write")
    assert write.role == "writer"
    assert '<result task="Find C" type="find">\nC is 5\n</result>' in write.description
    assert '<result task="Count B" type="count">\nB has 12 rows\n' in write.description
    run.answer(write.key, "# Report")
    assert run.state.task.status is TaskStatus.COMPLETED


def test_eager_starts_a_task_once_its_own_dependencies_are_done() -> None:
    run = Run(STUDY, schedule="eager")
    run.answer("plan#1", PLAN)
    judged(run, "Find A", "A is 3", 0.9)
    assert by_name(run, "Find C").status is SubtaskStatus.QUEUED  # Count B still runs


def test_a_low_score_retries_with_the_hint_then_becomes_a_gap_the_report_is_told_of() -> None:
    run = Run(STUDY)
    run.answer("plan#1", PLAN)
    judged(run, "Find A", "A is maybe 3", 0.3)
    find_a = by_name(run, "Find A")
    assert find_a.status is SubtaskStatus.CORRECTING
    retry = judge_of(run, find_a, StepKind.CORRECT)
    assert retry.role == "finder"
    assert "Expand the query." in retry.description
    assert '"feedback": "thin"' in retry.description
    assert "A is maybe 3" in retry.description
    run.answer(retry.key, "A is 3, or 4")  # the second try, recorded as its own run
    assert by_name(run, "Find A").output.text == "A is 3, or 4"  # type: ignore[union-attr]
    run.answer(judge_of(run, find_a).key, json.dumps({"score": 0.2}))
    find_a = by_name(run, "Find A")
    assert find_a.status is SubtaskStatus.COMPLETED
    assert find_a.options.gap is not None
    assert "did not pass" in find_a.options.gap
    assert find_a.output is not None
    assert find_a.output.text.startswith("[gap] Find A")
    judged(run, "Count B", "12", 0.9)
    find_c = by_name(run, "Find C")
    assert '<gap task="Find A">Not answered: ' in find_c.description
    judged(run, "Find C", "C is 5", 0.9)
    run.answer(by_name(run, "Write").key, "# Report\n## Gaps\nA")
    assert run.state.task.status is TaskStatus.COMPLETED


def test_a_task_that_keeps_failing_is_a_gap_where_its_type_says_so_else_the_task_fails() -> None:
    run = Run(STUDY)
    run.answer("plan#1", PLAN)
    fail(run, by_name(run, "Find A").key)
    assert by_name(run, "Find A").options.gap is not None
    assert run.state.task.status is TaskStatus.IN_PROGRESS
    judged(run, "Count B", "12", 0.9)
    judged(run, "Find C", "C", 0.9)
    fail(run, by_name(run, "Write").key)  # `write` does not degrade
    assert run.state.task.status is TaskStatus.FAILED


def test_a_plan_off_its_schema_is_repaired_once_then_the_default_plan_runs() -> None:
    run = Run(STUDY)
    run.answer("plan#1", json.dumps({"subtasks": [{"name": "X", "type": "dance",
                                                   "description": "x"}]}))
    planner = run.queued()[0]
    assert planner.key == "plan#1"
    assert planner.options.repair
    run.answer("plan#1", "First look, then write.")
    planned = [d for t, d in run.events if t is EventType.TASK_UPDATE and "plan" in d][-1]
    assert planned["plan_source"] == "default"
    assert [p["name"] for p in planned["plan"]] == ["Look", "Write up"]
    assert any("Used the default plan" in n for n in notices(run))


@pytest.mark.parametrize(("change", "field", "problem"), [
    ("    kind: expand\n", "steps.0.kind", None),
    ("      write: {role: writer}\n", "steps.0.types.write.role", "no role 'author'"),
    ("  judge:\n    prompt: \"Judge this: {item}\"\n", "steps.0.types.find.gate.judge",
     "give it an output contract"),
    ("  schedule: {type: string, default: waves, choices: [waves, eager]}\n",
     "steps.0.schedule", "give it choices among eager, waves"),
    ("      - {name: Look, type: find, description: look it up}\n",
     "steps.0.default_plan.0.type", "no type 'seek'"),
])
def test_the_document_check_names_the_line_and_field_of_a_typed_plans_mistake(
    change: str, field: str, problem: str | None,
) -> None:
    broken = {
        "    kind: expand\n": "    kind: agent\n",
        "      write: {role: writer}\n": "      write: {role: author}\n",
        "  judge:\n    prompt: \"Judge this: {item}\"\n":
            "  judge:\n    prompt: \"Judge this: {item}\"\n  unused:\n    prompt: x\n",
        "  schedule: {type: string, default: waves, choices: [waves, eager]}\n":
            "  schedule: {type: string, default: waves}\n",
        "      - {name: Look, type: find, description: look it up}\n":
            "      - {name: Look, type: seek, description: look it up}\n",
    }[change]
    text = STUDY.replace(change, broken)
    if problem == "give it an output contract":  # the judge loses its contract
        text = text.replace("    output:\n      type: object\n      required: [score]\n"
                            "      properties: {score: {type: number}, feedback: "
                            "{type: string}}\n", "")
    with pytest.raises(DocumentError) as caught:
        load_document(text, source="study.yaml")
    details = caught.value.details
    assert details["field"] == field.replace("steps.0.kind", "steps.0.types")
    assert details["line"] is not None
    assert details["line"] > 1
    if problem:
        assert problem in str(details["problem"])


WIDE = json.dumps({"subtasks": [
    {"name": "Find A", "type": "find", "description": "a"},
    {"name": "Count B", "type": "count", "description": "b"},
    {"name": "Find C", "type": "find", "description": "c", "dependencies": ["Find A"]},
    {"name": "Find D", "type": "find", "description": "d", "dependencies": ["Count B"]},
    {"name": "Write", "type": "write", "description": "w",
     "dependencies": ["Find C", "Find D"]}]})


def spend(run: Run, key: str, text: str, tokens: int = 100) -> None:
    """Run the queued run `key` and finish it with `text`, having spent `tokens`."""
    sub = next(s for s in run.queued() if s.key == key)
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=sub.task_id,
                        worker_id=uuid.uuid4(), fence=sub.attempts + 1, tool="echo",
                        status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
    run.decide(Dispatched(att))
    run.decide(Finished(attempt_id=att.id, status="succeeded", output=text,
                        usage={"input_tokens": tokens}))


def test_when_the_budget_cannot_cover_the_rest_retrievals_are_skipped_as_gaps() -> None:
    """After the first wave (500 tokens: the plan, two tasks, two gates), the three tasks left
    would cost about 750 of the 1,000 allowed: the lowest-priority retrieval whose type may be
    skipped is, and the rest runs; the result says it is partial."""
    run = Run(STUDY.replace("        if_failed: gap\n", "        if_failed: gap\n"
                                                       "        if_budget_short: gap\n"))
    run.state = replace(run.state, task=evolve(run.state.task, meta=evolve(
        run.state.task.meta, budget=Budget(tokens=1_000))))
    spend(run, "plan#1", WIDE)
    for name in ("Find A", "Count B"):
        target = by_name(run, name)
        spend(run, target.key, f"{name} found")
        spend(run, judge_of(run, target).key, json.dumps({"score": 0.9}))
    skipped = [s.name for s in run.state.subtasks.values() if s.options.gap]
    assert skipped == ["Find D"]  # a `find` (a `count` or `write` may not be skipped)
    assert by_name(run, "Find D").status is SubtaskStatus.COMPLETED
    assert any("cannot cover the rest of the plan: skipped Find D" in n for n in notices(run))
    assert by_name(run, "Find C").status is SubtaskStatus.QUEUED  # wave 2 goes on
    spend(run, by_name(run, "Find C").key, "C found")
    spend(run, judge_of(run, by_name(run, "Find C")).key, json.dumps({"score": 0.9}))
    write = by_name(run, "Write")
    assert '<gap task="Find D">Not answered: skipped: the task\'s budget' in write.description
    spend(run, write.key, "# Report (partial)")
    assert run.state.task.status is TaskStatus.COMPLETED
    complete = [d for t, d in run.events if t is EventType.TASK_COMPLETE][-1]
    assert (complete["partial"], complete["gaps"]) == (True, ["Find D"])


APPROVED_STUDY = STUDY.replace(
    "  find_min: {type: number, default: 0.7, minimum: 0, maximum: 1}\n",
    "  find_min: {type: number, default: 0.7, minimum: 0, maximum: 1}\n"
    "  approve: {type: boolean, default: false}\n").replace(
    '    schedule: "{schedule}"\n', '    schedule: "{schedule}"\n    approve_plan: "{approve}"\n')


def plan_checkpoint(run: Run) -> CheckpointRecord:
    (cp,) = run.state.checkpoints.values()
    assert cp.reason == "plan"
    return cp


def test_a_plan_waits_for_a_person_who_approves_it() -> None:
    run = Run(APPROVED_STUDY, approve=True)
    run.answer("plan#1", PLAN)
    cp = plan_checkpoint(run)
    assert run.state.task.status is TaskStatus.CHECKPOINT
    assert not any("." in s.key for s in run.state.subtasks.values())  # nothing runs yet
    assert '"type": "count"' in cp.data["question"]  # the plan, to read and edit
    assert "4 task(s) in 3 wave(s)" in cp.data["message"]
    run.decide(CheckpointDecision(cp.id, "approve", None))
    assert run.state.task.status is TaskStatus.IN_PROGRESS
    assert {s.name for s in run.queued()} == {"Find A", "Count B"}


def test_a_person_may_edit_the_plan_and_a_bad_edit_changes_nothing() -> None:
    run = Run(APPROVED_STUDY, approve=True)
    run.answer("plan#1", PLAN)
    cp = plan_checkpoint(run)
    with pytest.raises(InvalidInput) as bad:
        run.decide(CheckpointDecision(cp.id, "answer", None, answer=json.dumps(
            {"subtasks": [{"name": "X", "type": "dance", "description": "x"}]})))
    assert "does not fit" in bad.value.message
    assert plan_checkpoint(run).status == "pending_review"  # still waiting
    mine = {"subtasks": [{"name": "Only this", "type": "find", "description": "mine"},
                         {"name": "Then write", "type": "write", "description": "w",
                          "dependencies": ["Only this"]}]}
    run.decide(CheckpointDecision(cp.id, "answer", None, answer=json.dumps(mine)))
    assert [s.name for s in run.queued()] == ["Only this"]
    assert by_name(run, "Then write").status is SubtaskStatus.PENDING
    assert any("runs the plan a person edited (2 task(s))" in n for n in notices(run))


def test_rejecting_the_plan_cancels_the_task_and_without_the_switch_nothing_waits() -> None:
    run = Run(APPROVED_STUDY, approve=True)
    run.answer("plan#1", PLAN)
    run.decide(CheckpointDecision(plan_checkpoint(run).id, "reject", None, reason="Too broad"))
    assert run.state.task.status is TaskStatus.CANCELLED
    plain = Run(APPROVED_STUDY)  # approve: false by default
    plain.answer("plan#1", PLAN)
    assert not plain.state.checkpoints
    assert {s.name for s in plain.queued()} == {"Find A", "Count B"}


def test_the_task_moves_through_the_seeds_phases_each_said_once() -> None:
    """initializing → planning → planned (waiting for approval) → executing → synthesizing
    (only `synthesizing` types left) → complete, each a `phase` event."""
    run = Run(APPROVED_STUDY.replace("      write: {role: writer}\n",
                                     "      write: {role: writer, phase: synthesizing}\n"),
              approve=True)
    run.answer("plan#1", PLAN)
    run.decide(CheckpointDecision(plan_checkpoint(run).id, "approve", None))
    judged(run, "Find A", "A", 0.9)
    judged(run, "Count B", "B", 0.9)
    judged(run, "Find C", "C", 0.9)
    run.answer(by_name(run, "Write").key, "# Report")
    moves = [(d["previous"], d["phase"]) for t, d in run.events if t is EventType.PHASE]
    assert moves == [("", "initializing"), ("initializing", "planning"),
                     ("planning", "planned"), ("planned", "executing"),
                     ("executing", "synthesizing"), ("synthesizing", "complete")]


def test_a_plan_made_and_started_in_one_decision_was_planned_in_between() -> None:
    run = Run(STUDY)
    run.answer("plan#1", PLAN)
    moves = [(d["previous"], d["phase"]) for t, d in run.events if t is EventType.PHASE]
    assert moves[-2:] == [("planning", "planned"), ("planned", "executing")]


def test_a_workflows_own_event_names_rename_the_events_that_match() -> None:
    """`events:` names Shoal's events for a workflow's clients: the first entry that matches
    wins; `*` asks for a field that is present; `report` adds the report's URL."""
    doc = load_document(STUDY + """\
events:
  started: {event: subtask_update, where: {status: in_progress, plan_type: "*"}}
  done: {event: task_complete, report: true}
""")
    rename = renamer(doc.events, "/api/v1/tasks/t/report")
    typed = {"type": "subtask_update", "data": {"status": "in_progress", "plan_type": "find"}}
    assert rename(typed)["name"] == "started"
    planner = {"type": "subtask_update", "data": {"status": "in_progress"}}
    assert "name" not in rename(planner)  # no plan type: Shoal's name stays
    done = rename({"type": "task_complete", "data": {"status": "completed"}})
    assert (done["name"], done["data"]["report_url"]) == ("done", "/api/v1/tasks/t/report")
    with pytest.raises(DocumentError) as caught:
        load_document(STUDY + "events:\n  started: {event: begun}\n", source="study.yaml")
    assert caught.value.details["field"] == "events.started.event"
