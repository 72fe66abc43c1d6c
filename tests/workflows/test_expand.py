"""An `expand` step, run by the engine with no I/O: its role plans subtasks with dependencies,
the step's `each` role runs every one after those it depends on, and the steps after it see
their answers; a plan that cannot be read falls back as the `dag` workflow's does."""

from __future__ import annotations

import json

import pytest

from shoal.engine import planning
from shoal.engine.inputs import Start
from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus
from shoal.workflows.blackboard import blackboard
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import Run
from tests.workflows.test_routing import fail

BUILD = """\
name: build
version: 1
description: Plan the work, do each part, sum up.
roles:
  planner: {prompt: "Split into parts: {query}"}
  coder: {prompt: "Do this part: {item}"}
  writer: {prompt: "Sum up: {work}"}
steps:
  - {id: work, kind: expand, role: planner, each: coder}
  - {id: summary, kind: agent, role: writer, after: [work]}
"""
PLAN = json.dumps({"subtasks": [
    {"name": "Model", "description": "Write the data model"},
    {"name": "API", "description": "Write the API", "dependencies": ["Model"]},
    {"name": "Docs", "description": "Write the docs"}]})


def statuses(run: Run) -> dict[str, str]:
    return {s.key: s.status.value for s in run.state.subtasks.values()}


def test_planned_parts_run_after_their_dependencies_then_the_next_step_sees_them() -> None:
    run = Run(BUILD)
    planner = run.queued()[0]
    assert planner.key == "work#1"
    assert '"subtasks"' in planner.description  # the plan's format is asked for
    run.answer("work#1", PLAN)
    planned = [d for t, d in run.events if t is EventType.TASK_UPDATE and "plan" in d][-1]
    assert (planned["step"], planned["plan_source"]) == ("work", "planner")
    assert [p["name"] for p in planned["plan"]] == ["Model", "API", "Docs"]
    assert statuses(run) == {"work#1": "completed", "work#1.1": "queued",
                             "work#1.2": "pending", "work#1.3": "queued"}
    parts = {s.key: s for s in run.state.subtasks.values()}
    assert parts["work#1.1"].priority > parts["work#1.3"].priority  # the longer chain first
    api = parts["work#1.2"]
    assert (api.name, api.role) == ("API", "coder")
    assert api.description == "Do this part: API: Write the API"
    run.answer("work#1.1", "model.py")
    assert statuses(run)["work#1.2"] == "queued"  # its dependency is done
    run.answer("work#1.2", "api.py")
    assert run.keys() == ["work#1.3"]  # the next step waits for every part
    run.answer("work#1.3", "README.md")
    summary = run.queued()[0]
    assert summary.key == "summary#1"
    assert '["model.py", "api.py", "README.md"]' in summary.description
    board = blackboard(run.flow.doc, run.state.subtasks.values())
    assert board["work"][0]["value"] == ["model.py", "api.py", "README.md"]
    run.answer("summary#1", "Done")
    assert run.state.task.status is TaskStatus.COMPLETED


def test_a_plan_that_cannot_be_read_falls_back_saying_why() -> None:
    run = Run(BUILD)
    run.answer("work#1", "I would start with the model, then the API.")
    parts = [s for s in run.state.subtasks.values() if s.key.startswith("work#1.")]
    assert parts  # the request, split by its requirements
    assert all(s.status is SubtaskStatus.QUEUED for s in parts)
    notice = [str(d["message"]) for t, d in run.events if t is EventType.NOTICE][-1]
    assert notice.startswith("Step 'work': ")


def test_an_expand_step_needs_the_role_that_runs_each_part() -> None:
    with pytest.raises(DocumentError, match="an expand step needs `each`"):
        load_document(BUILD.replace(", each: coder", ""))


def test_a_planner_that_fails_is_replaced_by_the_fallbacks_at_once() -> None:
    """Not retried, as `dag`'s planner is not: the fallbacks always have a plan."""
    run = Run(BUILD)
    fail(run, "work#1")
    planner = next(s for s in run.state.subtasks.values() if s.key == "work#1")
    assert (planner.status, planner.attempts) == (SubtaskStatus.FAILED, 1)
    assert run.state.task.status.value == "in_progress"
    parts = sorted(s.key for s in run.state.subtasks.values() if s.key.startswith("work#1."))
    assert parts  # the request, split by its requirements
    notices = [str(d["message"]) for t, d in run.events if t is EventType.NOTICE]
    assert any("The planner did not produce a plan (no network). Step 'work' plans without it"
               in n for n in notices), notices
    for key in parts:
        run.answer(key, f"done {key}")
    assert run.keys() == ["summary#1"]  # the round is whole without its plan
    run.answer("summary#1", "Done")
    assert run.state.task.status is TaskStatus.COMPLETED


def test_a_users_own_plan_stands_for_the_planner() -> None:
    plan = planning.user_plan([
        {"name": "Model", "description": "the model", "tool": "echo"},
        {"name": "API", "description": "the API", "dependencies": ["Model"]}])
    run = Run(BUILD, start=Start(plan=plan, options=({"delay": 1}, {})))
    assert statuses(run) == {"work#1.1": "queued", "work#1.2": "pending"}  # no planner run
    model = next(s for s in run.state.subtasks.values() if s.key == "work#1.1")
    assert (model.pinned_tool, model.options.tool) == ("echo", {"delay": 1})
    assert model.description == "Do this part: Model: the model"
    run.answer("work#1.1", "model.py")
    run.answer("work#1.2", "api.py")
    assert run.keys() == ["summary#1"]
    assert '["model.py", "api.py"]' in run.queued()[0].description
