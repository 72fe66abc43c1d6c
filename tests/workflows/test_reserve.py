"""The budget's reserve, run by the engine with no I/O: what the result's runs will cost is
estimated from what they will read and kept back; runs that may be skipped start one at a time
until one has cost something, then as many as the budget covers beside the reserve, the rest
skipped (lowest priority first); a retry the budget cannot cover is not run; the report is
marked partial; and when the budget runs out before the report is written, Shoal writes it from
what the completed runs found."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from shoal.engine import graph
from shoal.engine.inputs import Dispatched, Finished, UsageReported
from shoal.engine.model import AttemptRecord, Budget, SubtaskRecord, WrittenFile, evolve
from shoal.engine.step import Context, Step
from shoal.events import EventType
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import reserve
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import NOW, Run

DIGEST = """\
name: digest
version: 1
description: Look things up, then write them up, within a budget.
roles:
  planner: {prompt: "Plan the lookups: {query}"}
  finder: {prompt: "Find: {item}"}
  writer: {prompt: "Write the report on {query} from what was found: {item}"}
  judge:
    prompt: "Judge this: {item}"
    output: {type: object, required: [score], properties: {score: {type: number}}}
result_file: report.md
steps:
  - id: plan
    kind: expand
    role: planner
    types:
      find:
        role: finder
        if_budget_short: gap
        gate: {judge: judge, min_score: 0.5, retries: 1, then: gap}
      write: {role: writer, writes_result: true, reserved: true}
