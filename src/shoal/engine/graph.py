"""What every workflow shares: attempts, retries, fencing, dependents, pausing, task endings.

`decide(workflow, state, input, ctx)` applies one input to one task. The graph runs an
attempt's life (dispatch, start, lease expiry, the fence that refuses a stale result), retries
by policy, queues a subtask once its dependencies have completed, pauses the task while a
checkpoint is open, and ends the task. What a step's output means, and what follows it, is the
task's workflow's to say (`engine.workflow.Workflow`). The graph never looks at a workflow's
name, and at a step's kind only to count the work steps (`StepKind.AGENT`) in the progress.

Pure: no I/O, no clock, no randomness of its own (the context carries `now`, a random number
and an id factory).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from shoal.engine.inputs import (
    BudgetCheck,
    CancelRequested,
    CheckpointDecision,
    CheckpointExpired,
    Declined,
    Dispatched,
    DispatchedAll,
    EngineInput,
    Expired,
    Finished,
    Queued,
    Start,
    Started,
    Unplaceable,
    UsageReported,
)
from shoal.engine.model import (
    AttemptRecord,
    BudgetLimit,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
    TaskState,
)
from shoal.engine.step import Context, Decision, Step
from shoal.engine.workflow import Workflow
from shoal.errors import Conflict, StaleAttempt
from shoal.events import EventType
from shoal.states import (
    LIVE_ATTEMPT,
    PAUSED_TASK,
    TERMINAL_SUBTASK,
    TERMINAL_TASK,
    AttemptStatus,
    SubtaskStatus,
    TaskStatus,
    transition,
)


def decide(flow: Workflow, state: TaskState, inp: EngineInput, ctx: Context) -> Decision:
    """Apply one input to one task's state, `flow` being the task's workflow."""
    step = Step(state, ctx)
    # A phased workflow's task: its phase now (none before it starts), to say if it moves.
    before = None if not flow.phased else "" if isinstance(inp, Start) else flow.phase(step)
    match inp:
        case Start():
            if inp.slot is not None:
                _take_slot(step, inp.slot)
            flow.start(step, inp)
        case Queued():
            step.set_task(status=transition(step.task.status, TaskStatus.QUEUED),
                          meta=replace(step.task.meta, plan=inp.plan))
            step.emit(EventType.TASK_UPDATE, status=step.task.status.value,
                      progress=step.task.progress, queue_position=inp.position)
        case Dispatched():
            _dispatched(step, inp.attempt)
        case DispatchedAll():
            for att in inp.attempts:
                _dispatched(step, att)
        case Started():
            _started(step, inp.attempt_id)
        case Finished():
            _finished(flow, step, inp)
        case Expired():
            _expired(flow, step, inp)
        case Declined():
            _declined(step, inp)
        case UsageReported():
            _usage_reported(flow, step, inp)
        case BudgetCheck():
            check_budget(flow, step)
        case CancelRequested():
            cancel(step, inp.reason)
        case CheckpointDecision() | CheckpointExpired() | Unplaceable():
            flow.handle(step, inp)
    if before is not None and (after := flow.phase(step)) != before:
        for phase in flow.phases_moved(before, after):
            step.emit(EventType.PHASE, phase=phase, previous=before)
            before = phase
    return step.finish()


def _take_slot(step: Step, slot: int) -> None:
    """The task holds its user's active-task slot `slot` (leaving the queue, if it waited)."""
    status, meta = step.task.status, step.task.meta
    if status is TaskStatus.QUEUED:
        status, meta = transition(status, TaskStatus.PENDING), replace(meta, plan=())
    step.set_task(status=status, slot=slot, meta=meta)


# ---- attempts -------------------------------------------------------------------------------


def _dispatched(step: Step, att: AttemptRecord) -> None:
    sub = step.subtasks[att.subtask_id]
    if step.task.status in TERMINAL_TASK:
        raise Conflict("The task has ended; nothing more is dispatched.", code="task_ended")
    if step.task.status in PAUSED_TASK:
        raise Conflict("The task waits at a checkpoint; nothing new is dispatched.",
                       code="task_paused")
    step.attempts[att.id] = att
    step.d.changed_attempts[att.id] = att
    step.d.new_attempts.add(att.id)
    sub = step.set_subtask(
        sub, status=transition(sub.status, SubtaskStatus.IN_PROGRESS), attempts=sub.attempts + 1,
        current_attempt_id=att.id, assigned_worker=att.worker_id, assigned_tool=att.tool,
        not_before=None, started_at=sub.started_at or step.ctx.now, progress=0,
    )
    emit_subtask(step, sub, attempt=att.fence)


