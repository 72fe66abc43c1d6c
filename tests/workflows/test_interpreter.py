"""A workflow document, run by the engine with no I/O: runs start when their steps may, prompts
carry the blackboard, loops go back at most their cap, answers are checked against contracts."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shoal.engine import graph
from shoal.engine.inputs import Dispatched, Finished, Start
from shoal.engine.model import AttemptRecord, SubtaskRecord, TaskMeta, TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.errors import InvalidInput
from shoal.events import EventType
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import Insert, with_inserted
from shoal.workflows.blackboard import blackboard
from shoal.workflows.document import DocStepKind
from shoal.workflows.interpreter import DocumentWorkflow
from shoal.workflows.loading import load_document
from tests.workflows.test_document import TRANSLATE

NOW = datetime(2026, 11, 25, 8, 0, tzinfo=UTC)
APPROVED = json.dumps({"verdict": "APPROVED"})
REVISE = json.dumps({"verdict": "NEEDS_REVISION", "feedback": "Too literal in line 2."})


class Run:
    """One task of the translate document, decided input by input."""

    def __init__(self, document: str = TRANSLATE, *, skip: frozenset[str] = frozenset(),
                 start: Start | None = None, request: str = "Bonjour tout",
                 **parameters: object) -> None:
        self.flow = DocumentWorkflow(load_document(document))
        task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description=request,
                          status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW,
                          workflow="translate", meta=TaskMeta(parameters=parameters, skip=skip))
        self.state = TaskState(task=task, subtasks={}, attempts={})
        self.events: list[tuple[EventType, dict[str, object]]] = []
        self.decide(start or Start())

    def decide(self, inp: object) -> None:
        decision = graph.decide(self.flow, self.state, inp, Context(now=NOW))  # type: ignore[arg-type]
        self.state = decision.state
        self.events += [(e.type, dict(e.data)) for e in decision.events]

    def queued(self) -> list[SubtaskRecord]:
        return [s for s in self.state.subtasks.values() if s.status is SubtaskStatus.QUEUED]

    def answer(self, key: str, text: str) -> SubtaskRecord:
        """Run the queued run `key` and finish it with `text`."""
        sub = next(s for s in self.queued() if s.key == key)
        att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=sub.task_id,
                            worker_id=uuid.uuid4(), fence=sub.attempts + 1, tool="echo",
                            status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
        self.decide(Dispatched(att))
        self.decide(Finished(attempt_id=att.id, status="succeeded", output=text))
        return self.state.subtasks[sub.id]

    def keys(self) -> list[str]:
        return [s.key for s in self.queued()]


def test_every_step_kind_a_document_may_use_has_its_handler() -> None:
    """The interpreter looks every `DocStepKind` up in its registry: none is left out."""
    assert set(DocumentWorkflow(load_document(TRANSLATE)).handlers) == set(DocStepKind)


def test_a_revision_round_carries_the_critics_feedback_then_polishes() -> None:
    run = Run()
    assert run.keys() == ["translate#1"]
    first = run.queued()[0]
    assert "Translate into French" in first.description
    assert "Bonjour tout" in first.description
    run.answer("translate#1", "Hello all")
    critique = run.queued()[0]
    assert critique.key == "critique#1"
    assert "Critique this translation: Hello all" in critique.description
    assert '"NEEDS_REVISION"' in critique.description  # the contract is in the prompt
    run.answer("critique#1", REVISE)
    again = run.queued()
    assert [s.key for s in again] == ["translate#2"]
    assert "Too literal in line 2." in again[0].description  # the feedback, carried
    run.answer("translate#2", "Hello everyone")
    run.answer("critique#2", APPROVED)
    polish = run.queued()
    assert [s.key for s in polish] == ["polish#1"]
    assert "Polish Hello everyone" in polish[0].description  # the latest revision
    run.answer("polish#1", "Hello, everyone.")
    assert run.state.task.status is TaskStatus.COMPLETED
    complete = [d for t, d in run.events if t is EventType.TASK_COMPLETE][-1]
    assert complete["state"] == {"draft": 2, "feedback": 2, "final_report": 1}


def test_with_no_rounds_allowed_the_first_review_is_the_last() -> None:
    run = Run(max_rounds=0)
    run.answer("translate#1", "Hello all")
    run.answer("critique#1", REVISE)
    assert run.keys() == ["polish#1"]
    notices = [d["message"] for t, d in run.events if t is EventType.NOTICE]
    assert any("ran its 0 time(s)" in str(m) for m in notices)


def test_the_cap_stops_a_critic_that_never_approves() -> None:
    run = Run(max_rounds=2)
    for number in (1, 2, 3):
        run.answer(f"translate#{number}", f"draft {number}")
        run.answer(f"critique#{number}", REVISE)
    assert run.keys() == ["polish#1"]


def test_an_answer_off_its_contract_is_sent_back_once_then_fails_the_task() -> None:
    run = Run()
    run.answer("translate#1", "Hello all")
    run.answer("critique#1", "Looks fine to me!")
    again = run.queued()
    assert [s.key for s in again] == ["critique#1"]
    assert again[0].options.repair
    instructions = run.flow.instructions(run.state.task, again[0], [])
    assert "did not match the required JSON" in instructions
    run.answer("critique#1", json.dumps({"verdict": "MAYBE"}))
    assert run.state.task.status is TaskStatus.FAILED
    assert "verdict" in (run.state.task.error or "")


def test_a_repaired_answer_is_taken() -> None:
    run = Run()
    run.answer("translate#1", "Hello all")
    run.answer("critique#1", "no JSON here")
    run.answer("critique#1", f"Sure:\n```json\n{APPROVED}\n```")
    assert run.keys() == ["polish#1"]


def test_progress_follows_the_steps_done_and_never_goes_back() -> None:
    run = Run(max_rounds=1)
    seen = [run.state.task.progress]
    for key, text in (("translate#1", "a"), ("critique#1", REVISE), ("translate#2", "b"),
                      ("critique#2", APPROVED)):
        run.answer(key, text)
        seen.append(run.state.task.progress)
    assert seen == sorted(seen)
    assert seen == [5, 35, 65, 65, 65]
    run.answer("polish#1", "c")
    assert run.state.task.progress == 100


PIPELINE = (Path(__file__).parents[2] / "src/shoal/workflows/builtin/pipeline.yaml").read_text()


def test_a_map_step_fans_out_one_run_per_item_and_joins_them() -> None:
    run = Run(PIPELINE)
    run.answer("plan#1", json.dumps({"sub_questions": ["Why cats?", "How cats?", "Cats now?"]}))
    research = run.queued()
    assert [s.key for s in research] == ["research#1.1", "research#1.2", "research#1.3"]
    assert [s.name for s in research] == ["research 1", "research 2", "research 3"]
    assert "Sub-question: How cats?" in research[1].description
    run.answer("research#1.2", "Purring.")
    run.answer("research#1.1", "Mice.")
    assert run.keys() == ["research#1.3"]  # the writer waits for every item
    run.answer("research#1.3", "Everywhere.")
    write = run.queued()[0]
    assert write.key == "write#1"
    assert '["Mice.", "Purring.", "Everywhere."]' in write.description  # in item order
    run.answer("write#1", "Draft one")
    run.answer("review#1", json.dumps({"verdict": "NEEDS_REVISION", "feedback": "Shorter."}))
    again = run.queued()[0]
    assert again.key == "write#2"
    assert "Shorter." in again.description
    run.answer("write#2", "Draft two")
    run.answer("review#2", json.dumps({"verdict": "APPROVED", "feedback": "Good."}))
    assert run.state.task.status is TaskStatus.COMPLETED
    complete = [d for t, d in run.events if t is EventType.TASK_COMPLETE][-1]
    assert complete["state"] == {"plan": 1, "research": 1, "draft": 2, "review": 2}
    updates = [(d["entry"], d["revision"]) for t, d in run.events
               if t is EventType.STATE_UPDATE]
    assert updates == [("plan", 1), ("research", 1), ("draft", 1), ("review", 1), ("draft", 2),
                       ("review", 2)]
    board = blackboard(run.flow.doc, run.state.subtasks.values())
    assert board["research"][0]["value"] == ["Mice.", "Purring.", "Everywhere."]
    assert [r["value"] for r in board["draft"]] == ["Draft one", "Draft two"]
    assert board["review"][1]["value"] == {"verdict": "APPROVED", "feedback": "Good."}


def test_a_map_over_no_list_fails_the_task_saying_so() -> None:
    doc = PIPELINE.replace("type: array\n          minItems: 1", "type: [array, string]\n"
                           "          minItems: 1")
    run = Run(doc)
    run.answer("plan#1", json.dumps({"sub_questions": "just one"}))
    assert run.state.task.status is TaskStatus.FAILED
    assert "holds no list" in (run.state.task.error or "")
    assert run.queued() == []  # nothing more starts on an ended task


def test_a_skipped_step_never_runs_and_its_dependents_wait_for_what_it_waited_for() -> None:
    run = Run(skip=frozenset({"critique"}))
    run.answer("translate#1", "Hello all")
    polish = run.queued()
    assert [s.key for s in polish] == ["polish#1"]  # after translate, critique being off
    translate = next(s for s in run.state.subtasks.values() if s.key == "translate#1")
    assert polish[0].dependencies == (translate.id,)
    assert "Polish Hello all using " in polish[0].description  # {feedback.feedback}: nothing
    run.answer("polish#1", "Hello, all.")
    assert run.state.task.status is TaskStatus.COMPLETED
    assert not any(s.key.startswith("critique") for s in run.state.subtasks.values())


def test_only_the_run_that_writes_the_result_also_becomes_its_file() -> None:
    run = Run(PIPELINE)
    assert run.queued()[0].options.output_file is None  # the plan
    run.answer("plan#1", json.dumps({"sub_questions": ["Why?"]}))
    run.answer("research#1.1", "Because.")
    write = run.queued()[0]
    assert (write.key, write.options.output_file) == ("write#1", "report.md")
    run.answer("write#1", "# Report")
    assert run.queued()[0].options.output_file is None  # the review answers in JSON


def test_an_inserted_role_runs_after_its_step_and_the_next_steps_see_its_notes() -> None:
    doc = with_inserted(load_document(PIPELINE), [
        Insert(after="write", id="factcheck", prompt="Fact-check this draft: {draft}")])
    run = Run(doc.model_dump_json(by_alias=True))
    run.answer("plan#1", json.dumps({"sub_questions": ["Why?"]}))
    run.answer("research#1.1", "Because.")
    run.answer("write#1", "Cats purr at 25 Hz.")
    check = run.queued()[0]
    assert (check.key, check.description) == ("factcheck#1",
                                              "Fact-check this draft: Cats purr at 25 Hz.")
    run.answer("factcheck#1", "25 Hz is right.")
    review = run.queued()[0]
    assert review.key == "review#1"
    assert "Notes from factcheck (a role the user added):\n25 Hz is right." in review.description
    run.answer("review#1", json.dumps({"verdict": "NEEDS_REVISION", "feedback": "Shorter."}))
    assert run.keys() == ["write#2"]  # the loop still goes back to the writer
    run.answer("write#2", "Cats purr.")
    assert run.keys() == ["factcheck#2"]  # and the inserted role checks the new draft


@pytest.mark.parametrize(("insert", "field", "words"), [
    (Insert(after="plan", id="x", prompt="Hi"), "insert.0.after", "the steps that do: write"),
    (Insert(after="write", id="draft", prompt="Hi"), "insert.0.id", "already"),
    (Insert(after="write", id="x", prompt="Check {nothing}"), "insert.0.prompt", "{nothing}"),
])
def test_a_role_that_cannot_go_where_it_asks_is_refused_naming_the_field(
        insert: Insert, field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        with_inserted(load_document(PIPELINE), [insert])
    assert caught.value.details["field"] == field
    assert words in caught.value.message