"""
PLAN = json.dumps({"subtasks": [
    {"name": "Find A", "type": "find", "description": "a"},
    {"name": "Find B", "type": "find", "description": "b"},
    {"name": "Find C", "type": "find", "description": "c"},
    {"name": "Write", "type": "write", "description": "w",
     "dependencies": ["Find A", "Find B", "Find C"]}]})
GOOD = json.dumps({"score": 0.9})


class Budgeted(Run):
    """A task of the digest document with a token budget, keeping the files the engine
    writes."""

    def __init__(self, tokens: int, document: str = DIGEST) -> None:
        self.files: list[WrittenFile] = []
        super().__init__(document)
        self.state = replace(self.state, task=evolve(self.state.task, meta=evolve(
            self.state.task.meta, budget=Budget(tokens=tokens))))

    def decide(self, inp: object) -> None:
        decision = graph.decide(self.flow, self.state, inp, Context(now=NOW))  # type: ignore[arg-type]
        self.state = decision.state
        self.events += [(e.type, dict(e.data)) for e in decision.events]
        self.files += decision.files

    def spend(self, name: str, text: str, tokens: int, *, judge: bool = False) -> None:
        """Run the queued run `name` (or its gate's judge) and finish it with `text`, having
        read `tokens` tokens and written a tenth as many."""
        sub = self.named(name)
        if judge:
            sub = next(s for s in self.queued() if s.target_id == sub.id)
        att = self.dispatch(sub)
        self.decide(Finished(attempt_id=att.id, status="succeeded", output=text, usage={
            "input_tokens": tokens, "output_tokens": tokens // 10}))

    def dispatch(self, sub: SubtaskRecord) -> AttemptRecord:
        assert sub.status is SubtaskStatus.QUEUED, (sub.name, sub.status)
        att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=sub.task_id,
                            worker_id=uuid.uuid4(), fence=sub.attempts + 1, tool="echo",
                            status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
        self.decide(Dispatched(att))
        return att

    def named(self, name: str) -> SubtaskRecord:
        return next(s for s in self.state.subtasks.values() if s.name == name)

    def found(self, name: str, text: str, tokens: int = 1_000) -> None:
        """`name` answers `text` and its gate passes it."""
        self.spend(name, text, tokens)
        self.spend(name, GOOD, tokens // 4, judge=True)

    def statuses(self) -> dict[str, SubtaskStatus]:
        return {s.name: s.status for s in self.state.subtasks.values() if "." in s.key}

    def notices(self) -> list[str]:
        return [str(d["message"]) for t, d in self.events if t is EventType.NOTICE]


def findings(*texts: str) -> str:
    return json.dumps({"findings": [{"text": t, "citation": f"doc.md, lines {i}-{i + 2}"}
                                    for i, t in enumerate(texts, start=1)]})


def estimate(run: Budgeted) -> reserve.Estimate:
    """The reserve of the run's plan, as `plan_schedule` estimates it now."""
    step = Step(run.state, Context(now=NOW))
    planner = next(s for s in run.state.subtasks.values() if s.key == "plan#1")
    runs = [s for s in run.flow.board.same_round(step, planner) if "." in s.key]
    return run.flow.schedule.estimate(step, runs)


def test_the_reserve_is_what_the_report_will_read_and_write_at_four_characters_a_token(
) -> None:
    """The writer reads what the lookups found: an answer 4,000 characters longer keeps back
    1,000 tokens more to read, and about as many to write."""
    reserves = []
    for length in (400, 4_400):
        run = Budgeted(100_000)
        run.spend("plan", PLAN, 500)
        run.found("Find A", findings("x" * length))
        for name in ("Find B", "Find C"):
            run.found(name, findings(f"{name} found"))
        reserves.append(estimate(run).reserve())
    more = reserves[1] - reserves[0]
    assert 1_800 <= more <= 2_200, reserves


def test_a_lookup_not_done_yet_is_expected_to_answer_as_those_done_did() -> None:
    """Before Find B and Find C run, the writer is expected to read three answers as long
    as Find A's: 4,000 characters more in Find A's keep back about three times as much."""
    reserves = []
    for length in (400, 4_400):
        run = Budgeted(100_000)
        run.spend("plan", PLAN, 500)
        run.found("Find A", findings("x" * length))
        reserves.append(estimate(run).reserve())
    more = reserves[1] - reserves[0]
    assert 3 * 1_800 <= more <= 3 * 2_200, reserves


def test_lookups_start_one_at_a_time_until_one_has_cost_something_then_together() -> None:
    run = Budgeted(100_000)
    run.spend("plan", PLAN, 500)
    assert run.statuses() == {"Find A": SubtaskStatus.QUEUED, "Find B": SubtaskStatus.PENDING,
                              "Find C": SubtaskStatus.PENDING, "Write": SubtaskStatus.PENDING}
    run.spend("Find A", findings("A is 3"), 1_000)
    assert run.statuses()["Find B"] is SubtaskStatus.PENDING  # its gate has not decided yet
    run.spend("Find A", GOOD, 250, judge=True)
    assert run.statuses() == {"Find A": SubtaskStatus.COMPLETED, "Find B": SubtaskStatus.QUEUED,
                              "Find C": SubtaskStatus.QUEUED, "Write": SubtaskStatus.PENDING}


def test_without_a_reserved_type_every_lookup_starts_at_once() -> None:
    run = Budgeted(100_000, DIGEST.replace(", reserved: true", ""))
    run.spend("plan", PLAN, 500)
    assert {n for n, s in run.statuses().items() if s is SubtaskStatus.QUEUED} == {
        "Find A", "Find B", "Find C"}


def test_lookups_the_reserve_leaves_no_room_for_are_skipped_and_the_report_says_so() -> None:
    """Find A cost 1,375 tokens with its gate; with 4,000 allowed, 1,925 spent, and the
    report's reserve, one more lookup fits: Find B runs, Find C (the later of equals) is
    skipped. The report is marked partial, and its Gaps section names Find C."""
    run = Budgeted(4_000)
    run.spend("plan", PLAN, 500)
    run.found("Find A", findings("A is 3"))
    assert run.statuses()["Find C"] is SubtaskStatus.COMPLETED
    assert run.named("Find C").options.gap is not None
    assert run.statuses()["Find B"] is SubtaskStatus.QUEUED
    assert any("skipped Find C" in n for n in run.notices())
    run.found("Find B", findings("B is 5"))
    write = run.named("Write")
    assert '<gap task="Find C">' in write.description
    run.spend("Write", "# The digest\n\nA is 3 [1]. B is 5 [2].\n\n## Gaps\n\n- None.\n", 300)
    assert run.state.task.status is TaskStatus.COMPLETED
    done = [d for t, d in run.events if t is EventType.TASK_COMPLETE][-1]
    assert (done["partial"], done["gaps"]) == (True, ["Find C"])
    [report] = run.files
    assert (report.path, report.subtask_id) == ("report.md", write.id)
    assert report.text.startswith("Partial report: the task's budget could not cover every "
                                  "task of its plan. Skipped: Find C.")
    gaps = report.text.split("## Gaps", 1)[1]
    assert "- Find C: skipped: the task's budget cannot cover it" in gaps
    assert "A is 3 [1]. B is 5 [2]." in report.text  # the writer's report, kept whole


def test_a_report_that_skipped_nothing_is_not_rewritten() -> None:
    run = Budgeted(100_000)
    run.spend("plan", PLAN, 500)
    for name in ("Find A", "Find B", "Find C"):
        run.found(name, findings(f"{name} found"))
    run.spend("Write", "# The digest", 300)
    assert run.state.task.status is TaskStatus.COMPLETED
    assert run.files == []


def test_a_retry_the_budget_cannot_cover_is_not_run_the_lookup_is_a_gap() -> None:
    run = Budgeted(3_000)
    run.spend("plan", PLAN, 500)
    run.spend("Find A", findings("nothing much"), 1_000)
    run.spend("Find A", json.dumps({"score": 0.1}), 250, judge=True)
    find_a = run.named("Find A")
    assert find_a.status is SubtaskStatus.COMPLETED
    assert "its retry was skipped: the task's budget cannot cover it" in str(find_a.options.gap)
    assert not any(s.kind == "correct" for s in run.state.subtasks.values())


def test_a_report_the_budget_cannot_revise_keeps_its_answer_rather_than_failing() -> None:
    gated = DIGEST.replace("write: {role: writer, writes_result: true, reserved: true}",
                           "write: {role: writer, writes_result: true, reserved: true,\n"
                           "              gate: {judge: judge, min_score: 0.5, retries: 2, "
                           "then: fail}}")
    run = Budgeted(4_000, gated)
    run.spend("plan", PLAN, 500)
    run.found("Find A", findings("A is 3"))  # Find B and C are skipped: 1,925 tokens spent
    run.spend("Write", "# The digest", 1_000)
    run.spend("Write", json.dumps({"score": 0.1}), 300, judge=True)  # 3,355: another
    assert not any(s.kind == "correct" for s in run.state.subtasks.values())  # 1,430 won't do
    assert run.state.task.status is TaskStatus.COMPLETED
    assert any("not retried: the task's budget cannot cover a retry" in n
               for n in run.notices())


def test_when_the_budget_runs_out_before_the_report_shoal_writes_it_from_the_findings() -> None:
    """The writer's spending passes the budget: the task ends `budget_exceeded`, and the
    report file is Shoal's own: the question, each finding with its numbered citation, the
    Gaps (skipped, and not finished), the Sources."""
    run = Budgeted(4_000)
    run.spend("plan", PLAN, 500)
    run.found("Find A", findings("A is 3", "A grew"))
    run.found("Find B", findings("B is 5"))
    write = run.named("Write")
    att = run.dispatch(write)
    run.decide(UsageReported(att.id, {"input_tokens": 2_000}))
    assert run.state.task.status is TaskStatus.BUDGET_EXCEEDED
    [report] = run.files
    assert (report.path, report.subtask_id) == ("report.md", write.id)
    text = report.text
    assert text.startswith("Partial report: the task's budget ran out (5300 tokens of 4000) ")
    assert "Shoal wrote this one from what was done, without a model. Skipped: Find C. " \
           "Not finished: Write." in text.split("\n", 1)[0]
    assert f"# {run.state.task.description}" in text
    assert "### Find A\n\n- A is 3 [1]\n- A grew [2]" in text
    assert "### Find B\n\n- B is 5 [1]" in text  # the same citation, the same number
    gaps = text.split("## Gaps", 1)[1].split("## Sources", 1)[0]
    assert "- Find C: skipped: the task's budget cannot cover it" in gaps
    assert "- Write" not in gaps  # it is the report
    sources = text.split("## Sources", 1)[1]
    assert "[1] doc.md, lines 1-3\n[2] doc.md, lines 2-4" in sources
    assert any("written from what was done, by Shoal" in n for n in run.notices())


def test_a_plan_without_a_reserve_writes_nothing_when_its_budget_runs_out() -> None:
    run = Budgeted(2_000, DIGEST.replace(", reserved: true", ""))
    run.spend("plan", PLAN, 500)
    run.spend("Find A", findings("A is 3"), 2_000)
    assert run.state.task.status is TaskStatus.BUDGET_EXCEEDED
    assert run.files == []


@pytest.mark.parametrize(("change", "problem"), [
    ("      write: {role: writer, writes_result: true, reserved: true}\n",
     "give it `reserved` or `if_budget_short: gap`, not both"),
    ("        if_budget_short: gap\n", "nothing can be skipped to keep the reserve"),
])
def test_the_document_check_names_a_reserve_that_cannot_be_kept(change: str,
                                                                problem: str) -> None:
    broken: dict[str, Any] = {
        "      write: {role: writer, writes_result: true, reserved: true}\n":
            "      write: {role: writer, writes_result: true, reserved: true,\n"
            "              if_budget_short: gap}\n",
        "        if_budget_short: gap\n": "",
    }
    with pytest.raises(DocumentError) as caught:
        load_document(DIGEST.replace(change, broken[change]), source="digest.yaml")
    details = caught.value.details
    assert details["field"] == "steps.0.types.write.reserved"
    assert details["line"] is not None
    assert details["line"] > 1
    assert problem in str(details["problem"])
