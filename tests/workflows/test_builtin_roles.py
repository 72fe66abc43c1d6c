"""Built-in roles and what `dag` brought to every document, run by the engine with no I/O:
Shoal's own planner and coder prompts written at dispatch, `initializing` while the first step
plans, progress by the runs of a round in flight, and approval requests."""

from __future__ import annotations

import json
import uuid

import pytest

from shoal.engine.inputs import CheckpointDecision, Dispatched, Finished
from shoal.engine.model import AttemptRecord, StepKind, SubtaskRecord
from shoal.events import EventType
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import BUILTIN
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import NOW, Run
from tests.workflows.test_routing import fail

BUILT = """\
name: built
version: 1
description: Shoal's planner and coder, then a writer of our own.
roles:
  planner: {builtin: planner}
  coder: {builtin: coder}
  writer: {prompt: "Sum up: {work}"}
steps:
  - {id: work, kind: expand, role: planner, each: coder}
  - {id: summary, kind: agent, role: writer, after: [work]}
"""
PLAN = json.dumps([
    {"name": "Model", "description": "Write the data model", "dependencies": []},
    {"name": "API", "description": "Write the API", "dependencies": [0]},
    {"name": "Docs", "description": "Write the docs", "dependencies": []}])


def by_key(run: Run, key: str) -> SubtaskRecord:
    return next(s for s in run.state.subtasks.values() if s.key == key)


def test_a_task_initializes_while_its_builtin_planner_plans_then_runs_the_parts() -> None:
    run = Run(BUILT)
    assert run.state.task.status is TaskStatus.INITIALIZING
    planner = by_key(run, "work#1")
    assert (planner.kind, planner.role) == (StepKind.EXPAND, "planner")
    assert planner.description == "Decompose the task into subtasks."
    prompt = run.flow.instructions(run.state.task, planner, ["claude_code", "echo"])
    assert "Bonjour tout" in prompt  # the seed's planner prompt, with the tools
    assert "claude_code" in prompt
    run.answer("work#1", PLAN)
    assert run.state.task.status is TaskStatus.IN_PROGRESS
    api = by_key(run, "work#1.2")
    assert (api.name, api.description, api.kind) == ("API", "Write the API", StepKind.AGENT)


def test_a_builtin_coder_is_told_its_failure_and_the_users_guidance_at_dispatch() -> None:
    run = Run(BUILT)
    run.answer("work#1", PLAN)
    docs = by_key(run, "work#1.3")
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=docs.id, task_id=docs.task_id,
                        worker_id=uuid.uuid4(), fence=1, tool="echo",
                        status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
    run.decide(Dispatched(att))
    run.decide(Finished(attempt_id=att.id, status="failed", error="disk full"))
    prompt = run.flow.instructions(run.state.task, by_key(run, "work#1.3"), ["echo"],
                                   guidance=["Use type hints."])
    assert "Your subtask: Docs\nWrite the docs" in prompt
    assert "A previous attempt failed: disk full" in prompt
    assert prompt.endswith("- Use type hints.")
    writer = run.flow.instructions(run.state.task, by_key(run, "work#1.1"), ["echo"],
                                   guidance=["Use type hints."])
    assert "Your subtask: Model" in writer  # every planned part, the same way


def test_progress_counts_the_runs_of_a_round_in_flight() -> None:
    """Two steps: the parts' round counts by its runs done (1 of 3 is a sixth of the work)."""
    run = Run(BUILT)
    run.answer("work#1", PLAN)
    assert run.state.task.progress == 5  # the plan itself is not the work
    run.answer("work#1.1", "model.py")
    assert run.state.task.progress == 5 + int(90 * (1 / 3) / 2)
    run.answer("work#1.2", "api.py")
    run.answer("work#1.3", "docs.md")
    assert run.state.task.progress == 5 + 45
    updates = [d["progress"] for t, d in run.events if t is EventType.TASK_UPDATE
               and "progress" in d]
    assert updates == sorted(updates)  # never backwards
    run.answer("summary#1", "Done")
    assert (run.state.task.status, run.state.task.progress) == (TaskStatus.COMPLETED, 100)


def test_an_agent_asking_for_what_a_person_decides_opens_a_checkpoint() -> None:
    run = Run(BUILT)
    run.answer("work#1", json.dumps([{"name": "Only", "description": "d"}]))
    run.answer("work#1.1", "only.py")
    summary = by_key(run, "summary#1")
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=summary.id, task_id=summary.task_id,
                        worker_id=uuid.uuid4(), fence=1, tool="echo",
                        status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
    run.decide(Dispatched(att))
    run.decide(Finished(attempt_id=att.id, status="succeeded", output="Needs a shell.",
                        denials=({"tool": "Bash", "target": "make docs", "needs_human": True},)))
    [cp] = run.state.checkpoints.values()
    assert (cp.reason, cp.subtask_id) == ("approval_request", summary.id)
    assert run.state.task.status is TaskStatus.CHECKPOINT
    run.decide(CheckpointDecision(cp.id, "approve", run.state.task.user_id))
    [fix] = [s for s in run.queued() if s.kind is StepKind.CORRECT]
    assert fix.options.tool["permissions"]["commands"] == "allow"
    run.answer(fix.key, "Summed up, docs built.")
    assert by_key(run, "summary#1").status is SubtaskStatus.COMPLETED
    assert run.state.task.status is TaskStatus.COMPLETED


def test_the_dag_document_is_one_expand_step_of_builtin_roles() -> None:
    dag = BUILTIN["dag"]
    assert [(s.id, s.kind.value, s.each, s.quality) for s in dag.steps] == [
        ("planner", "expand", "coder", True)]
    run = Run(BUILTIN["dag"].model_dump_json())
    assert run.state.task.status is TaskStatus.INITIALIZING
    fail(run, "planner#1")  # the fallbacks plan at once
    assert run.state.task.status is TaskStatus.IN_PROGRESS
    assert any(s.key.startswith("planner#1.") for s in run.queued())


@pytest.mark.parametrize(("role", "problem"), [
    ("{builtin: coder, prompt: Hi}", "give either a prompt or a builtin role"),
    ("{tools: [echo]}", "give either a prompt or a builtin role"),
    ("{builtin: coder, output: {type: object}}", "a builtin role answers in its own format"),
    ("{builtin: poet}", "Input should be 'planner' or 'coder'"),
])
def test_a_role_is_a_prompt_or_a_builtin(role: str, problem: str) -> None:
    with pytest.raises(DocumentError, match=problem):
        load_document(BUILT.replace("{builtin: coder}", role))
