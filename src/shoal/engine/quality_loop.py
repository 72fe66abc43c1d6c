"""The quality loop and checkpoints, as steps of the task graph (ADR 0008; seed 004 §3.4-3.7).

A workflow attaches a `QualityLoop` to its work steps and hands over when one produced its
output (`verify`), when a quality step (evaluate, judge, review, correct) ended (`step_done`),
and for checkpoint decisions (`handle`). Everything is pure, like the rest of the engine: it
changes the working copy of the task (`step.Step`) and records events, rows and audit entries
for the runtime to commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from shoal.engine import answers, graph, quality
from shoal.engine.inputs import CheckpointDecision, CheckpointExpired, Unplaceable
from shoal.engine.model import (
    QUALITY_KINDS,
    CheckpointRecord,
    StepKind,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
    serving_key,
)
from shoal.engine.options import Correction, StepOptions
from shoal.engine.quality import (
    PENDING_REVIEW,
    TOOLS_WITHOUT_REVIEW,
)
from shoal.engine.step import Step
from shoal.engine.workflow import Decided, Workflow
from shoal.errors import Conflict, InvalidInput
from shoal.events import EventType
from shoal.states import TERMINAL_SUBTASK, TERMINAL_TASK, SubtaskStatus, transition


def quality_on(task: TaskRecord, sub: SubtaskRecord) -> bool:
    """Whether `sub`'s output goes through evaluation and review."""
    return (task.meta.quality and sub.kind is StepKind.AGENT
            and (sub.assigned_tool or "") not in TOOLS_WITHOUT_REVIEW)


def _targets(step: Step, sub: SubtaskRecord) -> SubtaskRecord | None:
    return step.subtasks.get(sub.target_id) if sub.target_id else None


def parsed_answer(step: Step, sub: SubtaskRecord, text: str,
                  output: StepOutput) -> StepOutput | None:
    """`output` with a judge's or reviewer's JSON answer, checked, as `parsed`.

    An answer that is not valid JSON is sent back once with the parse error (the repair
    retry); if the repaired answer fails too, `parsed` is None. None when requeued.
    """
    try:
        if sub.kind is StepKind.JUDGE:
            parsed = _judge_dict(answers.parse_judge(text))
        else:
            parsed = _review_dict(answers.parse_review(text))
    except answers.AnswerError as exc:
        if sub.options.repair:
            return replace(output, answers=True, parsed=None, parse_error=exc.message)
        sub = step.set_subtask(
            sub, status=transition(sub.status, SubtaskStatus.QUEUED), current_attempt_id=None,
            options=replace(sub.options, repair=exc.message), error=exc.message)
        graph.emit_subtask(step, sub, repair=True)
        return None
    return replace(output, answers=True, parsed=parsed)


def _judge_dict(result: answers.JudgeResult) -> dict[str, Any]:
    return {name: {"score": dim.score, "issues": list(dim.issues),
                   "suggestions": list(dim.suggestions)}
            for name, dim in (("completeness", result.completeness),
                              ("architecture", result.architecture))}


def _review_dict(result: answers.ReviewResult) -> dict[str, Any]:
    return {"score": result.score, "decision": result.decision, "summary": result.summary,
            "auto_fix_possible": result.auto_fix_possible,
            "auto_fix_instructions": result.auto_fix_instructions,
            "severity_counts": dict(result.severity_counts()),
            "issues": [{"severity": i.severity, "file": i.file, "line": i.line,
                        "description": i.description, "suggestion": i.suggestion}
                       for i in result.issues]}


def quality_output(step: Step, sub: SubtaskRecord, text: str,
                   output: StepOutput) -> StepOutput | None:
    """A quality step's output with its answer read (a judge's or reviewer's JSON, the
    evaluator's report); None when a judge or reviewer was asked once more to repair it."""
    if sub.kind in (StepKind.JUDGE, StepKind.REVIEW):
        return parsed_answer(step, sub, text, output)
    if sub.kind is StepKind.EVALUATE:
        return replace(output, answers=True, parsed=evaluator_answer(text))
    return output


