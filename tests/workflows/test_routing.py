"""A `route` step, run by the engine with no I/O (seed 001's supervisor): the router picks the
next specialist after each one, and the engine holds it to the plan, the declared order, no
repeats and the hop cap, falling back (and saying why) when the router's answer breaks them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from shoal.engine.inputs import Dispatched, Finished
from shoal.engine.model import AttemptRecord
from shoal.events import EventType
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import routing
from shoal.workflows.blackboard import blackboard
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import NOW, Run

SUPERVISOR = (Path(__file__).parents[2] / "src/shoal/workflows/builtin/supervisor.yaml"
              ).read_text()
RESTAURANT = json.dumps({"agents": ["googlemap", "calendar", "telephone"]})


def nxt(name: str) -> str:
    return json.dumps({"next": name, "reason": "because"})


def decisions(run: Run) -> list[dict[str, object]]:
    return [d for t, d in run.events if t is EventType.ROUTE_DECISION]


def fail(run: Run, key: str) -> None:
    """Fail the run `key` until its retries are spent."""
    while True:
        sub = next((s for s in run.queued() if s.key == key), None)
        if sub is None:
            return
        att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=sub.task_id,
                            worker_id=uuid.uuid4(), fence=sub.attempts + 1, tool="echo",
                            status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
        run.decide(Dispatched(att))
        run.decide(Finished(attempt_id=att.id, status="failed", error="no network"))


def test_the_restaurant_request_visits_maps_calendar_telephone_then_summarizes() -> None:
    run = Run(SUPERVISOR)
    run.answer("plan#1", RESTAURANT)
    router = run.queued()[0]
    assert router.key == "route#1"
    assert "Allowed next: googlemap, summarize" in router.description
    assert "Already ran: (nothing has run yet)" in router.description
    run.answer("route#1", nxt("googlemap"))
    run.answer("googlemap#1", "Saffron 46, phone +886 2 8101 8846")
    second = run.queued()[0]
    assert second.key == "route#2"
    assert "Already ran: googlemap" in second.description
    assert "+886 2 8101 8846" in second.description  # agent_outputs reach the router
    run.answer("route#2", nxt("calendar"))
    calendar = run.queued()[0]
    assert "+886 2 8101 8846" in calendar.description  # and the specialists
    run.answer("calendar#1", "Added dinner tomorrow 19:00")
    run.answer("route#3", nxt("telephone"))
    run.answer("telephone#1", "Booked")
    # Nothing planned is left: the engine goes to summarize without asking the router.
    assert run.keys() == ["summarize#1"]
    run.answer("summarize#1", "# Booked\nDinner at Saffron 46.")
    assert run.state.task.status is TaskStatus.COMPLETED
    assert [(d["next"], d["by"]) for d in decisions(run)] == [
        ("googlemap", "router"), ("calendar", "router"), ("telephone", "router"),
        ("summarize", "engine")]
    board = blackboard(run.flow.doc, run.state.subtasks.values())
    assert [r["value"]["next"] for r in board["route"]] == ["googlemap", "calendar", "telephone"]
    assert board["summary"][0]["value"].startswith("# Booked")
    assert run.state.task.progress == 100


@pytest.mark.parametrize(("answer", "asked", "why"), [
    (nxt("telephone"), "telephone", "'telephone' must wait for 'googlemap', 'calendar'"),
    (nxt("weather"), "weather", "'weather' is not a step this route may pick"),
    (nxt("research"), "research", "'research' is not in the plan"),
    ("I would call the restaurant first.", None, "the router's answer names no step"),
])
def test_an_answer_that_breaks_a_rule_falls_back_to_the_next_planned_step(
        answer: str, asked: str | None, why: str) -> None:
    run = Run(SUPERVISOR)
    run.answer("plan#1", RESTAURANT)
    run.answer("route#1", answer)
    assert run.keys() == ["googlemap#1"]
    decision = decisions(run)[-1]
    assert decision == decision | {"next": "googlemap", "by": "fallback", "asked": asked,
                                   "reason": why}
    notice = [d["message"] for t, d in run.events if t is EventType.NOTICE][-1]
    assert why in str(notice)
    assert "running 'googlemap'" in str(notice)


def test_a_specialist_named_twice_is_not_run_twice() -> None:
    run = Run(SUPERVISOR)
    run.answer("plan#1", RESTAURANT)
    run.answer("route#1", nxt("googlemap"))
    run.answer("googlemap#1", "found")
    run.answer("route#2", "googlemap")
    assert run.keys() == ["calendar#1"]
    assert decisions(run)[-1]["reason"] == "'googlemap' has run already"


def test_the_router_may_finish_early() -> None:
    run = Run(SUPERVISOR)
    run.answer("plan#1", RESTAURANT)
    run.answer("route#1", nxt("summarize"))
    run.answer("summarize#1", "Nothing to do after all.")
    assert run.state.task.status is TaskStatus.COMPLETED
    assert not any(s.key.startswith(("googlemap", "calendar")) for s in
                   run.state.subtasks.values())


def test_a_router_that_never_finishes_stops_at_the_hop_cap() -> None:
    doc = SUPERVISOR.replace("finish: summarize", "finish: summarize\n    repeatable: [research]")
    run = Run(doc, max_hops=3)
    run.answer("plan#1", json.dumps({"agents": ["research"]}))
    for hop in (1, 2, 3):
        run.answer(f"route#{hop}", nxt("research"))
        run.answer(f"research#{hop}", f"finding {hop}")
    assert run.keys() == ["summarize#1"]
    assert decisions(run)[-1] == decisions(run)[-1] | {
        "next": "summarize", "by": "engine",
        "reason": "the route made its 3 decision(s) (max_hops)"}
    assert len([s for s in run.state.subtasks.values() if s.key.startswith("route#")]) == 3


def test_a_failed_specialist_skips_those_that_require_it_and_the_route_goes_on() -> None:
    run = Run(SUPERVISOR)
    run.answer("plan#1", json.dumps({"agents": ["googlemap", "calendar", "telephone",
                                                "research"]}))
    run.answer("route#1", nxt("googlemap"))
    fail(run, "googlemap#1")
    assert run.state.task.status.value == "in_progress"
    notice = [str(d["message"]) for t, d in run.events if t is EventType.NOTICE][-1]
    assert "'calendar' requires 'googlemap', which failed" in notice
    assert "'telephone' requires 'googlemap', which failed" in notice
    router = run.queued()[0]
    assert "Allowed next: research, summarize" in router.description
    run.answer("route#2", nxt("telephone"))  # skipped: the engine says so and falls back
    assert decisions(run)[-1]["reason"] == "'telephone' requires 'googlemap', which failed"
    run.answer("research#1", "facts")
    run.answer("summarize#1", "Could not find the place; here are the facts.")
    assert run.state.task.status is TaskStatus.COMPLETED
    failed = [s for s in run.state.subtasks.values() if s.status is SubtaskStatus.FAILED]
    assert [s.key for s in failed] == ["googlemap#1"]


def test_a_router_that_fails_is_replaced_by_the_fallback() -> None:
    run = Run(SUPERVISOR)
    run.answer("plan#1", RESTAURANT)
    fail(run, "route#1")
    assert run.keys() == ["googlemap#1"]
    assert str(decisions(run)[-1]["reason"]).startswith("the router failed")


def test_a_plan_may_be_a_mapping_of_flags() -> None:
    route = load_document(SUPERVISOR).steps[1]
    plan = {"use_googlemap": True, "use_calendar": False, "use_research": True, "x": True}
    assert routing.planned_choices(route, plan) == ("googlemap", "research")
    assert routing.planned_choices(route, ["Telephone", "nope", "telephone"]) == ("telephone",)


@pytest.mark.parametrize(("change", "at", "problem"), [
    (("    finish: summarize\n", ""), "  - id: route", "a route step needs finish"),
    (("{id: calendar, kind: agent, role: calendar}",
      "{id: calendar, kind: agent, role: calendar, after: [plan]}"), "{id: calendar,",
     "runs when route 'route' picks it: remove after"),
    (("requires: {calendar: [googlemap]", "requires: {calendar: [weather]"), "requires:",
     "'weather' is not one of the choices"),
    (("requires: {calendar: [googlemap]", "requires: {calendar: [telephone]"), "requires:",
     "the requirements form a cycle"),
    (('max_hops: "{max_hops}"', "max_hops: 0"), "max_hops: 0", "a route's max_hops is 1 to 100"),
    (("router:\n    prompt: |", "router:\n    output: {type: object}\n    prompt: |"),
     "    role: router", "give it no output"),
])
def test_route_rules_that_cannot_hold_are_refused_with_the_line(
        change: tuple[str, str], at: str, problem: str) -> None:
    assert change[0] in SUPERVISOR
    text = SUPERVISOR.replace(*change, 1)
    with pytest.raises(DocumentError) as caught:
        load_document(text, source="supervisor.yaml")
    assert problem in caught.value.message
    line = next(n for n, t in enumerate(text.splitlines(), start=1) if at in t)
    assert caught.value.details["line"] == line
