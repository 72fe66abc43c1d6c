"""The quality loop over values: policies, and the workflow's decisions step by step."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from shoal import ids
from shoal.engine import planning, quality
from shoal.engine.inputs import (
    CheckpointDecision,
    CheckpointExpired,
    Dispatched,
    EngineInput,
    Finished,
    Start,
    Unplaceable,
)
from shoal.engine.model import (
    AttemptRecord,
    Deadline,
    SubtaskRecord,
    TaskMeta,
    TaskRecord,
    TaskState,
)
from shoal.engine.step import Context, Decision
from shoal.errors import Conflict, InvalidInput
from shoal.events import EventType
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOOL = "openai_compat"

# ---- pure policies ----------------------------------------------------------------------------


def _fires(frequency: str, total: int) -> list[int]:
    return [done for done in range(1, total + 1)
            if quality.frequency_checkpoint(frequency, done, total)]


def test_frequency_rules_are_the_seeds() -> None:
    """low: before the final one; medium: every 3, at 50-60 %, before the final; high: all."""
    assert _fires("low", 6) == [5]
    assert _fires("low", 1) == []
    assert _fires("medium", 6) == [3, 5, 6]
    assert _fires("medium", 4) == [2, 3]
    assert _fires("medium", 10) == [3, 5, 6, 9]
    assert _fires("high", 4) == [1, 2, 3, 4]
    assert _fires("never heard of it", 4) == []


def test_overall_weighs_only_scored_dimensions() -> None:
    assert quality.overall({"code_quality": 8, "security": 6}) == round(
        (1.5 * 8 + 2 * 6) / 3.5, 2)
    assert quality.overall({"completeness": None, "architecture": 9}) == 9.0
    assert quality.overall({}) is None


def test_review_trigger_and_outcomes() -> None:
    assert quality.review_needed(3, 9.5)
    assert quality.review_needed(1, 7.5)
    assert not quality.review_needed(2, 9.2)
    assert not quality.review_needed(2, None)
    outcome = quality.review_outcome
    assert outcome(8.5, "approved", critical=0, auto_fix_possible=False, cycles_done=1) == \
        "approve"
    assert outcome(6.5, "needs_revision", critical=0, auto_fix_possible=True,
                   cycles_done=1) == "fix"
    assert outcome(6.5, "needs_revision", critical=1, auto_fix_possible=True,
                   cycles_done=1) == "escalate"
    assert outcome(5.5, "needs_revision", critical=0, auto_fix_possible=True,
                   cycles_done=1) == "escalate"
    assert outcome(6.5, "needs_revision", critical=0, auto_fix_possible=True,
                   cycles_done=3) == "escalate"


# ---- the workflow, step by step ---------------------------------------------------------------


def _judge(score: float) -> str:
    return json.dumps({"completeness": {"score": score, "issues": [], "suggestions": []},
                       "architecture": {"score": score, "issues": [], "suggestions": []}})


def _evaluator(score: float) -> str:
    dims = {d: {"score": score, "applicable": True, "issues": [], "suggestions": []}
            for d in ("code_quality", "security", "testability")}
    return json.dumps({"dimensions": dims, "analysers": {}})


def _review(score: float, decision: str, *, fixable: bool = True,
            severity: str = "high") -> str:
    issues = [] if decision == "approved" else [
        {"severity": severity, "file": "a.py", "line": 3, "description": "no validation",
         "suggestion": "validate"}]
    return json.dumps({"review_score": score, "issues": issues, "summary": "s",
                       "decision": decision, "auto_fix_possible": fixable,
                       "auto_fix_instructions": "Add validation."})


class Sim:
    """One task driven through `decide` by hand: dispatch, finish, decide checkpoints."""

    def __init__(self, names: Sequence[str], *, frequency: str = "low", complexity: int = 2,
                 meta: TaskMeta | None = None, chain: bool = True) -> None:
        self.now = NOW
        self.user = uuid.uuid4()
        self.authors = [uuid.uuid4(), uuid.uuid4()]
        task = TaskRecord(id=uuid.uuid4(), user_id=self.user, description="Build it",
                          status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW,
                          checkpoint_frequency=frequency, meta=meta or TaskMeta())
        self.state = TaskState(task=task, subtasks={}, attempts={})
        items = [{"name": n, "description": f"Write {n}.py: code", "tool": TOOL,
                  "complexity": complexity,
                  "dependencies": [i - 1] if chain and i else []}
                 for i, n in enumerate(names)]
        self.events: list[Any] = []
        self.apply(Start(plan=planning.user_plan(items)))

    def apply(self, inp: EngineInput) -> Decision:
        d = decide(self.state, inp, Context(now=self.now))
        self.state = d.state
        self.events.extend(d.events)
        return d

    @property
    def task(self) -> TaskRecord:
        return self.state.task

    def sub(self, name: str) -> SubtaskRecord:
        return next(s for s in self.state.subtasks.values() if s.name == name)

    def queued(self, kind: str | None = None) -> list[SubtaskRecord]:
        return [s for s in self.state.subtasks.values()
                if s.status is SubtaskStatus.QUEUED and (kind is None or s.kind == kind)]

    def finish(self, sub: SubtaskRecord, output: str = "done", *, worker: uuid.UUID | None = None,
               tool: str | None = None, files: Sequence[str] = ()) -> None:
        att = AttemptRecord(
            id=uuid.uuid4(), subtask_id=sub.id, task_id=self.task.id,
            worker_id=worker or self.authors[0], fence=sub.attempts + 1,
            tool=tool or sub.pinned_tool or TOOL, status=AttemptStatus.DISPATCHED,
            dispatched_at=self.now)
        self.apply(Dispatched(att))
        manifest = tuple({"path": f, "size": 1, "sha256": "0" * 64} for f in files)
        self.apply(Finished(att.id, "succeeded", output, files=manifest,
                            usage={"input_tokens": 1, "output_tokens": 1}))

    def produce(self, name: str, *, worker: uuid.UUID | None = None) -> None:
        self.finish(self.sub(name), worker=worker, files=[f"{name}.py"])

    def evaluate(self, name: str, score: float, *, judge: float | None = None) -> None:
        target = self.sub(name)
        for step in self.queued():
            if step.target_id == target.id and step.kind == "evaluate":
                self.finish(step, _evaluator(score), worker=self.authors[1], tool="evaluator")
            elif step.target_id == target.id and step.kind == "judge":
                self.finish(step, _judge(score if judge is None else judge),
                            worker=self.authors[1])

    def review(self, name: str, answer: str) -> SubtaskRecord:
        target = self.sub(name)
        step = next(s for s in self.queued("review") if s.target_id == target.id)
        self.finish(step, answer, worker=self.authors[1])
        return step

    def pending(self) -> list[Any]:
        return list(self.state.checkpoints.values())

    def decide_cp(self, action: str, **kw: Any) -> None:
        cp = self.pending()[0]
        self.apply(CheckpointDecision(cp.id, action, self.user, **kw))  # type: ignore[arg-type]


def test_output_is_verified_before_dependents_run() -> None:
    """A produced subtask waits in `verifying` while evaluate and judge run; then it completes."""
    sim = Sim(["a", "b"])
    sim.produce("a")
    assert sim.sub("a").status is SubtaskStatus.VERIFYING
    assert sim.sub("b").status is SubtaskStatus.PENDING
    kinds = sorted(s.kind for s in sim.queued())
    assert kinds == ["evaluate", "judge"]
    evaluate = sim.queued("evaluate")[0]
    assert evaluate.pinned_tool == "evaluator"
    assert evaluate.options.tool["files"] == ["a.py"]
    sim.evaluate("a", 9.5)
    assert sim.sub("a").status is SubtaskStatus.COMPLETED
    assert sim.sub("a").evaluation is not None
    assert sim.sub("a").evaluation["overall"] == 9.5
    assert sim.sub("b").status is SubtaskStatus.QUEUED
    assert any(e.type is EventType.EVALUATION for e in sim.events)


def test_low_score_opens_a_checkpoint_and_approve_resumes() -> None:
    sim = Sim(["a"])
    sim.produce("a")
    sim.evaluate("a", 5.0)
    assert sim.task.status is TaskStatus.CHECKPOINT
    [cp] = sim.pending()
    assert cp.reason == "low_score"
    assert cp.subtask_id == sim.sub("a").id
    assert any(e.type is EventType.CHECKPOINT_READY for e in sim.events)
    sim.decide_cp("approve")
    assert sim.sub("a").status is SubtaskStatus.COMPLETED
    assert sim.task.status is TaskStatus.COMPLETED
    with pytest.raises(Conflict):
        sim.apply(CheckpointDecision(cp.id, "approve", sim.user))


def test_the_quality_steps_of_subtasks_made_in_one_millisecond_have_keys_of_their_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Subtasks made in one decision have ids that begin alike (the time they were made: their
    first 12 digits): a quality step's key names its target by the random end of its id, so
    the evaluate and judge steps of two such subtasks do not share a key (a task's keys are
    unique in its table)."""
    monkeypatch.setattr(ids, "time", SimpleNamespace(time_ns=lambda: 1_796_000_000_000_000_000))
    sim = Sim(["a", "b"], chain=False)
    assert sim.sub("a").id.hex[:12] == sim.sub("b").id.hex[:12]
    sim.produce("a")
    sim.produce("b")
    steps = [s for s in sim.state.subtasks.values() if s.target_id is not None]
    assert sorted(s.kind for s in steps) == ["evaluate", "evaluate", "judge", "judge"]
    keys = [s.key for s in sim.state.subtasks.values()]
    assert len(set(keys)) == len(keys) == 6