def _started(step: Step, attempt_id: uuid.UUID) -> None:
    att = _live_attempt(step, attempt_id)
    if att.status is AttemptStatus.DISPATCHED:
        step.set_attempt(att, status=AttemptStatus.RUNNING, started_at=step.ctx.now)


def _finished(flow: Workflow, step: Step, inp: Finished) -> None:
    att = _live_attempt(step, inp.attempt_id)
    sub = step.subtasks[att.subtask_id]
    usage = dict(inp.usage)
    spent = (int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)),
             float(usage.get("cost_usd", 0.0)))
    used = spent != (0, 0, 0.0)  # (compared, not `any`: this runs for every result)
    if used:  # a result that used nothing leaves the task's row alone
        step.set_task(input_tokens=step.task.input_tokens + spent[0],
                      output_tokens=step.task.output_tokens + spent[1],
                      cost_usd=step.task.cost_usd + spent[2])
    ok = inp.status == "succeeded"
    started = att.started_at  # None when the result came before any `task_accepted`
    if started is None and inp.duration_seconds is not None:
        started = max(att.dispatched_at, step.ctx.now - timedelta(seconds=inp.duration_seconds))
    step.set_attempt(
        att, status=AttemptStatus.SUCCEEDED if ok else AttemptStatus.FAILED,
        finished_at=step.ctx.now, error=inp.error, usage=usage, lease_expires_at=None,
        started_at=started,
    )
    if inp.rejected_files:
        names = ", ".join(str(r.get("path", "?"))[:80] for r in inp.rejected_files[:5])
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"Refused {len(inp.rejected_files)} unsafe file(s) from "
                          f"'{sub.name}': {names}")
    if ok:
        flow.step_done(step, sub, inp)
    else:
        error = inp.error or f"The attempt ended with status {inp.status}."
        if not flow.attempt_failed(step, sub, error):
            _retry_or_fail(flow, step, sub, error, backoff=True)
    if used and step.task.meta.budget is not None:
        check_budget(flow, step)


def _expired(flow: Workflow, step: Step, inp: Expired) -> None:
    att = _live_attempt(step, inp.attempt_id)
    step.set_attempt(att, status=AttemptStatus.EXPIRED, finished_at=step.ctx.now,
                     error=inp.reason, lease_expires_at=None)
    step.d.cancels.append(att)
    sub = step.subtasks[att.subtask_id]
    step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
              message=f"'{sub.name}': {inp.reason} Re-queued.")
    _retry_or_fail(flow, step, sub, inp.reason, backoff=False)


def _declined(step: Step, inp: Declined) -> None:
    """The attempt never ran: its subtask is queued again with the try it did not spend (its
    fence still counts the attempt, so a late word from it is refused)."""
    att = _live_attempt(step, inp.attempt_id)
    step.set_attempt(att, status=transition(att.status, AttemptStatus.DECLINED),
                     finished_at=step.ctx.now, error=inp.reason, lease_expires_at=None)
    sub = step.subtasks[att.subtask_id]
    if step.task.status in TERMINAL_TASK:
        return
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.QUEUED),
                           attempts=sub.attempts - 1, declines=sub.declines + 1,
                           current_attempt_id=None, not_before=None)
    emit_subtask(step, sub, declined=inp.reason)


def _live_attempt(step: Step, attempt_id: uuid.UUID) -> AttemptRecord:
    """The attempt, if it still holds its subtask (the fence); else `StaleAttempt`."""
    att = step.attempts.get(attempt_id)
    if att is None or att.status not in LIVE_ATTEMPT:
        raise StaleAttempt("This attempt no longer holds its subtask; its result is refused.",
                           details={"attempt_id": str(attempt_id)})
    sub = step.subtasks.get(att.subtask_id)
    if sub is None or (sub.current_attempt_id is not att.id  # (`is` first: UUID == is 2 calls)
                       and sub.current_attempt_id != att.id):
        raise StaleAttempt("A newer attempt holds this subtask.",
                           details={"attempt_id": str(attempt_id)})
    return att


def _retry_or_fail(
    flow: Workflow, step: Step, sub: SubtaskRecord, error: str, *, backoff: bool
) -> None:
    if step.task.status in TERMINAL_TASK:
        return
    if step.ctx.retry.should_retry(sub.attempts):
        delay = step.ctx.retry.delay(sub.attempts, rand=step.ctx.rand) if backoff else 0.0
        sub = step.set_subtask(
            sub, status=transition(sub.status, SubtaskStatus.QUEUED), error=error,
            current_attempt_id=None, not_before=step.ctx.now + timedelta(seconds=delay),
        )
        emit_subtask(step, sub, retry_in=round(delay, 3))
        return
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                           error=error, completed_at=step.ctx.now, current_attempt_id=None)
    emit_subtask(step, sub)
    flow.gave_up(step, sub, error)


