"""The demo model's script for the `proposal` workflow: pure calls of `decide_reply`, and the
whole document run by the engine (no I/O) with the demo model answering every run — two
questions to the user, a delegated literature search that cites only what it found, exactly one
refinement, every answer valid against its role's contract, and a proposal with every section."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import jsonschema
import pytest
import yaml

from shoal.demo.fake.literature import CATALOGUE, arxiv_feed
from shoal.demo.fake.openai_chat import decode
from shoal.demo.model import decide_reply
from shoal.demo.proposal_script import (
    MINOR,
    NARROW,
    NO_SOURCES,
    PROGRAM_QUESTION,
    REVISED,
    TIMELINE_QUESTION,
)
from shoal.demo.samples import SAMPLE_ANSWERS, SAMPLES, sample_answer
from shoal.engine.inputs import CheckpointDecision
from shoal.events import EventType
from shoal.retrieval.literature import parse_arxiv
from shoal.states import TaskStatus
from tests.workflows.test_interpreter import Run

PROPOSAL = resources.files("shoal.workflows").joinpath("builtin/proposal.yaml").read_text()
SCHEMAS: dict[str, Any] = {name: role["output"] for name, role in
                           yaml.safe_load(PROPOSAL)["roles"].items() if "output" in role}
REQUEST = SAMPLES["proposal"]
SECTIONS = ("## Profile", "## Problem", "## Objectives", "## Methodology", "## Data Collection",
            "## Timeline", "## References", "## Quality Assessment")
LITERATURE_TOOLS = [
    {"type": "function", "function": {"name": f"literature__{name}", "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in params}}}}
    for name, params in (("search_papers", ("query", "limit", "source")), ("get_paper", ("id",)))]
FOUND = [p.as_json() for p in parse_arxiv(arxiv_feed(list(CATALOGUE[:2])))]


def search_result(papers: Sequence[Mapping[str, Any]] = FOUND) -> str:
    """What `search_papers` answers (`shoal mcp literature`)."""
    return json.dumps({"query": "street trees cool", "papers": list(papers),
                       "unavailable": {}})


def model(role: str, prompt: str, *, tools: bool = False,
          results: Sequence[str] = ()) -> Any:
    """The demo model's reply to `prompt` as the agent loop sends it: its system prompt, the
    prompt, then one tool call and its result per entry of `results`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are Shoal's {role} agent. Role: {role}."},
        {"role": "user", "content": prompt}]
    for n, result in enumerate(results):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{
                          "id": f"c{n}", "type": "function", "function": {
                              "name": "literature__search_papers", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"c{n}", "content": result}]
    body: dict[str, Any] = {"messages": messages}
    if tools:
        body["tools"] = LITERATURE_TOOLS
    return decide_reply(decode(body))


def answered(role: str, prompt: str, **kw: Any) -> Any:
    """The JSON the role answers (no tool call), checked against its contract."""
    reply = model(role, prompt, **kw)
    assert reply.tool_calls == ()
    value = json.loads(reply.text)
    if "ask" not in value:
        jsonschema.validate(value, SCHEMAS[role])
    return value


# ---- the roles, one by one (the interviewer: tests/demo/test_interview_script.py) --------------


def problem_prompt(*, reviewer: Mapping[str, Any] | None = None, feedback: str = "") -> str:
    interview = {"academic_program": "MSc in Urban Planning", "field_of_study": "urban climate",
                 "total_timeline": "6 months", "constraints": ["only public data"]}
    conversation = "" if reviewer is None else (
        "\n\nThe conversation so far:\nYou asked the literature_reviewer agent: papers on x\n"
        f"The literature_reviewer agent answered: {json.dumps(reviewer)}")
    return (f"Proposal role: problem_formulator.\nRequest: {REQUEST}\n\nWhat is known so far:\n"
            f"## interview\n{json.dumps(interview)}\n\nQuality control's feedback to address "
            f"(empty on a first round):\n{feedback}{conversation}\n\nAnswer with only a JSON "
            "value that matches this JSON Schema:\n{}")