def test_reject_cancels_the_task() -> None:
    sim = Sim(["a", "b"], chain=False)
    sim.produce("a")
    sim.evaluate("a", 4.0)
    d_before = len(sim.events)
    sim.decide_cp("reject", reason="wrong approach")
    assert sim.task.status is TaskStatus.CANCELLED
    assert "wrong approach" in (sim.task.error or "")
    assert all(s.status is not SubtaskStatus.QUEUED for s in sim.state.subtasks.values())
    assert any(e.type is EventType.TASK_CANCELLED for e in sim.events[d_before:])


def test_correct_reruns_with_guidance_and_records_it() -> None:
    sim = Sim(["a"])
    sim.produce("a")
    sim.evaluate("a", 5.0)
    cp = sim.pending()[0]
    d = sim.apply(CheckpointDecision(cp.id, "correct", sim.user, correction_type="bug",
                                     guidance="Handle empty input.", apply_to_future=True))
    fix = next(s for s in sim.queued("correct"))
    assert fix.target_id == sim.sub("a").id
    assert fix.options.correction is not None
    assert fix.options.correction.guidance == "Handle empty input."
    assert fix.options.prefer_worker == str(sim.authors[0])
    assert sim.sub("a").status is SubtaskStatus.CORRECTING
    assert sim.task.status is TaskStatus.IN_PROGRESS
    tables = sorted(r.table for r in d.records)
    assert tables == ["audit_log", "corrections", "guidance"]
    sim.finish(fix, "fixed", files=["a.py"])
    assert sim.sub("a").status is SubtaskStatus.VERIFYING  # evaluated again
    sim.evaluate("a", 9.5)
    assert sim.task.status is TaskStatus.COMPLETED