def complete(step: Step, sub: SubtaskRecord, output: StepOutput) -> SubtaskRecord:
    """Mark `sub` completed with `output` (its dependents are queued by `accepted`)."""
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.COMPLETED),
                           output=output, progress=100, completed_at=step.ctx.now, error=None)
    emit_subtask(step, sub)
    return sub


# ---- dependents and progress ----------------------------------------------------------------


def queue_ready_dependents(step: Step, done: SubtaskRecord) -> None:
    """Queue every subtask waiting on `done` whose dependencies have all completed."""
    pending, completed, subs = SubtaskStatus.PENDING, SubtaskStatus.COMPLETED, step.subtasks
    for oid in step.dependents(done.id):
        other = subs[oid]
        if other.status is not pending:
            continue
        # Dependencies tend to finish in the order they are listed: checking from the end
        # finds one still running at once instead of walking all that are done (a fan-in).
        if all(subs[d].status is completed for d in reversed(other.dependencies)):
            queued = step.set_subtask(other, status=SubtaskStatus.QUEUED)
            emit_subtask(step, queued)


# ---- pausing --------------------------------------------------------------------------------


def pause(step: Step, *, for_answer: bool = False) -> None:
    """Hold the task at a checkpoint (`awaiting_input` for an answer to a workflow's
    question): nothing new is dispatched until `resume_if_clear`."""
    if step.task.status is TaskStatus.IN_PROGRESS:
        step.set_task(status=transition(step.task.status, TaskStatus.AWAITING_INPUT
                                        if for_answer else TaskStatus.CHECKPOINT))
        emit_task_update(step)


def resume_if_clear(flow: Workflow, step: Step) -> None:
    """Resume a paused task once no checkpoint is open (and end it, if nothing is left)."""
    if resume(step):
        complete_task_if_done(flow, step)


def resume(step: Step) -> bool:
    """Resume a paused task if no checkpoint is open; whether it did."""
    if step.checkpoints or step.task.status not in PAUSED_TASK:
        return False
    step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS))
    emit_task_update(step)
    return True


def close_checkpoints(step: Step, why: str) -> None:
    for cp in list(step.checkpoints.values()):
        step.set_checkpoint(cp, status="rejected", decision="closed", decided_at=step.ctx.now,
                            notes=f"Closed: {why}.")


# ---- budgets --------------------------------------------------------------------------------


def _usage_reported(flow: Workflow, step: Step, inp: UsageReported) -> None:
    """A live attempt's spending so far: kept on the attempt, counted against the budget."""
    att = step.attempts.get(inp.attempt_id)
    if att is None or step.task.status in TERMINAL_TASK:
        return  # it ended meanwhile: its result carries what it spent
    step.set_attempt(att, usage=dict(inp.usage))
    check_budget(flow, step)


def spending(task: TaskRecord, live: Iterable[AttemptRecord]) -> tuple[int, float]:
    """Tokens and dollars `task` has spent: its finished attempts' and, so far, its `live`
    ones'."""
    tokens, cost = task.input_tokens + task.output_tokens, task.cost_usd
    for att in live:
        tokens += int(att.usage.get("input_tokens", 0)) + int(att.usage.get("output_tokens", 0))
        cost += float(att.usage.get("cost_usd", 0.0))
    return tokens, cost


def check_budget(flow: Workflow, step: Step) -> None:
    """End the task `budget_exceeded` once it has spent what its budget allows; its workflow
    then writes what it can from what is done (`Workflow.budget_ran_out`)."""
    budget, task = step.task.meta.budget, step.task
    if budget is None or task.status in TERMINAL_TASK or task.status is TaskStatus.QUEUED:
        return
    tokens, cost = spending(task, step.attempts.values())
    seconds = (step.ctx.now - task.started_at).total_seconds() if task.started_at else 0.0
    which = budget.spent_past(tokens, cost, seconds)
    if which is None:
        return
    match which:
        case BudgetLimit.TOKENS:
            used = f"{tokens} tokens of {budget.tokens}"
        case BudgetLimit.COST_USD:
            used = f"${cost:.4f} of ${budget.cost_usd}"
        case BudgetLimit.SECONDS:
            used = f"{seconds:.0f} s of {budget.seconds} s"
    message = (f"The task's budget ran out ({which.value}: {used}); it stopped. What its steps "
               "finished is kept.")
    step.emit(EventType.NOTICE, level="warning", limit=which.value, message=message)
    _end(step, TaskStatus.BUDGET_EXCEEDED, message, "the task's budget ran out")
    flow.budget_ran_out(step, used)