def test_the_problem_formulator_delegates_then_cites_only_the_reviewers_papers() -> None:
    assert answered("problem_formulator", problem_prompt()) == {
        "ask": "papers on how street trees cool city neighbourhoods"}
    papers = [{"citation_key": "okafor2021tidal", "title": "Tidal Energy", "year": 2021,
               "url": "http://arxiv.org/abs/2103.01234v1", "relevance": "It measures yield."}]
    problem = answered("problem_formulator",
                       problem_prompt(reviewer={"papers": papers, "searched": True}))
    assert problem["preliminary_literature"] == [
        {"citation_key": "okafor2021tidal", "title": "Tidal Energy", "year": 2021,
         "url": "http://arxiv.org/abs/2103.01234v1", "finding": "It measures yield."}]
    assert "[okafor2021tidal]" in problem["problem_statement"]
    assert "worked_without_sources" not in problem
    alone = answered("problem_formulator", problem_prompt(
        reviewer={"papers": [], "searched": False, "note": "unreachable"}))
    assert (alone["preliminary_literature"], alone["worked_without_sources"]) == ([], True)
    assert not alone["problem_statement"].startswith(REVISED)


def test_a_refinement_round_revises_and_narrows_the_question() -> None:
    feedback = json.dumps({"coherence_score": 6.5, "feasibility_score": 7,
                           "requires_refinement": True, "recommendations": [NARROW]}, indent=1)
    assert answered("problem_formulator", problem_prompt(feedback=feedback)) == {
        "ask": "papers on how street trees cool city neighbourhoods"}  # a new search first
    problem = answered("problem_formulator", problem_prompt(
        feedback=feedback, reviewer={"papers": [], "searched": True}))
    assert problem["problem_statement"].startswith(f"{REVISED} {NARROW}")
    assert problem["main_research_question"].startswith(
        "Limited to two districts and one measurable outcome, ")


def reviewer_prompt() -> str:
    return ("Proposal role: literature_reviewer.\nFind published papers.\n\n"
            "Request: papers on how street trees cool city neighbourhoods\n\n"
            "Answer with only a JSON value that matches this JSON Schema:\n{}")


def test_the_reviewer_searches_when_offered_and_answers_what_it_found() -> None:
    call = model("literature_reviewer", reviewer_prompt(), tools=True)
    assert [(c.name, c.arguments) for c in call.tool_calls] == [
        ("literature__search_papers", {"query": "street trees cool", "limit": 5})]
    found = answered("literature_reviewer", reviewer_prompt(), tools=True,
                     results=[search_result()])
    assert found["searched"] is True
    assert [p["citation_key"] for p in found["papers"]] == [p["citation_key"] for p in FOUND]
    assert found["papers"][0]["url"] == FOUND[0]["url"]
    assert found["papers"][0]["authors"] == ["Mara Okafor", "Lin Chen"]
    none = answered("literature_reviewer", reviewer_prompt(), tools=True,
                    results=[search_result([])])
    assert (none["papers"], none["searched"]) == ([], True)
    assert "found no papers" in none["note"]


@pytest.mark.parametrize("result", [
    json.dumps({"error": "arXiv could not be reached.", "proceed_without_sources": True}),
    "Error: literature__search_papers failed: connection refused"])
def test_the_reviewer_says_it_could_not_search_when_the_service_fails(result: str) -> None:
    found = answered("literature_reviewer", reviewer_prompt(), tools=True, results=[result])
    assert (found["papers"], found["searched"]) == ([], False)
    assert NO_SOURCES in found["note"].lower()


def test_without_the_tool_the_reviewer_answers_no_papers_and_says_why() -> None:
    found = answered("literature_reviewer", reviewer_prompt())
    assert found == {"papers": [], "searched": False,
                     "note": "The literature services could not be reached; proceeding "
                             "without sources."}


def test_sample_answers_repeat_the_last() -> None:
    first, second = SAMPLE_ANSWERS["proposal"]
    assert [sample_answer("proposal", n) for n in range(4)] == [first, second, second, second]
    assert sample_answer("dag", 0)  # a workflow with none scripted still gets an answer


# ---- the whole document, the demo model answering every run ---------------------------------


class ProposalRun(Run):
    """The proposal document on a request (the sample's by default)."""

    def __init__(self, request: str = REQUEST, **parameters: object) -> None:
        super().__init__(PROPOSAL, request=request, **parameters)