def test_correct_needs_guidance_and_a_work_subtask() -> None:
    sim = Sim(["a"])
    sim.produce("a")
    sim.evaluate("a", 5.0)
    cp = sim.pending()[0]
    with pytest.raises(InvalidInput):
        sim.apply(CheckpointDecision(cp.id, "correct", sim.user, guidance="  "))
    judge = next(s for s in sim.state.subtasks.values() if s.kind == "judge")
    with pytest.raises(InvalidInput):
        sim.apply(CheckpointDecision(cp.id, "correct", sim.user, subtask_id=judge.id,
                                     guidance="x"))
    assert sim.pending()  # nothing was half-applied


def test_review_fix_correction_then_approval_never_by_the_author() -> None:
    """Fixable issues: a correction on the author's worker, a second review, approval."""
    sim = Sim(["a"], complexity=3)
    author = sim.authors[0]
    sim.produce("a", worker=author)
    sim.evaluate("a", 9.5)
    review = sim.queued("review")[0]
    assert review.options.exclude_workers == (str(author),)
    sim.review("a", _review(6.5, "needs_revision"))
    fix = sim.queued("correct")[0]
    assert fix.options.pinned_worker == str(author)
    assert fix.options.correction is not None
    assert fix.options.correction.issues[0]["description"] == "no validation"
    sim.finish(fix, "fixed", worker=author, files=["a.py"])
    sim.evaluate("a", 9.5)
    second = sim.queued("review")[0]
    assert second.options.cycle == 2
    sim.review("a", _review(9.0, "approved"))
    target = sim.sub("a")
    assert target.status is SubtaskStatus.COMPLETED
    assert target.review_cycles == 2
    assert target.review is not None
    assert target.review["outcome"] == "approve"
    assert sim.task.status is TaskStatus.COMPLETED


