"""The workflow interpreter: `decide(state, input, ctx)` → the next state, events and commands.

Pure: no I/O, no clock, no randomness of its own (the context carries `now`, a random number and
an id factory). This module interprets the `dag` workflow (seed 004): a planner subtask expands
into a DAG of agent subtasks; each runs once its dependencies complete; failures retry by policy;
the task completes when every agent subtask has, and fails fast when one fails for good.

The quality loop (seed §3.4-3.7) runs here too, as steps of the same graph. When an agent
subtask run by an AI tool produces its output, it goes to `verifying` (its dependents wait)
and two steps are queued: `evaluate` (the worker's `evaluator` tool: linters, security, the
produced tests) and `judge` (a model scores completeness and architecture). Their scores make
the evaluation; below 7 a checkpoint opens; otherwise the seed's policy may ask for a `review`
on a different worker, whose verdict approves, queues a `correct` step on the author's worker
(at most 3 reviews), or escalates to a person. A checkpoint pauses the task (nothing new is
dispatched, no worker slot is held) until a person approves, rejects or corrects.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from shoal.engine import dag, planning, quality
from shoal.engine import quality_loop as loop
from shoal.engine.model import (
    SERVING_KINDS,
    AttemptRecord,
    StepKind,
    SubtaskRecord,
    TaskRecord,
    TaskState,
)
from shoal.engine.step import Context, Decision, Step
from shoal.errors import Conflict, StaleAttempt
from shoal.events import EventType
from shoal.states import (
    LIVE_ATTEMPT,
    TERMINAL_SUBTASK,
    TERMINAL_TASK,
    AttemptStatus,
    SubtaskStatus,
    TaskStatus,
    transition,
)

PLANNER_KEY = "planner"
QUALITY_KEY = quality.QUALITY_KEY
DEADLINE_KEY = quality.DEADLINE_KEY
PENDING_REVIEW = quality.PENDING_REVIEW

# ---- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """A task was just created; `plan` is the user's own graph, if they sent one."""

    plan: planning.Plan | None = None
    options: tuple[Mapping[str, Any], ...] = ()  # per planned subtask (explicit plans only)


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The scheduler created `attempt` for a queued subtask."""

    attempt: AttemptRecord


@dataclass(frozen=True, slots=True)
class DispatchedAll:
    """The scheduler created `attempts` for queued subtasks of one task: the same as one
    `Dispatched` for each, in order, decided in one step."""

    attempts: tuple[AttemptRecord, ...]


@dataclass(frozen=True, slots=True)
class Started:
    """The worker confirmed it runs the attempt."""

    attempt_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Finished:
    """The worker reported the end of an attempt (already checked against its fence)."""

    attempt_id: uuid.UUID
    status: Literal["succeeded", "failed", "cancelled", "timed_out"]
    output: str = ""
    files: tuple[Mapping[str, Any], ...] = ()  # manifest entries: path, size, sha256
    rejected_files: tuple[Mapping[str, Any], ...] = ()
    usage: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    denials: tuple[Mapping[str, Any], ...] = ()  # what the permission policy refused
    duration_seconds: float | None = None  # as the worker measured it


@dataclass(frozen=True, slots=True)
class Expired:
    """An attempt's lease ran out (its worker vanished) or its dispatch never arrived."""

    attempt_id: uuid.UUID
    reason: str = "The worker stopped heartbeating; its lease expired."


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """A person cancelled the task."""

    reason: str = "Cancelled by the user."


@dataclass(frozen=True, slots=True)
class CheckpointDecision:
    """A person decided a checkpoint: approve, reject, or correct a subtask with guidance."""

    checkpoint_id: uuid.UUID
    action: Literal["approve", "reject", "correct"]
    user_id: uuid.UUID | None
    reason: str = ""
    subtask_id: uuid.UUID | None = None
    correction_type: str = "other"
    guidance: str = ""
    reference_files: tuple[str, ...] = ()
    apply_to_future: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointExpired:
    """A checkpoint's deadline passed; its configured action follows."""

    checkpoint_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """No connected worker can ever take this quality step (`peer`: only because the one that
    could is the author's own worker)."""

    subtask_id: uuid.UUID
    peer: bool = False