def run_with_demo(search: str | None, *, request: str = REQUEST,
                  answers: Sequence[str] = SAMPLE_ANSWERS["proposal"]
                  ) -> tuple[ProposalRun, list[tuple[str, str]], list[str]]:
    """Run the document to its end: the demo model answers each run (the reviewer's search
    answers `search`, or no tool is offered when None), `answers` each question (the last one
    again past its end). The task, every (role, answer) and the questions asked."""
    run = ProposalRun(request)
    said: list[tuple[str, str]] = []
    questions: list[str] = []
    for _ in range(60):
        if run.state.task.status is TaskStatus.AWAITING_INPUT:
            cp = [d for t, d in run.events if t is EventType.CHECKPOINT_READY][-1]
            questions.append(str(cp["question"]))
            run.decide(CheckpointDecision(uuid.UUID(str(cp["checkpoint_id"])), "answer", None,
                                          answer=answers[min(len(questions), len(answers)) - 1]))
            continue
        queued = run.queued()
        if not queued:
            break
        sub = queued[0]
        prompt = run.flow.instructions(run.state.task, sub, ())
        offered = search is not None and sub.role == "literature_reviewer"
        reply = model(sub.role, prompt, tools=offered)
        if reply.tool_calls:
            assert search is not None
            reply = model(sub.role, prompt, tools=True, results=[search])
        assert reply.tool_calls == ()
        said.append((sub.role, reply.text))
        run.answer(sub.key, reply.text)
    return run, said, questions


@pytest.mark.parametrize("search", [search_result(), None], ids=["papers", "no-tool"])
def test_the_demo_runs_the_whole_proposal(search: str | None) -> None:
    run, said, questions = run_with_demo(search)
    assert run.state.task.status is TaskStatus.COMPLETED, run.state.task.error
    assert questions == [PROGRAM_QUESTION, TIMELINE_QUESTION]  # a first one and a follow-up
    for role, text in said:
        value = None if role == "writer" else json.loads(text)
        if role in SCHEMAS and not (isinstance(value, dict) and "ask" in value):
            jsonschema.validate(value, SCHEMAS[role])
    notices = [str(d["message"]) for t, d in run.events if t is EventType.NOTICE]
    assert not [n for n in notices if "leaves out" in n]  # the proposal states every fact
    roles = [role for role, _ in said]
    assert roles.count("quality_controller") == 2  # exactly one refinement
    assert roles.count("literature_reviewer") == 2  # a search in each round
    stages = [d["stage"] for t, d in run.events if t is EventType.STAGE]
    assert stages.count("refinement") == 1
    quality = [json.loads(t) for r, t in said if r == "quality_controller"]
    assert [q["requires_refinement"] for q in quality] == [True, False]
    problems = [json.loads(t) for r, t in said if r == "problem_formulator"
                and "ask" not in json.loads(t)]
    assert [p["problem_statement"].startswith(REVISED) for p in problems] == [False, True]
    data = json.loads(next(t for r, t in said if r == "data_planner"))
    assert sum(p["weeks"] for p in data["timeline_breakdown"]) == 26  # 6 months
    assert data["estimated_sample_size"] == 120
    objectives = json.loads(next(t for r, t in said if r == "objectives_writer"))
    assert objectives["specific_objectives"][-1]["by_when"] == "week 26 of 26"
    proposal = said[-1][1]
    assert said[-1][0] == "writer"
    assert proposal.startswith("# ")
    at = [proposal.index(section) for section in SECTIONS]
    assert at == sorted(at)
    assessment = proposal.split("## Quality Assessment", 1)[1]
    assert "Coherence: 8.5/10; feasibility: 8/10." in assessment
    assert f"- {MINOR}" in assessment  # every recommendation of the last check
    cited = problems[-1]["preliminary_literature"]
    if search is None:
        assert (cited, problems[-1]["worked_without_sources"]) == ([], True)
        assert "None: no published sources could be retrieved." in proposal
    else:
        assert [c["citation_key"] for c in cited] == [p["citation_key"] for p in FOUND]
        for paper in FOUND:
            assert f"[{paper['citation_key']}] {paper['title']} ({paper['year']}). " \
                   f"{paper['url']}" in proposal
            assert proposal.count(f"[{paper['citation_key']}]") >= 2  # cited, and listed
