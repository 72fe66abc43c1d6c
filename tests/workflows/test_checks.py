"""`check: citations` on a plan type: once its run has answered (and passed its gate), Shoal's
own check runs (code, pinned to the `citations` tool, told the question's parts); the sentences
it fails go back to the writer once with the reasons; after that the checked report stands, and
the task completes with the figures the check computed."""

from __future__ import annotations

import json

import pytest

from shoal.engine.model import StepKind, SubtaskRecord
from shoal.events import EventType
from shoal.states import SubtaskStatus, TaskStatus
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_interpreter import Run
from tests.workflows.test_questions import ASKED, PLAN, found
from tests.workflows.test_typed_plans import by_name

CHECKED = ASKED.replace("write: {role: writer, writes_result: true}",
                        "write: {role: writer, writes_result: true, check: citations}")


def check_of(run: Run, target: SubtaskRecord) -> SubtaskRecord:
    return next(s for s in run.queued() if s.target_id == target.id and s.kind is StepKind.CHECK)


def verdict(*failed: str, cited: int = 3) -> str:
    return json.dumps({"check": "citations", "cited": cited, "supported": cited - len(failed),
                       "precision": round((cited - len(failed)) / cited, 4), "citations": cited,
                       "resolved": cited, "resolution": 1.0,
                       "failed": [{"sentence": s, "reason": "its quote does not say 2024"}
                                  for s in failed],
                       "removed": [{"sentence": s} for s in failed]})


def test_failed_sentences_go_back_once_then_the_checked_report_stands() -> None:
    run = Run(CHECKED)
    run.answer("plan#1", json.dumps(PLAN))
    run.answer(by_name(run, "Tuning").key, found("gc", "It grows by 10 %."))
    run.answer(by_name(run, "Threads").key, found("threads"))
    writer = by_name(run, "Write")
    run.answer(writer.key, "# Report\n\n- It grew in 2024 [1].")
    assert by_name(run, "Write").status is SubtaskStatus.VERIFYING
    check = check_of(run, writer)
    assert (check.pinned_tool, check.role) == ("citations", "checker")
    told = json.loads(check.description)
    assert (told["file"], told["questions"]["answered"], told["questions"]["of"]) == (
        "plan.md", 1, 3)
    run.answer(check.key, verdict("It grew in 2024 [1]."))
    repair = next(s for s in run.queued() if s.kind is StepKind.CORRECT)
    assert by_name(run, "Write").status is SubtaskStatus.CORRECTING
    assert '- "It grew in 2024 [1].": its quote does not say 2024' in repair.description
    assert "Your previous answer:\n# Report" in repair.description
    run.answer(repair.key, "# Report\n\n- It grew [1].")
    again = check_of(run, writer)  # the repair is checked again, not judged
    run.answer(again.key, verdict("It grew [1].", cited=1))  # still failing: now it stands
    assert run.state.task.status is TaskStatus.COMPLETED
    [done] = [d for t, d in run.events if t is EventType.TASK_COMPLETE]
    assert done["citations"]["precision"] == 0.0
    assert done["citations"]["removed"] == [{"sentence": "It grew [1]."}]
    assert any("removed 1 sentence(s)" in str(d.get("message")) for t, d in run.events
               if t is EventType.NOTICE)


def test_a_clean_report_completes_after_one_check() -> None:
    run = Run(CHECKED)
    run.answer("plan#1", json.dumps(PLAN))
    run.answer(by_name(run, "Tuning").key, found("gc", "It grows by 10 %."))
    run.answer(by_name(run, "Threads").key, found("threads"))
    writer = by_name(run, "Write")
    run.answer(writer.key, "# Report")
    run.answer(check_of(run, writer).key, verdict())
    assert run.state.task.status is TaskStatus.COMPLETED
    assert not any(s.kind is StepKind.CORRECT for s in run.state.subtasks.values())


def test_a_check_needs_a_type_that_writes_the_result() -> None:
    with pytest.raises(DocumentError) as refused:
        load_document(ASKED.replace("find: {role: finder, serves: true, if_failed: gap}",
                                    "find: {role: finder, serves: true, check: citations}"))
    assert "steps.0.types.find.check" in refused.value.message