EngineInput = (Start | Dispatched | DispatchedAll | Started | Finished | Expired | CancelRequested
               | CheckpointDecision | CheckpointExpired | Unplaceable)


def decide(state: TaskState, inp: EngineInput, ctx: Context) -> Decision:
    """Apply one input to one task's state."""
    step = Step(state, ctx)
    match inp:
        case Start():
            _start(step, inp)
        case Dispatched():
            _dispatched(step, inp.attempt)
        case DispatchedAll():
            for att in inp.attempts:
                _dispatched(step, att)
        case Started():
            _started(step, inp.attempt_id)
        case Finished():
            _finished(step, inp)
        case Expired():
            _expired(step, inp)
        case CancelRequested():
            cancel(step, inp.reason)
        case CheckpointDecision():
            loop.decide_checkpoint(step, inp)
        case CheckpointExpired():
            loop.checkpoint_expired(step, inp.checkpoint_id)
        case Unplaceable():
            loop.unplaceable(step, inp)
    return step.finish()


# ---- start and planning ---------------------------------------------------------------------


def _start(step: Step, inp: Start) -> None:
    if step.task.status is not TaskStatus.PENDING or step.subtasks:
        raise Conflict("The task has already started.", code="already_started")
    if inp.plan is not None:
        _expand(step, inp.plan, options=inp.options)
        step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS),
                      started_at=step.ctx.now)
        emit_task_update(step)
        return
    planner = SubtaskRecord(
        id=step.ctx.new_id(), task_id=step.task.id, key=PLANNER_KEY, role="planner",
        kind=StepKind.EXPAND, name="Plan the task", description="Decompose the task into subtasks.",
        status=SubtaskStatus.QUEUED, created_at=step.ctx.now,
        recommended_tool=step.task.tool_preferences[0] if step.task.tool_preferences else None,
        priority=1e9,
    )
    step.add_subtask(planner)
    step.set_task(status=transition(step.task.status, TaskStatus.INITIALIZING),
                  started_at=step.ctx.now)
    emit_task_update(step)
    emit_subtask(step, planner)


def _expand(
    step: Step, plan: planning.Plan, *, options: tuple[Mapping[str, Any], ...] = ()
) -> None:
    """Add the plan's subtasks to the graph; the ones without dependencies are queued."""
    ids = {p.key: step.ctx.new_id() for p in plan.subtasks}
    graph = {p.key: tuple(p.dependencies) for p in plan.subtasks}
    weights = {p.key: 1.0 for p in plan.subtasks}
    lengths = dag.remaining_path_lengths(graph, weights=weights)
    for i, p in enumerate(plan.subtasks):
        sub = SubtaskRecord(
            id=ids[p.key], task_id=step.task.id, key=p.key, role="coder", name=p.name,
            description=p.description, created_at=step.ctx.now,
            status=SubtaskStatus.PENDING if p.dependencies else SubtaskStatus.QUEUED,
            dependencies=tuple(ids[k] for k in p.dependencies),
            recommended_tool=p.recommended_tool, pinned_tool=p.tool,
            complexity=p.complexity, priority=lengths.get(p.key, 1.0),
            options=dict(options[i]) if i < len(options) else {},
        )
        step.add_subtask(sub)
    for note in plan.notes:
        step.emit(EventType.NOTICE, level="warning", message=note)
    step.emit(
        EventType.TASK_UPDATE, status=step.task.status.value, progress=step.task.progress,
        plan_source=plan.source,
        plan=[_subtask_summary(step.subtasks[ids[p.key]]) for p in plan.subtasks],
    )


def _planner_done(step: Step, text: str | None, why: str) -> None:
    """Expand the graph from the planner's output, or from a fallback when it gave none."""
    plan = planning.decompose(text, step.task.description, dict(step.task.meta),
                              max_subtasks=min(step.ctx.max_subtasks, 50))
    if text is None:
        plan = replace(plan, notes=(why, *plan.notes))
    _expand(step, plan)
    if step.task.status is TaskStatus.INITIALIZING:
        step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS))
    _update_progress(step)