def test_review_that_keeps_failing_escalates_after_three_cycles() -> None:
    sim = Sim(["a"], complexity=4)
    sim.produce("a")
    sim.evaluate("a", 9.5)
    for cycle in (1, 2, 3):
        assert not sim.pending()
        sim.review("a", _review(6.5, "needs_revision"))
        if cycle < 3:
            fix = sim.queued("correct")[0]
            sim.finish(fix, "tried", files=["a.py"])
            sim.evaluate("a", 9.5)
    [cp] = sim.pending()
    assert cp.reason == "max_review_cycles"
    assert sim.sub("a").review_cycles == 3
    assert sim.task.status is TaskStatus.CHECKPOINT


def test_critical_review_escalates_at_once() -> None:
    sim = Sim(["a"], complexity=3)
    sim.produce("a")
    sim.evaluate("a", 9.5)
    sim.review("a", _review(3.0, "needs_revision", fixable=False, severity="critical"))
    assert sim.pending()[0].reason == "review_escalation"


@pytest.mark.parametrize(("frequency", "expected"), [
    ("low", [2]), ("medium", [2, 3]), ("high", [1, 2, 3])])
def test_frequency_checkpoints_open_after_exactly_the_named_subtasks(
    frequency: str, expected: list[int]
) -> None:
    sim = Sim(["s1", "s2", "s3"], frequency=frequency)
    opened_after: list[int] = []
    for done, name in enumerate(("s1", "s2", "s3"), start=1):
        sim.produce(name)
        sim.evaluate(name, 9.5)
        if sim.pending():
            assert sim.pending()[0].reason == "frequency"
            opened_after.append(done)
            sim.decide_cp("approve")
    assert opened_after == expected
    assert sim.task.status is TaskStatus.COMPLETED


def test_paused_task_dispatches_nothing() -> None:
    sim = Sim(["a", "b"], chain=False)
    sim.produce("a")
    sim.evaluate("a", 5.0)
    b = sim.sub("b")
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=b.id, task_id=sim.task.id,
                        worker_id=sim.authors[1], fence=1, tool=TOOL,
                        status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
    with pytest.raises(Conflict):
        sim.apply(Dispatched(att))