def evaluator_answer(text: str) -> dict[str, Any] | None:
    value = answers.extract_json(text)
    if isinstance(value, dict) and isinstance(value.get("dimensions"), dict):
        return dict(value["dimensions"])
    return None


def _round_of(step: Step, target: SubtaskRecord, kind: StepKind) -> int:
    return sum(1 for s in step.subtasks.values() if s.target_id == target.id and s.kind == kind)


def _quality_step(step: Step, target: SubtaskRecord, kind: StepKind, *,
                  options: StepOptions | None = None, **fields: Any) -> SubtaskRecord:
    number = _round_of(step, target, kind) + 1
    names = {StepKind.EVALUATE: "Evaluate", StepKind.JUDGE: "Judge", StepKind.REVIEW: "Review",
             StepKind.CORRECT: "Fix"}
    options = replace(options or StepOptions(), round=number)
    sub = SubtaskRecord(
        id=step.ctx.new_ordered_id(), task_id=step.task.id,
        key=serving_key(kind, number, target),
        name=f"{names[kind]}: {target.name}"[:255], status=SubtaskStatus.QUEUED,
        created_at=step.ctx.now, dependencies=(target.id,), target_id=target.id,
        priority=target.priority + 0.5, kind=kind, options=options, **fields)
    step.add_subtask(sub)
    graph.emit_subtask(step, sub)
    return sub


def verify(step: Step, target: SubtaskRecord) -> None:
    """Queue the evaluation of `target`'s output: the evaluator tool and the judge."""
    files = [f.path for f in target.output.files] if target.output is not None else []
    if files:
        _quality_step(step, target, StepKind.EVALUATE, role="evaluator", pinned_tool="evaluator",
                      complexity=1, description=f"Evaluate the files of '{target.name}'.",
                      options=StepOptions(tool={"files": files}))
    _quality_step(step, target, StepKind.JUDGE, role="judge", complexity=2,
                  recommended_tool=target.assigned_tool,
                  description=f"Score how complete and well-built '{target.name}' is.")


def _round(sub: SubtaskRecord) -> int:
    return sub.options.round or 0


def _add_review(step: Step, target: SubtaskRecord) -> None:
    author = (str(target.assigned_worker),) if target.assigned_worker else ()
    _quality_step(step, target, StepKind.REVIEW, role="reviewer", complexity=2,
                  recommended_tool=target.assigned_tool,
                  description=f"Review the work of '{target.name}'.",
                  options=StepOptions(exclude_workers=author, cycle=target.review_cycles + 1))


def _add_correction(step: Step, target: SubtaskRecord, *, source: str,
                    issues: tuple[Mapping[str, Any], ...],
                    instructions: str = "", guidance: str = "", correction_type: str = "",
                    reference_files: tuple[str, ...] = (), pin_worker: bool) -> SubtaskRecord:
    """Queue a correction of `target` (its files go along) and mark it `correcting`."""
    correction = Correction(
        source=source, issues=issues, instructions=instructions, guidance=guidance,
        correction_type=correction_type, reference_files=reference_files,
        previous_output=_text(target)[:4000])
    author = str(target.assigned_worker) if target.assigned_worker is not None else None
    options = StepOptions(correction=correction, pinned_worker=author if pin_worker else None,
                          prefer_worker=None if pin_worker else author)
    fix = _quality_step(step, target, StepKind.CORRECT, role="coder", complexity=target.complexity,
                        pinned_tool=target.assigned_tool, description=target.description,
                        options=options)
    step.set_subtask(target, status=transition(target.status, SubtaskStatus.CORRECTING))
    graph.emit_subtask(step, step.subtasks[target.id])
    return fix


_EDIT_TOOLS = frozenset({"write_file", "Write", "Edit", "MultiEdit", "NotebookEdit", "replace",
                         "edit", "apply_patch"})


