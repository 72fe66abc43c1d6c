"""The steps of a document a person decides: `human` asks a question and takes the answer as
the step's output; a `gate` that finds a score below its threshold may ask a person to let
the task go on; a typed plan may wait for a person to approve it (or answer with an edited
one). Each pauses the task at a checkpoint (`reason` "question", "gate" or "plan") and resumes
it once decided; rejecting any cancels the task."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from shoal.engine import graph
from shoal.engine.inputs import CheckpointDecision
from shoal.engine.model import CheckpointRecord, SubtaskRecord
from shoal.engine.quality import PENDING_REVIEW
from shoal.engine.quality_loop import checkpoint_summary
from shoal.engine.step import Step
from shoal.errors import Conflict
from shoal.events import EventType
from shoal.workflows.document import StepDoc
from shoal.workflows.phases import PLAN_CHECKPOINT

QUESTION = "question"
GATE = "gate"
PLAN = PLAN_CHECKPOINT  # a typed plan waits for a person to approve it, edit it or reject it
DECIDED = {"answer": "answered", "approve": "approved", "reject": "rejected"}


def ask(step: Step, sub: SubtaskRecord, reason: str, message: str, question: str) -> None:
    """Pause the task until a person decides about `sub` (its checkpoint says why)."""
    deadline = step.task.meta.checkpoint_deadline
    cp = CheckpointRecord(
        id=step.ctx.new_id(), task_id=step.task.id, reason=reason, status=PENDING_REVIEW,
        created_at=step.ctx.now, subtask_id=sub.id,
        data={"message": message, "question": question, "step": sub.key.split("#")[0]},
        deadline_at=step.ctx.now + timedelta(seconds=deadline.seconds) if deadline else None,
        deadline_action=deadline.action if deadline else None)
    step.add_checkpoint(cp)
    graph.pause(step, for_answer=reason == QUESTION)
    step.audit(None, "checkpoint_opened", "checkpoint", cp.id, reason=reason,
               subtask_id=str(sub.id))
    step.emit(EventType.CHECKPOINT_READY, **checkpoint_summary(cp), question=question)


def judged(step: Step, doc_step: StepDoc, sub: SubtaskRecord, score: Any) -> tuple[bool, str]:
    """A gate's verdict on `score`: whether it passes now, and what it found. Below the
    threshold it goes on with a notice, fails the task, or asks a person (`on_fail`)."""
    assert doc_step.min_score is not None  # the document check says so
    if not isinstance(score, int | float) or isinstance(score, bool):
        graph.fail_task(step, f"Gate '{doc_step.id}' reads '{doc_step.over}', which holds no "
                              f"number ({json.dumps(score)[:100]}).")
        return False, ""
    low = score < doc_step.min_score
    verdict = f"'{doc_step.over}' is {score:g}, " + (
        f"below {doc_step.min_score:g}" if low else f"at least {doc_step.min_score:g}")
    if low and doc_step.on_fail == "continue":
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"Gate '{doc_step.id}': {verdict}; going on (on_fail: continue).")
    elif low and doc_step.on_fail == "fail":
        graph.fail_task(step, f"Gate '{doc_step.id}': {verdict}.")
        return False, verdict
    elif low:
        ask(step, sub, GATE, f"Gate '{doc_step.id}': {verdict}.",
            "Approve to let the task go on; reject to stop it.")
        return False, verdict
    return True, verdict


def decided(step: Step, inp: CheckpointDecision) -> CheckpointRecord:
    """Record a person's decision on a question or a gate; 409 for one that does not fit."""
    cp = step.checkpoints.get(inp.checkpoint_id)
    if cp is None:
        raise Conflict("This checkpoint has already been decided.", code="checkpoint_decided",
                       details={"checkpoint_id": str(inp.checkpoint_id)})
    fits = {QUESTION: ("answer", "reject"), GATE: ("approve", "reject"),
            PLAN: ("approve", "answer", "reject")}.get(cp.reason, ())
    if inp.action not in fits:
        how = " or ".join(fits) or "nothing"
        raise Conflict(f"This checkpoint is a {cp.reason}: {how} it.", code="wrong_decision",
                       details={"checkpoint_id": str(cp.id), "allowed": list(fits)})
    status = DECIDED[inp.action]
    step.set_checkpoint(cp, status=status, decision=inp.action, decided_by=inp.user_id,
                        decided_at=step.ctx.now, notes=(inp.answer or inp.reason or None))
    step.audit(inp.user_id, f"checkpoint_{inp.action}", "checkpoint", cp.id,
               reason=inp.reason or None, subtask_id=str(cp.subtask_id))
    step.emit(EventType.CHECKPOINT_DECIDED, checkpoint_id=str(cp.id), decision=inp.action,
              status=status, reason=None if inp.action == "answer" else inp.reason or None)
    return cp


def expired(step: Step, cp: CheckpointRecord) -> CheckpointDecision | None:
    """A question, gate or plan waited past its deadline: the decision its `deadline_action`
    stands for, or None when it escalates (it keeps waiting, flagged)."""
    action = cp.deadline_action
    if action not in ("approve", "reject"):
        step.set_checkpoint(cp, deadline_at=None, data={**cp.data, "escalated": True})
        step.emit(EventType.NOTICE, level="warning", message=(
            f"A {cp.reason} waited past its deadline and was escalated: it still waits for "
            "a person."))
        return None
    return CheckpointDecision(cp.id, "reject" if action == "reject" else "answer"
                              if cp.reason == QUESTION else "approve",
                              None, reason="Its deadline passed.")


def said(inp: CheckpointDecision, cp: CheckpointRecord) -> str | None:
    """What a person's decision says to the run that waited for it: their answer, or that
    they let the task go on."""
    if inp.action == "answer":
        return inp.answer
    return f"A person let the task go on: {cp.data.get('message', '')}"