# ---- attempts -------------------------------------------------------------------------------


def _dispatched(step: Step, att: AttemptRecord) -> None:
    sub = step.subtasks[att.subtask_id]
    if step.task.status in TERMINAL_TASK:
        raise Conflict("The task has ended; nothing more is dispatched.", code="task_ended")
    if step.task.status is TaskStatus.CHECKPOINT:
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


def _finished(step: Step, inp: Finished) -> None:
    att = _live_attempt(step, inp.attempt_id)
    sub = step.subtasks[att.subtask_id]
    usage = dict(inp.usage)
    spent = (int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)),
             float(usage.get("cost_usd", 0.0)))
    if any(spent):  # a result that used nothing leaves the task's row alone
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
        _complete_subtask(step, sub, inp)
        return
    error = inp.error or f"The attempt ended with status {inp.status}."
    if sub.kind is StepKind.EXPAND:
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=error, completed_at=step.ctx.now)
        emit_subtask(step, sub)
        _planner_done(step, None, f"The planner did not produce a plan ({error}).")
        return
    _retry_or_fail(step, sub, error, backoff=True)


def _expired(step: Step, inp: Expired) -> None:
    att = _live_attempt(step, inp.attempt_id)
    step.set_attempt(att, status=AttemptStatus.EXPIRED, finished_at=step.ctx.now,
                     error=inp.reason, lease_expires_at=None)
    step.d.cancels.append(att)
    sub = step.subtasks[att.subtask_id]
    step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
              message=f"'{sub.name}': {inp.reason} Re-queued.")
    _retry_or_fail(step, sub, inp.reason, backoff=False)


def _live_attempt(step: Step, attempt_id: uuid.UUID) -> AttemptRecord:
    att = step.attempts.get(attempt_id)
    if att is None or att.status not in LIVE_ATTEMPT:
        raise StaleAttempt("This attempt no longer holds its subtask; its result is refused.",
                           details={"attempt_id": str(attempt_id)})
    sub = step.subtasks.get(att.subtask_id)
    if sub is None or sub.current_attempt_id != att.id:
        raise StaleAttempt("A newer attempt holds this subtask.",
                           details={"attempt_id": str(attempt_id)})
    return att


def _complete_subtask(step: Step, sub: SubtaskRecord, inp: Finished) -> None:
    output: dict[str, Any] = {
        "text": inp.output, "files": [dict(f) for f in inp.files],
        "rejected_files": [dict(r) for r in inp.rejected_files], "usage": dict(inp.usage)}
    if (sub.kind in (StepKind.JUDGE, StepKind.REVIEW)
            and not loop.parsed_answer(step, sub, inp.output, output)):
        return  # requeued once to repair an answer that was not valid JSON
    if sub.kind is StepKind.EVALUATE:
        output["parsed"] = loop.evaluator_answer(inp.output)
    asked = [dict(d) for d in inp.denials if d.get("needs_human")]
    if asked:
        output["approval_requests"] = asked
    if sub.kind in (StepKind.AGENT, StepKind.CORRECT) and asked:
        loop.approval_request(step, sub, output, asked)
        return
    if sub.kind is StepKind.AGENT and loop.quality_on(step.task, sub):
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.VERIFYING),
                               output=output, progress=90, error=None)
        emit_subtask(step, sub)
        loop.verify(step, sub)
        return
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.COMPLETED),
                           output=output, progress=100, completed_at=step.ctx.now, error=None)
    emit_subtask(step, sub)
    if sub.kind is StepKind.EXPAND:
        _planner_done(step, inp.output, "")
        return
    if sub.kind in SERVING_KINDS:
        loop.quality_step_done(step, sub)
        return
    accepted(step, sub)


def accepted(step: Step, sub: SubtaskRecord, *, frequency: bool = False) -> None:
    """`sub` is complete and accepted: its dependents may run; maybe a checkpoint opens."""
    _queue_ready_dependents(step, sub)
    _update_progress(step)
    if frequency and step.task.status is TaskStatus.IN_PROGRESS:
        agents = [s for s in step.subtasks.values() if s.kind is StepKind.AGENT]
        done = sum(1 for s in agents if s.status is SubtaskStatus.COMPLETED)
        if quality.frequency_checkpoint(step.task.checkpoint_frequency, done, len(agents)):
            loop.open_checkpoint(step, "frequency", None,
                             message=f"{done} of {len(agents)} subtasks are done "
                                     f"(checkpoint frequency: {step.task.checkpoint_frequency}).")
    complete_task_if_done(step)