def approval_request(step: Step, sub: SubtaskRecord, output: StepOutput) -> None:
    """The agent asked for something the policy says a person decides
    (`output.approval_requests`): pause and ask."""
    asked = output.approval_requests
    target = _targets(step, sub) if sub.kind is StepKind.CORRECT else sub
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.COMPLETED)
                           if sub.kind is StepKind.CORRECT else transition(
                               sub.status, SubtaskStatus.VERIFYING),
                           output=output, progress=90 if sub.kind is StepKind.AGENT else 100,
                           completed_at=step.ctx.now if sub.kind is StepKind.CORRECT else None,
                           error=None)
    graph.emit_subtask(step, sub)
    if target is None:
        return
    if sub.kind is StepKind.CORRECT:  # the correction itself asked again: its target waits for it
        target = step.set_subtask(
            target, status=transition(target.status, SubtaskStatus.VERIFYING),
            output=replace(target.output or StepOutput(), approval_requests=asked))
        graph.emit_subtask(step, target)
    listed = "; ".join(f"{d.get('tool')} {str(d.get('target'))[:120]}" for d in asked[:5])
    open_checkpoint(step, "approval_request", target,
                     message=f"'{target.name}' asked to do what the task's policy leaves to a "
                             f"person: {listed}. Approve to let it run again with that "
                             "allowed.")


def _granted(target: SubtaskRecord, base: Mapping[str, Any]) -> dict[str, str]:
    """The permissions of a re-run after a person approved what the agent asked for."""
    asked = target.output.approval_requests if target.output is not None else ()
    granted = {"edits": "allow", "commands": "allow", **dict(base)}
    for request in asked:
        kind = "edits" if request.get("tool") in _EDIT_TOOLS else "commands"
        granted[kind] = "allow"
    return granted


# ---- checkpoints ----------------------------------------------------------------------------


def open_checkpoint(step: Step, reason: str, target: SubtaskRecord | None, *,
                     message: str) -> None:
    """Pause the task for a person; `target` is the subtask the checkpoint is about."""
    if step.task.status in TERMINAL_TASK:
        return
    deadline = step.task.meta.checkpoint_deadline
    cp = CheckpointRecord(
        id=step.ctx.new_id(), task_id=step.task.id, reason=reason, status=PENDING_REVIEW,
        created_at=step.ctx.now, subtask_id=target.id if target else None,
        data=_checkpoint_data(step, target, message),
        deadline_at=step.ctx.now + timedelta(seconds=deadline.seconds) if deadline else None,
        deadline_action=deadline.action if deadline else None)
    step.add_checkpoint(cp)
    graph.pause(step)
    step.audit(None, "checkpoint_opened", "checkpoint", cp.id, reason=reason,
               subtask_id=str(cp.subtask_id) if cp.subtask_id else None)
    step.emit(EventType.CHECKPOINT_READY, **checkpoint_summary(cp))


def _checkpoint_data(step: Step, target: SubtaskRecord | None, message: str) -> dict[str, Any]:
    agents = [s for s in step.subtasks.values() if s.kind is StepKind.AGENT]
    done = [s for s in agents if s.status is SubtaskStatus.COMPLETED]
    scores = [float(s.evaluation["overall"]) for s in agents
              if s.evaluation and s.evaluation.get("overall") is not None]
    focus = target.evaluation if target and target.evaluation else None
    return {
        "message": message,
        "completed_count": len(done), "total_count": len(agents),
        "subtasks_completed": [
            {"subtask_id": str(s.id), "name": s.name,
             "output": _text(s)[:1000], "files_created": _paths(s)}
            for s in done[-10:]],
        "subtask": ({"subtask_id": str(target.id), "name": target.name,
                     "output": _text(target)[:2000], "files_created": _paths(target),
                     "review": dict(target.review) if target.review else None}
                    if target else None),
        "evaluation_scores": dict(focus["scores"]) if focus else None,
        "overall_score": focus["overall"] if focus else None,
        "average_score": round(sum(scores) / len(scores), 2) if scores else None,
        "next_subtasks": [{"subtask_id": str(s.id), "name": s.name} for s in agents
                          if s.status in (SubtaskStatus.PENDING, SubtaskStatus.QUEUED)][:10],
    }