def test_quality_off_and_echo_skip_the_loop() -> None:
    off = Sim(["a"], meta=TaskMeta(quality=False))
    off.produce("a")
    assert off.task.status is TaskStatus.COMPLETED
    sim = Sim(["a"])
    sim.finish(sim.sub("a"), tool="echo")
    assert sim.task.status is TaskStatus.COMPLETED


def test_no_peer_reviewer_follows_the_policy() -> None:
    sim = Sim(["a"], complexity=3)
    sim.produce("a")
    sim.evaluate("a", 9.5)
    review = sim.queued("review")[0]
    sim.apply(Unplaceable(review.id, peer=True))
    assert sim.sub("a").status is SubtaskStatus.COMPLETED
    assert any(e.type is EventType.NOTICE and "without a peer review" in e.data["message"]
               for e in sim.events)


def test_judge_answer_that_is_not_json_is_repaired_once() -> None:
    sim = Sim(["a"])
    sim.produce("a")
    judge = sim.queued("judge")[0]
    sim.finish(judge, "I think it is great!")
    again = sim.sub(judge.name)
    assert again.status is SubtaskStatus.QUEUED
    assert again.options.repair
    sim.finish(again, "still no JSON")
    assert sim.sub(judge.name).status is SubtaskStatus.COMPLETED
    evaluate = sim.queued("evaluate")[0]
    sim.finish(evaluate, _evaluator(9.0), tool="evaluator")
    assert sim.sub("a").status is SubtaskStatus.COMPLETED  # evaluated on the tools alone


def test_deadline_action_applies_on_expiry() -> None:
    sim = Sim(["a"], meta=TaskMeta(checkpoint_deadline=Deadline(60, "approve")))
    sim.produce("a")
    sim.evaluate("a", 5.0)
    cp = sim.pending()[0]
    assert cp.deadline_at == NOW + timedelta(seconds=60)
    with pytest.raises(Conflict):
        sim.apply(CheckpointExpired(cp.id))
    sim.now = NOW + timedelta(seconds=61)
    sim.apply(CheckpointExpired(cp.id))
    assert sim.task.status is TaskStatus.COMPLETED


def test_correction_that_asks_again_can_be_approved() -> None:
    """A correction whose tool asks for a permission again opens a checkpoint that works."""
    sim = Sim(["a"], meta=TaskMeta(quality=False))
    asked = ({"tool": "run_command", "target": "pytest", "reason": "ask",
              "needs_human": True},)

    def finish_asking(sub: SubtaskRecord) -> None:
        att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=sim.task.id,
                            worker_id=sim.authors[0], fence=sub.attempts + 1, tool=TOOL,
                            status=AttemptStatus.DISPATCHED, dispatched_at=sim.now)
        sim.apply(Dispatched(att))
        sim.apply(Finished(att.id, "succeeded", "could not run", denials=asked))

    finish_asking(sim.sub("a"))
    assert sim.pending()[0].reason == "approval_request"
    sim.decide_cp("approve")
    fix = sim.queued("correct")[0]
    assert fix.options.tool["permissions"]["commands"] == "allow"
    finish_asking(fix)  # asked again
    assert sim.pending()[0].reason == "approval_request"
    sim.decide_cp("approve")
    second = sim.queued("correct")[0]
    sim.finish(second, "ran it")
    assert sim.task.status is TaskStatus.COMPLETED


def test_accepting_again_after_a_correction_opens_no_new_frequency_checkpoint() -> None:
    sim = Sim(["a"], frequency="high")
    sim.produce("a")
    sim.evaluate("a", 9.5)
    cp = sim.pending()[0]
    assert cp.reason == "frequency"
    sim.apply(CheckpointDecision(cp.id, "correct", sim.user, correction_type="style",
                                 guidance="Rename it.", subtask_id=sim.sub("a").id))
    sim.finish(sim.queued("correct")[0], "renamed", files=["a.py"])
    sim.evaluate("a", 9.5)
    assert not sim.pending()
    assert sim.task.status is TaskStatus.COMPLETED