# ---- task endings ---------------------------------------------------------------------------


def complete_task_if_done(flow: Workflow, step: Step) -> None:
    """Complete the task when every work step has and nothing else still runs."""
    if step.checkpoints or step.task.status is not TaskStatus.IN_PROGRESS:
        return
    total, done = step.agent_counts()  # kept by the step: this runs after every completion
    if not total or done < total:
        return
    if any(s.status not in TERMINAL_SUBTASK for s in step.subtasks.values()):
        return  # a correction or quality step of a completed subtask still runs
    complete_task(flow, step)


def complete_task(flow: Workflow, step: Step) -> None:
    """End the task as completed (the workflow has decided nothing more is to be done)."""
    step.set_task(status=transition(step.task.status, TaskStatus.COMPLETED), progress=100,
                  completed_at=step.ctx.now, slot=None)
    emit_task_update(step)
    step.emit(EventType.TASK_COMPLETE, status=step.task.status.value,
              **flow.completion(step), usage=_usage(step.task))


def fail_task(step: Step, error: str) -> None:
    _end(step, TaskStatus.FAILED, error, "the task failed")
    step.emit(EventType.TASK_FAILED, status=step.task.status.value, error=error)


def cancel(step: Step, reason: str) -> None:
    if step.task.status in TERMINAL_TASK:
        raise Conflict(f"The task is already {step.task.status.value}; it cannot be cancelled.",
                       code="task_ended", details={"status": step.task.status.value})
    _end(step, TaskStatus.CANCELLED, reason, "the task was cancelled")
    step.emit(EventType.TASK_CANCELLED, status=step.task.status.value, reason=reason)


def _end(step: Step, status: TaskStatus, error: str, closed_because: str) -> None:
    """Stop everything still running, close open checkpoints and end the task in `status`."""
    _stop_everything(step, error)
    close_checkpoints(step, closed_because)
    step.set_task(status=transition(step.task.status, status), error=error,
                  completed_at=step.ctx.now, slot=None)
    emit_task_update(step)


def _stop_everything(step: Step, reason: str) -> None:
    """Cancel every live attempt and every subtask that has not ended; what a cancelled
    attempt said it had spent (a task with a budget) counts in the task's usage."""
    tokens, cost = spending(step.task, step.attempts.values())
    if (tokens, cost) != spending(step.task, ()):
        live = [att.usage for att in step.attempts.values()]
        step.set_task(
            input_tokens=step.task.input_tokens + sum(int(u.get("input_tokens", 0)) for u in live),
            output_tokens=step.task.output_tokens + sum(int(u.get("output_tokens", 0))
                                                        for u in live),
            cost_usd=cost)
    for att in list(step.attempts.values()):
        step.d.cancels.append(att)
        step.set_attempt(att, status=AttemptStatus.CANCELLED, finished_at=step.ctx.now,
                         error=reason, lease_expires_at=None)
    for sub in list(step.subtasks.values()):
        if sub.status not in TERMINAL_SUBTASK:
            sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.CANCELLED),
                                   current_attempt_id=None, completed_at=step.ctx.now)
            emit_subtask(step, sub)


# ---- events and summaries -------------------------------------------------------------------


def emit_task_update(step: Step) -> None:
    # `._value_`: the enum's `.value` without the property's call.
    step.emit(EventType.TASK_UPDATE, status=step.task.status._value_, progress=step.task.progress)


def emit_subtask(step: Step, sub: SubtaskRecord, **extra: Any) -> None:
    step.emit(EventType.SUBTASK_UPDATE, **subtask_summary(sub), **extra)


def subtask_summary(sub: SubtaskRecord) -> dict[str, Any]:
    """What a `subtask_update` event says about a subtask."""
    return {
        "subtask_id": str(sub.id), "key": sub.key, "name": sub.name, "role": sub.role,
        "status": sub.status._value_, "progress": sub.progress,  # `.value`: two calls more
        "dependencies": list(map(str, sub.dependencies)),
        "assigned_worker": str(sub.assigned_worker) if sub.assigned_worker else None,
        "assigned_tool": sub.assigned_tool, "error": sub.error, "kind": sub.kind,
        "target_id": str(sub.target_id) if sub.target_id else None,
        "attempts": sub.attempts, "review_cycles": sub.review_cycles,
    } | ({"plan_type": sub.options.plan_type, "wave": sub.options.wave,
          "gap": sub.options.gap} if sub.options.plan_type is not None else {})


def _usage(task: TaskRecord) -> dict[str, Any]:
    return {"input_tokens": task.input_tokens, "output_tokens": task.output_tokens,
            "cost_usd": round(task.cost_usd, 6)}