def _text(sub: SubtaskRecord) -> str:
    return sub.output.text if sub.output is not None else ""


def _paths(sub: SubtaskRecord) -> list[str]:
    return [f.path for f in sub.output.files] if sub.output is not None else []


def checkpoint_summary(cp: CheckpointRecord) -> dict[str, Any]:
    """What a `checkpoint_ready` event says."""
    return {"checkpoint_id": str(cp.id), "reason": cp.reason, "status": cp.status,
            "subtask_id": str(cp.subtask_id) if cp.subtask_id else None,
            "message": cp.data.get("message"),
            "completed_count": cp.data.get("completed_count"),
            "average_score": cp.data.get("average_score"),
            "overall_score": cp.data.get("overall_score"),
            "deadline_at": cp.deadline_at.isoformat() if cp.deadline_at else None}


def _pending(step: Step, checkpoint_id: uuid.UUID) -> CheckpointRecord:
    cp = step.checkpoints.get(checkpoint_id)
    if cp is None:
        raise Conflict("This checkpoint has already been decided.", code="checkpoint_decided",
                       details={"checkpoint_id": str(checkpoint_id)})
    return cp


def _check_correctable(step: Step, inp: CheckpointDecision,
                       target: SubtaskRecord | None) -> None:
    if target is None or target.task_id != step.task.id or target.kind is not StepKind.AGENT:
        raise InvalidInput(
            "Name the subtask to correct (`subtask_id`): one of this task's work subtasks.",
            details={"field": "subtask_id"})
    if target.status not in (SubtaskStatus.COMPLETED, SubtaskStatus.VERIFYING):
        raise Conflict(f"Subtask '{target.name}' is {target.status.value}; only a completed "
                       "or verifying subtask can be corrected.", code="not_correctable",
                       details={"subtask_id": str(target.id), "status": target.status.value})
    if not inp.guidance.strip():
        raise InvalidInput("Say what to change (`guidance`).", details={"field": "guidance"})


def task_scores(step: Step) -> dict[str, Any] | None:
    """The task's mean scores over its evaluated work subtasks."""
    return quality.mean_scores([s.evaluation for s in step.subtasks.values()
                                if s.kind is StepKind.AGENT and s.evaluation])


