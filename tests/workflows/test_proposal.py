"""The `proposal` document (seed 003), run by the engine with no I/O: a step that asks (a
person, at most `max` times; or another role, as its own subtask), `{context}` with every earlier
output, a refinement loop through a declared stage that stops at its cap, the stage machine, the
message log, and what the document check refuses (with the line)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from importlib import resources
from typing import Any

import pytest

from shoal.engine.inputs import CheckpointDecision, CheckpointExpired
from shoal.engine.model import Deadline, StepKind, TaskMeta
from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus
from shoal.workflows import messages
from tests.workflows.test_document import refusal
from tests.workflows.test_interpreter import Run

PROPOSAL = resources.files("shoal.workflows").joinpath("builtin/proposal.yaml").read_text()
PROFILE = {"academic_program": "MSc Urban Planning", "field_of_study": "urban heat",
           "total_timeline": "6 months", "constraints": ["no travel budget"],
           "known": {name: {"value": value, "from": "request"} for name, value in {  # reported
               "academic_program": "MSc Urban Planning", "field_of_study": "urban heat",
               "total_timeline": "6 months", "constraints": ["no travel budget"]}.items()}}
WRITTEN = ("# A proposal\n\n## Profile\nMSc Urban Planning, in urban heat, over 6 months, with no "
           "travel budget.")  # every fact the interview learned: the proposal must state them
PAPERS = {"papers": [{"citation_key": "Oke1982", "title": "The energetic basis of the urban "
                      "heat island", "year": 1982, "url": "https://doi.org/10.1002/qj.49710845502"}],
          "searched": True}
PROBLEM = {"problem_statement": "Street trees cool streets unevenly across the city's districts.",
           "main_research_question": "Which districts gain most from street trees?",
           "preliminary_literature": [{"citation_key": "Oke1982", "title": "The energetic basis",
                                       "finding": "cities store heat"}]}
OBJECTIVES = {"general_objective": "Measure how street trees cool districts",
              "specific_objectives": [{"objective": "Map canopy", "what": "canopy map",
                                       "measure": "% cover per district", "by_when": "month 2"}],
              "alignment_check": "Both answer the question."}
METHOD = {"recommended_methodology": "A quantitative comparison of districts",
          "methodology_type": "quantitative", "timeline_fit": "fits in 6 months"}
DATA = {"collection_techniques": ["sensor logging"], "estimated_sample_size": 40,
        "timeline_breakdown": [{"phase": "logging", "weeks": 8}]}


def qc(refine: bool, note: str = "Narrow the question to two districts.") -> str:
    return json.dumps({"coherence_score": 6 if refine else 8.5, "feasibility_score": 7,
                       "requires_refinement": refine, "recommendations": [note]})


def started(**parameters: object) -> Run:
    return Run(PROPOSAL, **parameters)


def checkpoints(run: Run) -> list[dict[str, Any]]:
    return [d for t, d in run.events if t is EventType.CHECKPOINT_READY]


def answer(run: Run, text: str | None, action: str = "answer") -> None:
    cp = checkpoints(run)[-1]
    run.decide(CheckpointDecision(uuid.UUID(str(cp["checkpoint_id"])), action, None,
                                  answer=text))


def through_problem(run: Run, *, round_: int = 1) -> None:
    """The problem formulator asks the literature reviewer, then answers."""
    run.answer(f"problem#{round_}.1", json.dumps({"ask": "papers on urban heat and trees"}))
    run.answer(f"problem#{round_}.2", json.dumps(PAPERS))
    run.answer(f"problem#{round_}.3", json.dumps(PROBLEM))


def through_data(run: Run, *, round_: int = 1) -> None:
    suffix = f"#{round_}"
    run.answer("objectives" + suffix, json.dumps(OBJECTIVES))
    run.answer("methodology" + suffix, json.dumps(METHOD))
    run.answer("data_plan" + suffix, json.dumps(DATA))


def test_the_interviewer_asks_waits_without_a_worker_and_hears_the_whole_conversation() -> None:
    run = started()
    assert run.keys() == ["interview#1.1"]
    first = run.queued()[0]
    assert "Request: Bonjour tout" in first.description
    assert '{"ask": "<your question>", "about": ["<fact>"]' in first.description
    assert "(5 left)" in first.description
    assert "Still to learn: academic_program, field_of_study, total_timeline, constraints, " \
           "resources" in first.description
    run.answer("interview#1.1", json.dumps({"ask": "Which program are you in?",
                                            "about": ["academic_program"]}))
    assert run.state.task.status is TaskStatus.AWAITING_INPUT
    [asked] = [s for s in run.state.subtasks.values() if s.kind is StepKind.HUMAN]
    assert (asked.key, asked.status, asked.description) == (
        "interview#1.2", SubtaskStatus.IN_PROGRESS, "Which program are you in?")
    assert run.queued() == []  # nothing for a worker while it waits
    assert checkpoints(run)[-1]["question"] == "Which program are you in?"
    answer(run, "MSc Urban Planning")
    assert run.state.task.status is TaskStatus.IN_PROGRESS
    follow_up = run.queued()[0]
    assert follow_up.key == "interview#1.3"
    assert "You asked the user (about academic_program): Which program are you in?" in \
        follow_up.description
    assert "The user answered (answer 1): MSc Urban Planning" in follow_up.description
    assert "(4 left)" in follow_up.description
    run.answer("interview#1.3", json.dumps({"ask": "How long do you have?",
                                            "about": ["total_timeline"]}))
    answer(run, "Six months")
    run.answer("interview#1.5", json.dumps(PROFILE))
    assert run.keys() == ["problem#1.1"]  # the steps after it waited for the whole conversation
    assert '"field_of_study": "urban heat"' in run.queued()[0].description  # {context}


def test_at_the_cap_the_interviewer_is_told_to_answer_with_what_it_has() -> None:
    run = started(max_questions=1)
    run.answer("interview#1.1", json.dumps({"ask": "Which program?",
                                            "about": ["academic_program"]}))
    answer(run, "MSc")
    last = run.queued()[0]
    assert "You may ask no more questions" in last.description
    assert "say what is still missing" in last.description
    run.answer("interview#1.3", json.dumps({"ask": "And your timeline?"}))  # asks anyway
    again = run.queued()[0]  # not a question now: the contract's repair
    assert (again.key, bool(again.options.repair)) == ("interview#1.3", True)
    run.answer("interview#1.3", json.dumps({**PROFILE, "missing": ["total_timeline detail"]}))
    assert run.keys() == ["problem#1.1"]


def test_no_questions_at_all_when_max_questions_is_zero() -> None:
    run = started(max_questions=0)
    assert "You may ask no more questions" in run.queued()[0].description
    run.answer("interview#1.1", json.dumps(PROFILE))
    assert run.keys() == ["problem#1.1"]


def test_an_unanswered_question_follows_the_deadline_policy() -> None:
    run = Run(PROPOSAL)
    run.state = replace(run.state, task=replace(run.state.task, meta=TaskMeta(
        checkpoint_deadline=Deadline(seconds=60, action="approve"))))
    run.answer("interview#1.1", json.dumps({"ask": "Which program?",
                                            "about": ["academic_program"]}))
    cp = checkpoints(run)[-1]
    assert cp["deadline_at"] is not None
    run.decide(CheckpointExpired(uuid.UUID(str(cp["checkpoint_id"]))))
    assert "The user answered (answer 1): (no answer: the question's deadline passed)" in \
        run.queued()[0].description


def test_delegation_is_its_own_subtask_of_the_other_role() -> None:
    run = started()
    run.answer("interview#1.1", json.dumps(PROFILE))
    run.answer("problem#1.1", json.dumps({"ask": "papers on urban heat and trees"}))
    [search] = run.queued()
    assert (search.key, search.role, search.kind) == ("problem#1.2", "literature_reviewer",
                                                      StepKind.AGENT)
    assert "Request: papers on urban heat and trees" in search.description
    assert [m.name for m in search.options.mcp_servers] == ["literature"]
    assert run.state.task.status is TaskStatus.IN_PROGRESS  # no person is asked
    run.answer("problem#1.2", json.dumps(PAPERS))
    revise = run.queued()[0]
    assert revise.role == "problem_formulator"
    assert "The literature_reviewer agent answered:" in revise.description
    assert "Oke1982" in revise.description
    run.answer("problem#1.3", json.dumps(PROBLEM))
    assert run.keys() == ["objectives#1"]


def test_every_stage_sees_every_earlier_output_and_the_stages_move_in_order() -> None:
    run = started()
    run.answer("interview#1.1", json.dumps(PROFILE))
    through_problem(run)
    through_data(run)
    quality = run.queued()[0]
    for part in ("## interview", "## problem", "## objectives", "## methodology",
                 "## data_plan", "Oke1982", "sensor logging"):
        assert part in quality.description
    run.answer("quality#1", qc(False))
    run.answer("proposal#1", WRITTEN)
    assert run.state.task.status is TaskStatus.COMPLETED
    stages = [d["stage"] for t, d in run.events if t is EventType.STAGE]
    assert stages == ["interviewing", "problem_formulation", "objectives", "methodology",
                      "data_collection", "quality_control", "complete"]


def test_refinement_carries_qc_feedback_and_stops_after_the_third_round() -> None:
    run = started()
    run.answer("interview#1.1", json.dumps(PROFILE))
    for n in range(1, 5):
        if n > 1:
            first = run.queued()[0]
            assert first.key == f"problem#{n}.1"
            assert f"Narrow the question, round {n - 1}" in first.description  # {feedback}
        through_problem(run, round_=n)
        if n > 1:  # every turn of a later round sees the feedback
            turns = [s for s in run.state.subtasks.values()
                     if s.key.startswith(f"problem#{n}.") and s.role == "problem_formulator"]
            assert all(f"round {n - 1}" in s.description for s in turns)
        through_data(run, round_=n)
        run.answer(f"quality#{n}", qc(True, f"Narrow the question, round {n}"))
        if n == 4:
            break
    assert not any(s.key.startswith("problem#5") for s in run.state.subtasks.values())
    assert run.keys() == ["proposal#1"]  # a fifth round never starts: done 3 + the first
    assert sum(1 for s in run.state.subtasks.values() if s.key.startswith("problem#")
               and s.key.endswith(".1")) == 4
    notice = [d for t, d in run.events if t is EventType.NOTICE][-1]
    assert "ran its 3 time(s); going on" in str(notice["message"])
    stages = [d["stage"] for t, d in run.events if t is EventType.STAGE]
    assert stages.count("refinement") == 3
    assert stages[-2:] == ["quality_control", "complete"]
    writer = run.queued()[0]
    assert "Narrow the question, round 4" in writer.description  # QC's open points
    run.answer("proposal#1", WRITTEN)
    assert run.state.task.status is TaskStatus.COMPLETED


def test_a_person_decides_at_the_cap_when_the_user_chose_so() -> None:
    run = started(max_refinements=0, ask_at_refinement_cap=True)
    run.answer("interview#1.1", json.dumps(PROFILE))
    through_problem(run)
    through_data(run)
    run.answer("quality#1", qc(True))
    assert run.state.task.status is TaskStatus.CHECKPOINT
    assert checkpoints(run)[-1]["reason"] == "gate"
    assert [s.key for s in run.queued()] == ["proposal#1"]  # made, but nothing dispatches yet
    answer(run, None, action="approve")
    assert run.state.task.status is TaskStatus.IN_PROGRESS
    run.answer("proposal#1", WRITTEN)
    assert run.state.task.status is TaskStatus.COMPLETED


def test_the_message_log_lists_every_hand_over_in_order() -> None:
    run = started()
    run.answer("interview#1.1", json.dumps({"ask": "Which program?",
                                            "about": ["academic_program"]}))
    answer(run, "MSc")
    run.answer("interview#1.3", json.dumps(PROFILE))
    through_problem(run)
    log = messages.log(run.flow.doc, run.state.task.description, run.state.subtasks.values())
    said = [(m.kind.value, m.sender, m.recipient) for m in log]
    assert said == [
        ("request", "user", "interviewer"),
        ("question", "interviewer", "user"),
        ("answer", "user", "interviewer"),
        ("output", "interviewer", "problem_formulator"),
        ("delegation", "problem_formulator", "literature_reviewer"),
        ("output", "literature_reviewer", "problem_formulator"),
        ("output", "problem_formulator", "objectives_writer"),
    ]
    assert (log[1].content, log[2].content) == ("Which program?", "MSc")
    assert (log[3].entry, log[3].revision) == ("interview", 1)
    events = [m for t, d in run.events if t is EventType.MESSAGE for m in d["messages"]]
    assert [m["id"] for m in events] == [str(m.id) for m in log]  # the same, as events


def test_the_message_log_of_a_refinement_names_the_feedback() -> None:
    run = started(max_refinements=1)
    run.answer("interview#1.1", json.dumps(PROFILE))
    through_problem(run)
    through_data(run)
    run.answer("quality#1", qc(True))
    log = messages.log(run.flow.doc, run.state.task.description, run.state.subtasks.values())
    said = [(m.kind.value, m.sender, m.recipient, m.entry, m.revision) for m in log[-2:]]
    assert said == [("feedback", "quality_controller", "problem_formulator", "quality", 1),
                    ("output", "interviewer", "problem_formulator", "interview", 1)]


def _broken(old: str, new: str) -> str:
    assert old in PROPOSAL
    return PROPOSAL.replace(old, new)


def test_a_transition_the_document_does_not_allow_fails_the_task() -> None:
    # The engine refuses at run time what the check could not see: a loop's way back that the
    # stages allow once the document is loaded, then changed underneath (an older task's
    # document): here refinement may no longer lead to problem formulation.
    run = started(max_refinements=2)
    run.answer("interview#1.1", json.dumps(PROFILE))
    through_problem(run)
    through_data(run)
    stages = run.flow.board.doc.stages
    assert stages is not None
    narrowed = stages.model_copy(update={"allowed": {**stages.allowed, "refinement": []}})
    run.flow.board.doc = run.flow.board.doc.model_copy(update={"stages": narrowed})
    run.answer("quality#1", qc(True))
    assert run.state.task.status is TaskStatus.FAILED
    assert "going back from 'quality_control' through 'refinement' is not allowed" in str(
        run.state.task.error)


@pytest.mark.parametrize(("old", "new", "at", "field", "problem"), [
    ("    via: refinement\n", "", "    to: problem", "loops.0.to",
     "the loop goes from stage 'quality_control' back to 'problem_formulation'"),
    ("    refinement: [problem_formulation]\n", "    refinement: []\n", "    via: refinement",
     "loops.0.via",
     "through 'refinement' back to 'problem_formulation', which the stages do not allow"),
    ("stage: objectives}", "stage: methodology}", "after: [problem], stage: methodology}",
     "steps.2.after.0", "stage 'methodology' may not follow 'problem_formulation'"),
    ("asks: {role: literature_reviewer, max: 2}", "asks: {role: problem_formulator, max: 2}",
     "asks: {role: problem_formulator", "steps.1.asks.role",
     "'problem_formulator' is not another role"),
    ("{id: quality, kind: agent, role: quality_controller,",
     '{id: quality, kind: human, question: "Fine", asks: {max: 1},', "asks: {max: 1},",
     "steps.5.asks", "only an agent step without `quality` may ask"),
])
def test_the_check_refuses_what_would_break_the_stages_or_the_asking(
        old: str, new: str, at: str, field: str, problem: str) -> None:
    details, line = refusal(_broken(old, new), at, "proposal.yaml")
    assert (details["field"], problem in details["problem"]) == (field, True), details
    assert details["line"] == line, details


def test_an_invalid_stage_output_gets_one_repair_then_the_stage_fails_clearly() -> None:
    run = started()
    run.answer("interview#1.1", json.dumps(PROFILE))
    through_problem(run)
    vague = {**OBJECTIVES, "specific_objectives": [{"objective": "Map canopy", "what": "map"}]}
    run.answer("objectives#1", json.dumps(vague))  # not SMART: no measure, no deadline
    [again] = run.queued()
    assert again.key == "objectives#1"
    assert "'measure' is a required property" in str(again.options.repair)
    assert "Your previous answer did not match the required JSON" in run.flow.instructions(
        run.state.task, again, ())
    run.answer("objectives#1", json.dumps(vague))
    assert run.state.task.status is TaskStatus.FAILED
    assert "Step 'objectives' answered twice without matching its contract: " \
           "specific_objectives/0: 'measure' is a required property" in str(run.state.task.error)
    assert not any(s.key.startswith("methodology") for s in run.state.subtasks.values())
