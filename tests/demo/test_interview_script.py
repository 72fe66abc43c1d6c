"""The demo model's interviewer, through the `proposal` document run by the engine (no I/O) on
requests and answers its script does not know: facts given out of order and several in one
answer, a correction, "I don't know"; it never asks for a fact already known, and the proposal
states every fact it learned."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.demo.interview_script import hear
from shoal.demo.proposal_script import PROGRAM_QUESTION, TIMELINE_QUESTION
from shoal.demo.samples import SAMPLE_ANSWERS, SAMPLES
from shoal.engine.model import StepKind
from shoal.events import EventType
from shoal.states import TaskStatus
from shoal.workflows.blackboard import blackboard
from tests.demo.test_proposal_script import ProposalRun, run_with_demo

MICROPLASTICS = "Help me write a research proposal on microplastics in rivers."
SAMPLES_REQUEST = SAMPLES["proposal"]
CONSTRAINTS_QUESTION = "What constraints (permits, ethics, access, travel) do you have?"


def interviewed(request: str, answers: Sequence[str]) -> tuple[ProposalRun, list[str], str]:
    """The whole proposal with the demo model: the task, the questions, the proposal."""
    run, said, questions = run_with_demo(None, request=request, answers=answers)
    assert run.state.task.status is TaskStatus.COMPLETED, run.state.task.error
    assert said[-1][0] == "writer"
    notices = [str(d["message"]) for t, d in run.events if t is EventType.NOTICE]
    assert not [n for n in notices if "leaves out" in n or "was not passed on" in n], notices
    return run, questions, said[-1][1]


def profile(run: ProposalRun) -> Any:
    return blackboard(run.flow.doc, run.state.subtasks.values())["interview"][-1]["value"]


def asked_about_known(run: ProposalRun) -> list[tuple[str, str]]:
    """Each (question, fact) where the question was about a fact known or not known when it
    was asked: none, for an interviewer that listens."""
    subs = run.state.subtasks
    found = []
    for person in (s for s in subs.values() if s.kind is StepKind.HUMAN):
        [asker] = [subs[d] for d in person.dependencies]
        parsed = asker.output.parsed if asker.output else {}
        facts = parsed.get("facts", {})
        told = {*facts.get("known", {}), *facts.get("unknown", {})}
        found += [(person.description, a) for a in parsed.get("about", []) if a in told]
    return found


def test_the_sample_answers_give_two_questions_and_every_fact_in_the_proposal() -> None:
    run, questions, proposal = interviewed(SAMPLES_REQUEST, SAMPLE_ANSWERS["proposal"])
    assert questions == [PROGRAM_QUESTION, TIMELINE_QUESTION]
    value = profile(run)
    assert (value["academic_program"], value["field_of_study"], value["total_timeline"],
            value["constraints"]) == ("MSc in Urban Planning", "urban climate", "6 months",
                                      ["no travel budget", "only public data"])
    assert value["facts"]["known"]["total_timeline"] == {"value": "6 months", "from": 2}
    assert value["facts"]["missing"] == ["resources"]  # asked once, not told: never invented
    assert "- Field of study: urban climate" in proposal
    assert "- Still missing: resources" in proposal


def test_the_budget_and_the_permit_a_student_mentions_reach_the_proposal() -> None:
    run, questions, proposal = interviewed(MICROPLASTICS, [
        "I'm doing a Master's in Environmental Science",
        "About 6 months; I have a €5,000 budget and need a permit from the water authority "
        "to sample."])
    assert questions == [PROGRAM_QUESTION, TIMELINE_QUESTION]
    value = profile(run)
    assert value["field_of_study"] == "Environmental Science"  # not "budget"
    assert value["resources"] == ["€5,000 budget"]
    assert value["constraints"] == ["need a permit from the water authority to sample"]
    for told in ("Master's in Environmental Science", "Environmental Science", "6 months",
                 "€5,000 budget", "need a permit from the water authority to sample"):
        assert told in proposal
    assert "Still missing" not in proposal


def test_facts_out_of_order_and_several_in_one_answer_are_not_asked_again() -> None:
    run, questions, proposal = interviewed(MICROPLASTICS, [
        "I have 9 months and a €2,000 grant; I'm in a PhD in ecology",
        "I need a permit from the water authority to sample"])
    assert questions == [PROGRAM_QUESTION, CONSTRAINTS_QUESTION]  # only what was missing
    assert asked_about_known(run) == []
    value = profile(run)
    assert (value["academic_program"], value["field_of_study"], value["total_timeline"],
            value["resources"]) == ("PhD in ecology", "ecology", "9 months", ["€2,000 grant"])
    assert {n: f["from"] for n, f in value["facts"]["known"].items()} == {
        "academic_program": 1, "field_of_study": 1, "total_timeline": 1, "resources": 1,
        "constraints": 2}
    assert "€2,000 grant" in proposal
    assert "9 months" in proposal


def test_a_later_answer_corrects_the_timeline_and_the_plan_follows_it() -> None:
    run, questions, proposal = interviewed(
        "A research proposal on urban heat. I have 6 months.",
        ["MSc in Urban Planning, field: urban climate. Sorry, it's 3 years, not 6 months",
         "no travel budget"])
    assert questions[0] == PROGRAM_QUESTION
    assert "How long" not in questions[1]  # the timeline was known: never asked
    assert asked_about_known(run) == []
    value = profile(run)
    assert value["total_timeline"] == "3 years"
    assert value["facts"]["known"]["total_timeline"] == {"value": "3 years", "from": 1}
    assert "- Total timeline: 3 years" in proposal
    assert "6 months" not in proposal
    plan = blackboard(run.flow.doc, run.state.subtasks.values())["data_plan"][-1]["value"]
    assert sum(p["weeks"] for p in plan["timeline_breakdown"]) == 156  # 3 years


def test_i_dont_know_is_recorded_never_asked_again_and_listed_as_missing() -> None:
    run, questions, proposal = interviewed(MICROPLASTICS, ["PhD in hydrology", "I don't know yet"])
    assert questions == [PROGRAM_QUESTION, TIMELINE_QUESTION]  # nothing asked a second time
    value = profile(run)
    assert value["facts"]["unknown"] == {"total_timeline": {"from": 2},
                                         "constraints": {"from": 2}, "resources": {"from": 2}}
    assert value["total_timeline"] == "not stated"
    assert value["facts"]["missing"] == ["total_timeline", "constraints", "resources"]
    assert "- Still missing: total_timeline, constraints, resources" in proposal


def test_a_request_that_says_most_facts_gets_questions_only_for_the_rest() -> None:
    run, questions, _ = interviewed(
        "A proposal on urban heat: I am in a PhD program, I have 9 months, no budget for "
        "sensors.", ["Field of study: climatology", "I can use a lab with two sensors"])
    assert questions == ["What is your field of study?",
                         "What resources (budget, equipment, data) can you use?"]
    value = profile(run)
    assert (value["academic_program"], value["total_timeline"], value["constraints"],
            value["field_of_study"], value["resources"]) == (
        "PhD program", "9 months", ["no budget for sensors"], "climatology",
        ["I can use a lab with two sensors"])
    assert value["facts"]["known"]["academic_program"]["from"] == "request"


def test_the_demo_never_invents_a_fact_nobody_told() -> None:
    heard = hear("Help me write a proposal on coral reefs.", ["hmm", "let me think"],
                 [["academic_program", "field_of_study"], ["total_timeline"]])
    assert (heard.known, heard.unknown) == ({}, {})