def _queue_ready_dependents(step: Step, done: SubtaskRecord) -> None:
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


def _retry_or_fail(step: Step, sub: SubtaskRecord, error: str, *, backoff: bool) -> None:
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
    if sub.kind in SERVING_KINDS:
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"'{sub.name}' failed after {sub.attempts} attempt(s): {error}")
        loop.quality_step_done(step, sub)
        return
    _fail_task(step, f"Subtask '{sub.name}' failed after {sub.attempts} attempt(s): {error}")


# ---- task endings ---------------------------------------------------------------------------


def complete_task_if_done(step: Step) -> None:
    if step.checkpoints or step.task.status is not TaskStatus.IN_PROGRESS:
        return
    total, done = step.agent_counts()  # kept by the step: this runs after every completion
    if not total or done < total:
        return
    if any(s.status not in TERMINAL_SUBTASK for s in step.subtasks.values()):
        return  # a correction or quality step of a completed subtask still runs
    step.set_task(status=transition(step.task.status, TaskStatus.COMPLETED), progress=100,
                  completed_at=step.ctx.now)
    emit_task_update(step)
    step.emit(EventType.TASK_COMPLETE, status=step.task.status.value,
              evaluation_scores=loop.task_scores(step), usage=_usage(step.task))


def _fail_task(step: Step, error: str) -> None:
    _stop_everything(step, error)
    loop.close_checkpoints(step, "the task failed")
    step.set_task(status=transition(step.task.status, TaskStatus.FAILED), error=error,
                  completed_at=step.ctx.now)
    emit_task_update(step)
    step.emit(EventType.TASK_FAILED, status=step.task.status.value, error=error)


def cancel(step: Step, reason: str) -> None:
    if step.task.status in TERMINAL_TASK:
        raise Conflict(f"The task is already {step.task.status.value}; it cannot be cancelled.",
                       code="task_ended", details={"status": step.task.status.value})
    _stop_everything(step, reason)
    loop.close_checkpoints(step, "the task was cancelled")
    step.set_task(status=transition(step.task.status, TaskStatus.CANCELLED), error=reason,
                  completed_at=step.ctx.now)
    emit_task_update(step)
    step.emit(EventType.TASK_CANCELLED, status=step.task.status.value, reason=reason)


def _stop_everything(step: Step, reason: str) -> None:
    """Cancel every live attempt and every subtask that has not ended."""
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


def _update_progress(step: Step) -> None:
    total, done = step.agent_counts()  # kept by the step: this runs after every completion
    progress = 5 + int(90 * done / total) if total else 5
    if progress != step.task.progress:
        step.set_task(progress=progress)
        emit_task_update(step)


def emit_task_update(step: Step) -> None:
    step.emit(EventType.TASK_UPDATE, status=step.task.status.value, progress=step.task.progress)


def emit_subtask(step: Step, sub: SubtaskRecord, **extra: Any) -> None:
    step.emit(EventType.SUBTASK_UPDATE, **_subtask_summary(sub), **extra)


def _subtask_summary(sub: SubtaskRecord) -> dict[str, Any]:
    return {
        "subtask_id": str(sub.id), "key": sub.key, "name": sub.name, "role": sub.role,
        "status": sub.status.value, "progress": sub.progress,
        "dependencies": [str(d) for d in sub.dependencies],
        "assigned_worker": str(sub.assigned_worker) if sub.assigned_worker else None,
        "assigned_tool": sub.assigned_tool, "error": sub.error, "kind": sub.kind,
        "target_id": str(sub.target_id) if sub.target_id else None,
    }


def _usage(task: TaskRecord) -> dict[str, Any]:
    return {"input_tokens": task.input_tokens, "output_tokens": task.output_tokens,
            "cost_usd": round(task.cost_usd, 6)}