class QualityLoop:
    """The quality loop a workflow attaches to its work steps: evaluate and judge, maybe a peer
    review, corrections, and the checkpoints they open; `flow.accepted` is told when a work
    step passes."""

    def __init__(self, flow: Workflow) -> None:
        self.flow = flow

    def handle(self, step: Step, inp: Decided) -> None:
        """A checkpoint decision or expiry, or a quality step no connected worker can take."""
        match inp:
            case CheckpointDecision():
                self.decide_checkpoint(step, inp)
            case CheckpointExpired():
                self.checkpoint_expired(step, inp.checkpoint_id)
            case Unplaceable():
                self.unplaceable(step, inp)

    def step_done(self, step: Step, sub: SubtaskRecord) -> None:
        """A quality step ended (completed, or failed for good): move its target on."""
        target = _targets(step, sub)
        if target is None or step.task.status in TERMINAL_TASK:
            return
        if sub.kind in (StepKind.EVALUATE, StepKind.JUDGE):
            self._maybe_evaluated(step, target)
        elif sub.kind is StepKind.REVIEW:
            self._review_done(step, target, sub)
        elif sub.kind is StepKind.CORRECT:
            self._correction_done(step, target, sub)

    def _maybe_evaluated(self, step: Step, target: SubtaskRecord) -> None:
        if target.status is not SubtaskStatus.VERIFYING:
            return
        latest: dict[StepKind, SubtaskRecord] = {}
        for s in step.subtasks.values():
            if s.target_id != target.id or s.kind not in (StepKind.EVALUATE, StepKind.JUDGE):
                continue
            if s.kind not in latest or _round(s) > _round(latest[s.kind]):
                latest[s.kind] = s
        if any(s.status not in TERMINAL_SUBTASK for s in latest.values()):
            return
        parts = {kind: s.output.parsed if s.status is SubtaskStatus.COMPLETED and s.output
                 else None for kind, s in latest.items()}
        evaluation = quality.combine(parts.get(StepKind.EVALUATE), parts.get(StepKind.JUDGE))
        if StepKind.EVALUATE not in latest:
            evaluation["missing"] = [m for m in evaluation["missing"] if m != "tools"]
        evaluation["round"] = max((s.options.round if s.options.round is not None else 1
                                   for s in latest.values()), default=1)
        target = step.set_subtask(target, evaluation=evaluation)
        step.emit(EventType.EVALUATION, subtask_id=str(target.id), name=target.name,
                  overall=evaluation["overall"], scores=evaluation["scores"],
                  missing=evaluation["missing"])
        score = evaluation["overall"]
        if score is not None and score < quality.LOW_SCORE:
            open_checkpoint(step, "low_score", target,
                             message=f"'{target.name}' scored {score:g} (below "
                                     f"{quality.LOW_SCORE:g}).")
        elif target.review_cycles == 0 and quality.review_needed(target.complexity, score):
            _add_review(step, target)
        elif target.review_cycles and target.review and target.review.get("outcome") == "fix":
            _add_review(step, target)  # a correction was made: review it again
        else:
            self._accept(step, target)

    def _review_done(self, step: Step, target: SubtaskRecord, review: SubtaskRecord) -> None:
        if target.status is not SubtaskStatus.VERIFYING:
            return
        output = review.output
        parsed = output.parsed if review.status is SubtaskStatus.COMPLETED and output \
            else None
        if parsed is None:
            why = (output.parse_error if output else None) or review.error or "no answer"
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(target.id),
                      message=f"The peer review of '{target.name}' gave no usable verdict ({why}); "
                              "accepted on its evaluation alone.")
            self._accept(step, target)
            return
        cycles = target.review_cycles + 1
        counts = parsed.get("severity_counts", {})
        outcome = quality.review_outcome(
            float(parsed["score"]), str(parsed["decision"]),
            critical=int(counts.get("critical", 0)),
            auto_fix_possible=bool(parsed.get("auto_fix_possible")), cycles_done=cycles)
        reviewer, author = review.assigned_worker, target.assigned_worker
        record = {**parsed, "cycle": cycles, "outcome": outcome,
                  "reviewer_worker": str(reviewer) if reviewer else None,
                  "author_worker": str(author) if author else None}
        target = step.set_subtask(target, review=record, review_cycles=cycles)
        step.record("reviews", id=step.ctx.new_ordered_id(), task_id=step.task.id,
                    subtask_id=target.id, review_subtask_id=review.id,
                    reviewer_worker_id=review.assigned_worker,
                    author_worker_id=target.assigned_worker, cycle=cycles,
                    score=float(parsed["score"]), decision=str(parsed["decision"]),
                    outcome=outcome, issues=list(parsed.get("issues", [])),
                    severity_counts=dict(counts), created_at=step.ctx.now)
        step.emit(EventType.REVIEW, subtask_id=str(target.id), name=target.name, cycle=cycles,
                  score=parsed["score"], decision=parsed["decision"], outcome=outcome,
                  issues=len(parsed.get("issues", [])))
        if outcome == "approve":
            self._accept(step, target)
        elif outcome == "fix":
            _add_correction(step, target, source="review", issues=tuple(parsed.get("issues", ())),
                            instructions=str(parsed.get("auto_fix_instructions") or ""),
                            pin_worker=True)
        else:
            why = ("max_review_cycles" if cycles >= quality.MAX_REVIEW_CYCLES
                   else "review_escalation")
            open_checkpoint(step, why, target,
                             message=f"The peer review of '{target.name}' (cycle {cycles}) scored "
                                     f"{parsed['score']:g}: {parsed.get('summary', '')}".strip())

    def _correction_done(self, step: Step, target: SubtaskRecord, fix: SubtaskRecord) -> None:
        if target.status is not SubtaskStatus.CORRECTING:
            return
        if fix.status is not SubtaskStatus.COMPLETED:
            open_checkpoint(step, "correction_failed", target,
                             message=f"The correction of '{target.name}' failed: {fix.error}")
            return
        old, new = target.output or StepOutput(), fix.output
        files = {f.path: f for f in old.files}
        files.update({f.path: f for f in new.files} if new is not None else {})
        merged = replace(old, text=new.text if new is not None else old.text,
                         files=tuple(sorted(files.values(), key=lambda f: f.path)),
                         corrected_by=str(fix.id), approval_requests=())
        target = step.set_subtask(target, status=transition(target.status, SubtaskStatus.VERIFYING),
                                  output=merged, completed_at=None, progress=90)
        graph.emit_subtask(step, target)
        if quality_on(step.task, target):
            verify(step, target)
        else:
            self._accept(step, target)

    def _accept(self, step: Step, target: SubtaskRecord) -> None:
        """The quality loop is satisfied with `target`: complete it and move the task on.

        The frequency rule counts a subtask once: accepting it again after a correction opens no
        new frequency checkpoint.
        """
        first_time = not (target.output and target.output.accepted)
        if target.status is not SubtaskStatus.COMPLETED:
            target = step.set_subtask(
                target, status=transition(target.status, SubtaskStatus.COMPLETED), progress=100,
                completed_at=step.ctx.now,
                output=replace(target.output or StepOutput(), accepted=True))
            graph.emit_subtask(step, target)
        self.flow.accepted(step, target, first_time=first_time)

    def decide_checkpoint(self, step: Step, inp: CheckpointDecision) -> None:
        cp = _pending(step, inp.checkpoint_id)
        if inp.action == "answer":
            raise Conflict("This checkpoint asks no question: approve, reject or correct it.",
                           code="wrong_decision", details={"checkpoint_id": str(cp.id)})
        target_id = inp.subtask_id or cp.subtask_id
        target = step.subtasks.get(target_id) if target_id else None
        if inp.action == "correct":
            _check_correctable(step, inp, target)
        status = {"approve": "approved", "reject": "rejected", "correct": "corrected"}[inp.action]
        notes = inp.reason or inp.guidance or None
        step.set_checkpoint(cp, status=status, decision=inp.action, decided_by=inp.user_id,
                            decided_at=step.ctx.now, notes=notes)
        step.audit(inp.user_id, f"checkpoint_{inp.action}", "checkpoint", cp.id,
                   reason=inp.reason or None, subtask_id=str(target.id) if target else None,
                   correction_type=inp.correction_type if inp.action == "correct" else None,
                   apply_to_future=inp.apply_to_future if inp.action == "correct" else None)
        step.emit(EventType.CHECKPOINT_DECIDED, checkpoint_id=str(cp.id), decision=inp.action,
                  status=status, reason=inp.reason or None)
        if inp.action == "reject":
            why = f"Rejected at a checkpoint: {inp.reason}" if inp.reason else \
                "Rejected at a checkpoint."
            graph.cancel(step, why)
            return
        if inp.action == "approve" and cp.reason == "approval_request" and target is not None:
            base = step.task.meta.permissions or {}
            requests = target.output.approval_requests if target.output else ()
            fix = _add_correction(step, target, source="approval", issues=(), pin_worker=False,
                                  guidance="A person approved what you asked for: "
                                           + "; ".join(f"{r.get('tool')} {r.get('target')}"
                                                       for r in requests)
                                           + ". Do it now.")
            step.set_subtask(fix, options=replace(fix.options, tool={
                **fix.options.tool, "permissions": _granted(target, base)}))
        elif inp.action == "approve":
            if target is not None and target.status in (SubtaskStatus.VERIFYING,
                                                         SubtaskStatus.CORRECTING):
                self._accept(step, target)
        else:
            assert target is not None
            fix = _add_correction(step, target, source="human", issues=(),
                                  guidance=inp.guidance, correction_type=inp.correction_type,
                                  reference_files=inp.reference_files, pin_worker=False)
            step.record("corrections", id=step.ctx.new_ordered_id(), checkpoint_id=cp.id,
                        subtask_id=target.id, correction_subtask_id=fix.id,
                        correction_type=inp.correction_type, guidance=inp.guidance,
                        reference_files=list(inp.reference_files),
                        apply_to_future=inp.apply_to_future, created_by=inp.user_id,
                        created_at=step.ctx.now)
            if inp.apply_to_future:
                step.record("guidance", id=step.ctx.new_ordered_id(), user_id=step.task.user_id,
                            correction_type=inp.correction_type, guidance=inp.guidance,
                            checkpoint_id=cp.id, created_at=step.ctx.now, active=True)
        graph.resume_if_clear(self.flow, step)

    def checkpoint_expired(self, step: Step, checkpoint_id: uuid.UUID) -> None:
        cp = _pending(step, checkpoint_id)
        if cp.deadline_at is None or cp.deadline_at > step.ctx.now:
            raise Conflict("This checkpoint's deadline has not passed.", code="not_expired")
        action = cp.deadline_action or "escalate"
        if action in ("approve", "reject"):
            self.decide_checkpoint(step, CheckpointDecision(
                cp.id, "approve" if action == "approve" else "reject", None,
                reason=f"Its deadline passed (action on expiry: {action})."))
            return
        step.set_checkpoint(cp, deadline_at=None, data={**cp.data, "escalated": True})
        step.audit(None, "checkpoint_escalated", "checkpoint", cp.id)
        step.emit(EventType.NOTICE, level="warning", checkpoint_id=str(cp.id),
                  message="A checkpoint waited past its deadline and was escalated: it still "
                          "needs a decision (shoal approve / reject / correct).")
        step.emit(EventType.CHECKPOINT_READY, **checkpoint_summary(step.checkpoints[cp.id]),
                  escalated=True)

    def unplaceable(self, step: Step, inp: Unplaceable) -> None:
        sub = step.subtasks.get(inp.subtask_id)
        if sub is None or sub.status is not SubtaskStatus.QUEUED or sub.kind not in QUALITY_KINDS:
            return
        target = _targets(step, sub)
        same_worker = step.ctx.review_without_peer == "same_worker"
        if sub.kind is StepKind.REVIEW and inp.peer and same_worker:
            step.set_subtask(sub, options=replace(sub.options, exclude_workers=()))
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                      message=f"No other worker can review '{sub.name}'; it runs on the author's "
                              "worker (policy: same_worker).")
            return
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.CANCELLED),
                               completed_at=step.ctx.now, error="no worker can run it")
        graph.emit_subtask(step, sub)
        if sub.kind is StepKind.REVIEW and target is not None:
            if inp.peer and step.ctx.review_without_peer == "checkpoint":
                open_checkpoint(step, "review_escalation", target,
                                 message=f"No other worker can review '{target.name}'.")
                return
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(target.id),
                      message=f"No {'other ' if inp.peer else ''}worker can review "
                              f"'{target.name}'; accepted without a peer review.")
            self._accept(step, target)
            return
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"No worker can run '{sub.name}'; the evaluation goes on without it.")
        self.step_done(step, sub)
