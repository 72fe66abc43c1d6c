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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from shoal.engine import answers, dag, planning, quality
from shoal.engine.model import (
    AttemptRecord,
    CheckpointRecord,
    Record,
    SubtaskRecord,
    TaskRecord,
    TaskState,
)
from shoal.engine.retry import RetryPolicy
from shoal.errors import Conflict, InvalidInput, StaleAttempt
from shoal.events import EventType, NewEvent
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
QUALITY_KINDS = frozenset({"evaluate", "judge", "review"})
QUALITY_KEY = "shoal.quality"  # task metadata: "on" (default) or "off"
DEADLINE_KEY = "shoal.checkpoint_deadline"  # task metadata: {"seconds": s, "action": a}
TOOLS_WITHOUT_REVIEW = frozenset({"echo", "evaluator"})  # their output is not judged
PENDING_REVIEW = "pending_review"

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


EngineInput = (Start | Dispatched | Started | Finished | Expired | CancelRequested
               | CheckpointDecision | CheckpointExpired | Unplaceable)


@dataclass(frozen=True, slots=True)
class Context:
    """What a decision may know about the world: time, chance, ids, policies, limits."""

    now: datetime
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rand: float = 0.5
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    max_subtasks: int = 500
    review_without_peer: Literal["skip", "same_worker", "checkpoint"] = "skip"


@dataclass(slots=True)
class Decision:
    """The outcome of one decision: the new state and what changed in it."""

    state: TaskState
    task_changed: bool = False
    new_subtasks: list[uuid.UUID] = field(default_factory=list)
    changed_subtasks: set[uuid.UUID] = field(default_factory=set)
    changed_attempts: dict[uuid.UUID, AttemptRecord] = field(default_factory=dict)
    new_attempts: set[uuid.UUID] = field(default_factory=set)
    events: list[NewEvent] = field(default_factory=list)
    cancels: list[AttemptRecord] = field(default_factory=list)
    new_checkpoints: list[uuid.UUID] = field(default_factory=list)
    changed_checkpoints: dict[uuid.UUID, CheckpointRecord] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)


class _Step:
    """A mutable working copy of one task's state while a decision is made."""

    def __init__(self, state: TaskState, ctx: Context) -> None:
        self.ctx = ctx
        self.task = state.task
        self.subtasks = dict(state.subtasks)
        self.attempts = dict(state.attempts)
        self.checkpoints = dict(state.checkpoints)
        self.d = Decision(state=state)

    # -- recording changes --
    def set_task(self, **changes: Any) -> None:
        self.task = replace(self.task, updated_at=self.ctx.now, **changes)
        self.d.task_changed = True

    def set_subtask(self, sub: SubtaskRecord, **changes: Any) -> SubtaskRecord:
        new = replace(sub, **changes)
        self.subtasks[sub.id] = new
        if sub.id not in self.d.new_subtasks:
            self.d.changed_subtasks.add(sub.id)
        return new

    def add_subtask(self, sub: SubtaskRecord) -> None:
        self.subtasks[sub.id] = sub
        self.d.new_subtasks.append(sub.id)

    def set_attempt(self, att: AttemptRecord, **changes: Any) -> AttemptRecord:
        new = replace(att, **changes)
        self.d.changed_attempts[att.id] = new
        if new.status in LIVE_ATTEMPT:
            self.attempts[att.id] = new
        else:
            self.attempts.pop(att.id, None)
        return new

    def add_checkpoint(self, cp: CheckpointRecord) -> None:
        self.checkpoints[cp.id] = cp
        self.d.new_checkpoints.append(cp.id)
        self.d.changed_checkpoints[cp.id] = cp

    def set_checkpoint(self, cp: CheckpointRecord, **changes: Any) -> CheckpointRecord:
        new = replace(cp, **changes)
        self.d.changed_checkpoints[cp.id] = new
        if new.status == PENDING_REVIEW:
            self.checkpoints[cp.id] = new
        else:
            self.checkpoints.pop(cp.id, None)
        return new

    def record(self, table: str, **values: Any) -> None:
        self.d.records.append(Record(table, values))

    def audit(self, user_id: uuid.UUID | None, action: str, object_type: str,
              object_id: uuid.UUID, **details: Any) -> None:
        self.record("audit_log", id=self.ctx.new_id(), user_id=user_id, action=action,
                    object_type=object_type, object_id=object_id, task_id=self.task.id,
                    details=details, created_at=self.ctx.now)

    def emit(self, type_: EventType, **data: Any) -> None:
        self.d.events.append(
            NewEvent(type=type_, data={"task_id": str(self.task.id), **data},
                     task_id=self.task.id, user_id=self.task.user_id)
        )

    def finish(self) -> Decision:
        self.d.state = TaskState(task=self.task, subtasks=self.subtasks, attempts=self.attempts,
                                 checkpoints=self.checkpoints)
        return self.d


def decide(state: TaskState, inp: EngineInput, ctx: Context) -> Decision:
    """Apply one input to one task's state."""
    step = _Step(state, ctx)
    match inp:
        case Start():
            _start(step, inp)
        case Dispatched():
            _dispatched(step, inp.attempt)
        case Started():
            _started(step, inp.attempt_id)
        case Finished():
            _finished(step, inp)
        case Expired():
            _expired(step, inp)
        case CancelRequested():
            _cancel(step, inp.reason)
        case CheckpointDecision():
            _decide_checkpoint(step, inp)
        case CheckpointExpired():
            _checkpoint_expired(step, inp.checkpoint_id)
        case Unplaceable():
            _unplaceable(step, inp)
    return step.finish()


# ---- start and planning ---------------------------------------------------------------------


def _start(step: _Step, inp: Start) -> None:
    if step.task.status is not TaskStatus.PENDING or step.subtasks:
        raise Conflict("The task has already started.", code="already_started")
    if inp.plan is not None:
        _expand(step, inp.plan, options=inp.options)
        step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS),
                      started_at=step.ctx.now)
        _emit_task_update(step)
        return
    planner = SubtaskRecord(
        id=step.ctx.new_id(), task_id=step.task.id, key=PLANNER_KEY, role="planner",
        kind="expand", name="Plan the task", description="Decompose the task into subtasks.",
        status=SubtaskStatus.QUEUED, created_at=step.ctx.now,
        recommended_tool=step.task.tool_preferences[0] if step.task.tool_preferences else None,
        priority=1e9,
    )
    step.add_subtask(planner)
    step.set_task(status=transition(step.task.status, TaskStatus.INITIALIZING),
                  started_at=step.ctx.now)
    _emit_task_update(step)
    _emit_subtask(step, planner)


def _expand(
    step: _Step, plan: planning.Plan, *, options: tuple[Mapping[str, Any], ...] = ()
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


def _planner_done(step: _Step, text: str | None, why: str) -> None:
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


def _dispatched(step: _Step, att: AttemptRecord) -> None:
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
    _emit_subtask(step, sub, attempt=att.fence)


def _started(step: _Step, attempt_id: uuid.UUID) -> None:
    att = _live_attempt(step, attempt_id)
    if att.status is AttemptStatus.DISPATCHED:
        step.set_attempt(att, status=AttemptStatus.RUNNING, started_at=step.ctx.now)


def _finished(step: _Step, inp: Finished) -> None:
    att = _live_attempt(step, inp.attempt_id)
    sub = step.subtasks[att.subtask_id]
    usage = dict(inp.usage)
    step.set_task(
        input_tokens=step.task.input_tokens + int(usage.get("input_tokens", 0)),
        output_tokens=step.task.output_tokens + int(usage.get("output_tokens", 0)),
        cost_usd=step.task.cost_usd + float(usage.get("cost_usd", 0.0)),
    )
    ok = inp.status == "succeeded"
    step.set_attempt(
        att, status=AttemptStatus.SUCCEEDED if ok else AttemptStatus.FAILED,
        finished_at=step.ctx.now, error=inp.error, usage=usage, lease_expires_at=None,
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
    if sub.kind == "expand":
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=error, completed_at=step.ctx.now)
        _emit_subtask(step, sub)
        _planner_done(step, None, f"The planner did not produce a plan ({error}).")
        return
    _retry_or_fail(step, sub, error, backoff=True)


def _expired(step: _Step, inp: Expired) -> None:
    att = _live_attempt(step, inp.attempt_id)
    step.set_attempt(att, status=AttemptStatus.EXPIRED, finished_at=step.ctx.now,
                     error=inp.reason, lease_expires_at=None)
    step.d.cancels.append(att)
    sub = step.subtasks[att.subtask_id]
    step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
              message=f"'{sub.name}': {inp.reason} Re-queued.")
    _retry_or_fail(step, sub, inp.reason, backoff=False)


def _live_attempt(step: _Step, attempt_id: uuid.UUID) -> AttemptRecord:
    att = step.attempts.get(attempt_id)
    if att is None or att.status not in LIVE_ATTEMPT:
        raise StaleAttempt("This attempt no longer holds its subtask; its result is refused.",
                           details={"attempt_id": str(attempt_id)})
    sub = step.subtasks.get(att.subtask_id)
    if sub is None or sub.current_attempt_id != att.id:
        raise StaleAttempt("A newer attempt holds this subtask.",
                           details={"attempt_id": str(attempt_id)})
    return att


def _complete_subtask(step: _Step, sub: SubtaskRecord, inp: Finished) -> None:
    output: dict[str, Any] = {
        "text": inp.output, "files": [dict(f) for f in inp.files],
        "rejected_files": [dict(r) for r in inp.rejected_files], "usage": dict(inp.usage)}
    if sub.kind in ("judge", "review") and not _parsed_answer(step, sub, inp.output, output):
        return  # requeued once to repair an answer that was not valid JSON
    if sub.kind == "evaluate":
        output["parsed"] = _evaluator_answer(inp.output)
    asked = [dict(d) for d in inp.denials if d.get("needs_human")]
    if asked:
        output["approval_requests"] = asked
    if sub.kind in ("agent", "correct") and asked:
        _approval_request(step, sub, output, asked)
        return
    if sub.kind == "agent" and _quality_on(step.task, sub):
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.VERIFYING),
                               output=output, progress=90, error=None)
        _emit_subtask(step, sub)
        _verify(step, sub)
        return
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.COMPLETED),
                           output=output, progress=100, completed_at=step.ctx.now, error=None)
    _emit_subtask(step, sub)
    if sub.kind == "expand":
        _planner_done(step, inp.output, "")
        return
    if sub.kind in QUALITY_KINDS or sub.kind == "correct":
        _quality_step_done(step, sub)
        return
    _accepted(step, sub)


def _accepted(step: _Step, sub: SubtaskRecord, *, frequency: bool = False) -> None:
    """`sub` is complete and accepted: its dependents may run; maybe a checkpoint opens."""
    _queue_ready_dependents(step, sub)
    _update_progress(step)
    if frequency and step.task.status is TaskStatus.IN_PROGRESS:
        agents = [s for s in step.subtasks.values() if s.kind == "agent"]
        done = sum(1 for s in agents if s.status is SubtaskStatus.COMPLETED)
        if quality.frequency_checkpoint(step.task.checkpoint_frequency, done, len(agents)):
            _open_checkpoint(step, "frequency", None,
                             message=f"{done} of {len(agents)} subtasks are done "
                                     f"(checkpoint frequency: {step.task.checkpoint_frequency}).")
    _complete_task_if_done(step)


def _queue_ready_dependents(step: _Step, done: SubtaskRecord) -> None:
    for other in list(step.subtasks.values()):
        if other.status is not SubtaskStatus.PENDING or done.id not in other.dependencies:
            continue
        if all(step.subtasks[d].status is SubtaskStatus.COMPLETED for d in other.dependencies):
            queued = step.set_subtask(other, status=SubtaskStatus.QUEUED)
            _emit_subtask(step, queued)


def _retry_or_fail(step: _Step, sub: SubtaskRecord, error: str, *, backoff: bool) -> None:
    if step.task.status in TERMINAL_TASK:
        return
    if step.ctx.retry.should_retry(sub.attempts):
        delay = step.ctx.retry.delay(sub.attempts, rand=step.ctx.rand) if backoff else 0.0
        sub = step.set_subtask(
            sub, status=transition(sub.status, SubtaskStatus.QUEUED), error=error,
            current_attempt_id=None, not_before=step.ctx.now + timedelta(seconds=delay),
        )
        _emit_subtask(step, sub, retry_in=round(delay, 3))
        return
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                           error=error, completed_at=step.ctx.now, current_attempt_id=None)
    _emit_subtask(step, sub)
    if sub.kind in QUALITY_KINDS or sub.kind == "correct":
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"'{sub.name}' failed after {sub.attempts} attempt(s): {error}")
        _quality_step_done(step, sub)
        return
    _fail_task(step, f"Subtask '{sub.name}' failed after {sub.attempts} attempt(s): {error}")


# ---- task endings ---------------------------------------------------------------------------


def _complete_task_if_done(step: _Step) -> None:
    if step.checkpoints or step.task.status is not TaskStatus.IN_PROGRESS:
        return
    agents = [s for s in step.subtasks.values() if s.kind == "agent"]
    if not agents or any(s.status is not SubtaskStatus.COMPLETED for s in agents):
        return
    if any(s.status not in TERMINAL_SUBTASK for s in step.subtasks.values()):
        return  # a correction or quality step of a completed subtask still runs
    step.set_task(status=transition(step.task.status, TaskStatus.COMPLETED), progress=100,
                  completed_at=step.ctx.now)
    _emit_task_update(step)
    step.emit(EventType.TASK_COMPLETE, status=step.task.status.value,
              evaluation_scores=_task_scores(step), usage=_usage(step.task))


def _fail_task(step: _Step, error: str) -> None:
    _stop_everything(step, error)
    _close_checkpoints(step, "the task failed")
    step.set_task(status=transition(step.task.status, TaskStatus.FAILED), error=error,
                  completed_at=step.ctx.now)
    _emit_task_update(step)
    step.emit(EventType.TASK_FAILED, status=step.task.status.value, error=error)


def _cancel(step: _Step, reason: str) -> None:
    if step.task.status in TERMINAL_TASK:
        raise Conflict(f"The task is already {step.task.status.value}; it cannot be cancelled.",
                       code="task_ended", details={"status": step.task.status.value})
    _stop_everything(step, reason)
    _close_checkpoints(step, "the task was cancelled")
    step.set_task(status=transition(step.task.status, TaskStatus.CANCELLED), error=reason,
                  completed_at=step.ctx.now)
    _emit_task_update(step)
    step.emit(EventType.TASK_CANCELLED, status=step.task.status.value, reason=reason)


def _stop_everything(step: _Step, reason: str) -> None:
    """Cancel every live attempt and every subtask that has not ended."""
    for att in list(step.attempts.values()):
        step.d.cancels.append(att)
        step.set_attempt(att, status=AttemptStatus.CANCELLED, finished_at=step.ctx.now,
                         error=reason, lease_expires_at=None)
    for sub in list(step.subtasks.values()):
        if sub.status not in TERMINAL_SUBTASK:
            sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.CANCELLED),
                                   current_attempt_id=None, completed_at=step.ctx.now)
            _emit_subtask(step, sub)


# ---- events and summaries -------------------------------------------------------------------


def _update_progress(step: _Step) -> None:
    subs = [s for s in step.subtasks.values() if s.kind == "agent"]
    done = sum(1 for s in subs if s.status is SubtaskStatus.COMPLETED)
    progress = 5 + int(90 * done / len(subs)) if subs else 5
    if progress != step.task.progress:
        step.set_task(progress=progress)
        _emit_task_update(step)


def _emit_task_update(step: _Step) -> None:
    step.emit(EventType.TASK_UPDATE, status=step.task.status.value, progress=step.task.progress)


def _emit_subtask(step: _Step, sub: SubtaskRecord, **extra: Any) -> None:
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


# ---- the quality loop -----------------------------------------------------------------------


def _quality_on(task: TaskRecord, sub: SubtaskRecord) -> bool:
    """Whether `sub`'s output goes through evaluation and review."""
    return (task.meta.get(QUALITY_KEY, "on") != "off" and sub.kind == "agent"
            and (sub.assigned_tool or "") not in TOOLS_WITHOUT_REVIEW)


def _targets(step: _Step, sub: SubtaskRecord) -> SubtaskRecord | None:
    return step.subtasks.get(sub.target_id) if sub.target_id else None


def _parsed_answer(step: _Step, sub: SubtaskRecord, text: str,
                   output: dict[str, Any]) -> bool:
    """Parse a judge's or reviewer's JSON into `output["parsed"]`.

    An answer that is not valid JSON is sent back once with the parse error (the repair
    retry); if the repaired answer fails too, `parsed` is None. False when requeued.
    """
    try:
        if sub.kind == "judge":
            output["parsed"] = _judge_dict(answers.parse_judge(text))
        else:
            output["parsed"] = _review_dict(answers.parse_review(text))
    except answers.AnswerError as exc:
        if sub.options.get("repair"):
            output["parsed"] = None
            output["parse_error"] = exc.message
            return True
        sub = step.set_subtask(
            sub, status=transition(sub.status, SubtaskStatus.QUEUED), current_attempt_id=None,
            options={**sub.options, "repair": exc.message}, error=exc.message)
        _emit_subtask(step, sub, repair=True)
        return False
    return True


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


def _evaluator_answer(text: str) -> dict[str, Any] | None:
    value = answers.extract_json(text)
    if isinstance(value, dict) and isinstance(value.get("dimensions"), dict):
        return dict(value["dimensions"])
    return None


def _round_of(step: _Step, target: SubtaskRecord, kind: str) -> int:
    return sum(1 for s in step.subtasks.values() if s.target_id == target.id and s.kind == kind)


def _quality_step(step: _Step, target: SubtaskRecord, kind: str, **fields: Any) -> SubtaskRecord:
    number = _round_of(step, target, kind) + 1
    names = {"evaluate": "Evaluate", "judge": "Judge", "review": "Review", "correct": "Fix"}
    options = {"round": number, **fields.pop("options", {})}
    sub = SubtaskRecord(
        id=step.ctx.new_id(), task_id=step.task.id, key=f"{kind}-{number}-{target.id.hex[:12]}",
        name=f"{names[kind]}: {target.name}"[:255], status=SubtaskStatus.QUEUED,
        created_at=step.ctx.now, dependencies=(target.id,), target_id=target.id,
        priority=target.priority + 0.5, kind=kind, options=options, **fields)
    step.add_subtask(sub)
    _emit_subtask(step, sub)
    return sub


def _verify(step: _Step, target: SubtaskRecord) -> None:
    """Queue the evaluation of `target`'s output: the evaluator tool and the judge."""
    files = [str(f.get("path")) for f in (target.output or {}).get("files", [])]
    if files:
        _quality_step(step, target, "evaluate", role="evaluator", pinned_tool="evaluator",
                      complexity=1, description=f"Evaluate the files of '{target.name}'.",
                      options={"files": files})
    _quality_step(step, target, "judge", role="judge", complexity=2,
                  recommended_tool=target.assigned_tool,
                  description=f"Score how complete and well-built '{target.name}' is.")


def _quality_step_done(step: _Step, sub: SubtaskRecord) -> None:
    """A quality step ended (completed, or failed for good): move its target on."""
    target = _targets(step, sub)
    if target is None or step.task.status in TERMINAL_TASK:
        return
    if sub.kind in ("evaluate", "judge"):
        _maybe_evaluated(step, target)
    elif sub.kind == "review":
        _review_done(step, target, sub)
    elif sub.kind == "correct":
        _correction_done(step, target, sub)


def _maybe_evaluated(step: _Step, target: SubtaskRecord) -> None:
    if target.status is not SubtaskStatus.VERIFYING:
        return
    latest: dict[str, SubtaskRecord] = {}
    for s in step.subtasks.values():
        if s.target_id != target.id or s.kind not in ("evaluate", "judge"):
            continue
        if s.kind not in latest or _round(s) > _round(latest[s.kind]):
            latest[s.kind] = s
    if any(s.status not in TERMINAL_SUBTASK for s in latest.values()):
        return
    parts = {kind: (s.output or {}).get("parsed") if s.status is SubtaskStatus.COMPLETED
             else None for kind, s in latest.items()}
    evaluation = quality.combine(parts.get("evaluate"), parts.get("judge"))
    if "evaluate" not in latest:
        evaluation["missing"] = [m for m in evaluation["missing"] if m != "tools"]
    evaluation["round"] = max((s.options.get("round", 1) for s in latest.values()), default=1)
    target = step.set_subtask(target, evaluation=evaluation)
    step.emit(EventType.EVALUATION, subtask_id=str(target.id), name=target.name,
              overall=evaluation["overall"], scores=evaluation["scores"],
              missing=evaluation["missing"])
    score = evaluation["overall"]
    if score is not None and score < quality.LOW_SCORE:
        _open_checkpoint(step, "low_score", target,
                         message=f"'{target.name}' scored {score:g} (below "
                                 f"{quality.LOW_SCORE:g}).")
    elif target.review_cycles == 0 and quality.review_needed(target.complexity, score):
        _add_review(step, target)
    elif target.review_cycles and target.review and target.review.get("outcome") == "fix":
        _add_review(step, target)  # a correction was made: review it again
    else:
        _accept(step, target)


def _round(sub: SubtaskRecord) -> int:
    return int(sub.options.get("round", 0))


def _add_review(step: _Step, target: SubtaskRecord) -> None:
    author = [str(target.assigned_worker)] if target.assigned_worker else []
    _quality_step(step, target, "review", role="reviewer", complexity=2,
                  recommended_tool=target.assigned_tool,
                  description=f"Review the work of '{target.name}'.",
                  options={"exclude_workers": author, "cycle": target.review_cycles + 1})


def _review_done(step: _Step, target: SubtaskRecord, review: SubtaskRecord) -> None:
    if target.status is not SubtaskStatus.VERIFYING:
        return
    parsed = (review.output or {}).get("parsed") if review.status is SubtaskStatus.COMPLETED \
        else None
    if parsed is None:
        why = (review.output or {}).get("parse_error") or review.error or "no answer"
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(target.id),
                  message=f"The peer review of '{target.name}' gave no usable verdict ({why}); "
                          "accepted on its evaluation alone.")
        _accept(step, target)
        return
    cycles = target.review_cycles + 1
    counts = parsed.get("severity_counts", {})
    outcome = quality.review_outcome(
        float(parsed["score"]), str(parsed["decision"]), critical=int(counts.get("critical", 0)),
        auto_fix_possible=bool(parsed.get("auto_fix_possible")), cycles_done=cycles)
    record = {**parsed, "cycle": cycles, "outcome": outcome,
              "reviewer_worker": str(review.assigned_worker) if review.assigned_worker else None,
              "author_worker": str(target.assigned_worker) if target.assigned_worker else None}
    target = step.set_subtask(target, review=record, review_cycles=cycles)
    step.record("reviews", id=step.ctx.new_id(), task_id=step.task.id,
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
        _accept(step, target)
    elif outcome == "fix":
        _add_correction(step, target, source="review", issues=list(parsed.get("issues", [])),
                        instructions=str(parsed.get("auto_fix_instructions") or ""),
                        pin_worker=True)
    else:
        why = ("max_review_cycles" if cycles >= quality.MAX_REVIEW_CYCLES
               else "review_escalation")
        _open_checkpoint(step, why, target,
                         message=f"The peer review of '{target.name}' (cycle {cycles}) scored "
                                 f"{parsed['score']:g}: {parsed.get('summary', '')}".strip())


def _add_correction(step: _Step, target: SubtaskRecord, *, source: str, issues: list[Any],
                    instructions: str = "", guidance: str = "", correction_type: str = "",
                    reference_files: tuple[str, ...] = (), pin_worker: bool) -> SubtaskRecord:
    """Queue a correction of `target` (its files go along) and mark it `correcting`."""
    correction = {"source": source, "issues": issues, "instructions": instructions,
                  "guidance": guidance, "correction_type": correction_type,
                  "reference_files": list(reference_files),
                  "previous_output": str((target.output or {}).get("text", ""))[:4000]}
    options: dict[str, Any] = {"correction": correction}
    if target.assigned_worker is not None:
        key = "pinned_worker" if pin_worker else "prefer_worker"
        options[key] = str(target.assigned_worker)
    fix = _quality_step(step, target, "correct", role="coder", complexity=target.complexity,
                        pinned_tool=target.assigned_tool, description=target.description,
                        options=options)
    step.set_subtask(target, status=transition(target.status, SubtaskStatus.CORRECTING))
    _emit_subtask(step, step.subtasks[target.id])
    return fix


def _correction_done(step: _Step, target: SubtaskRecord, fix: SubtaskRecord) -> None:
    if target.status is not SubtaskStatus.CORRECTING:
        return
    if fix.status is not SubtaskStatus.COMPLETED:
        _open_checkpoint(step, "correction_failed", target,
                         message=f"The correction of '{target.name}' failed: {fix.error}")
        return
    old = dict(target.output or {})
    new = dict(fix.output or {})
    files = {str(f["path"]): dict(f) for f in old.get("files", [])}
    files.update({str(f["path"]): dict(f) for f in new.get("files", [])})
    merged = {**old, "text": new.get("text", old.get("text", "")),
              "files": sorted(files.values(), key=lambda f: str(f["path"])),
              "corrected_by": str(fix.id)}
    merged.pop("approval_requests", None)
    target = step.set_subtask(target, status=transition(target.status, SubtaskStatus.VERIFYING),
                              output=merged, completed_at=None, progress=90)
    _emit_subtask(step, target)
    if _quality_on(step.task, target):
        _verify(step, target)
    else:
        _accept(step, target)


_EDIT_TOOLS = frozenset({"write_file", "Write", "Edit", "MultiEdit", "NotebookEdit", "replace",
                         "edit", "apply_patch"})


def _approval_request(step: _Step, sub: SubtaskRecord, output: dict[str, Any],
                      asked: list[dict[str, Any]]) -> None:
    """The agent asked for something the policy says a person decides: pause and ask."""
    target = _targets(step, sub) if sub.kind == "correct" else sub
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.COMPLETED)
                           if sub.kind == "correct" else transition(
                               sub.status, SubtaskStatus.VERIFYING),
                           output=output, progress=90 if sub.kind == "agent" else 100,
                           completed_at=step.ctx.now if sub.kind == "correct" else None,
                           error=None)
    _emit_subtask(step, sub)
    if target is None:
        return
    if sub.kind == "correct":  # the correction itself asked again: its target waits for it
        target = step.set_subtask(
            target, status=transition(target.status, SubtaskStatus.VERIFYING),
            output={**dict(target.output or {}), "approval_requests": asked})
        _emit_subtask(step, target)
    listed = "; ".join(f"{d.get('tool')} {str(d.get('target'))[:120]}" for d in asked[:5])
    _open_checkpoint(step, "approval_request", target,
                     message=f"'{target.name}' asked to do what the task's policy leaves to a "
                             f"person: {listed}. Approve to let it run again with that "
                             "allowed.")


def _granted(target: SubtaskRecord, base: Mapping[str, Any]) -> dict[str, str]:
    """The permissions of a re-run after a person approved what the agent asked for."""
    asked = (target.output or {}).get("approval_requests") or []
    granted = {"edits": "allow", "commands": "allow", **dict(base)}
    for request in asked:
        kind = "edits" if request.get("tool") in _EDIT_TOOLS else "commands"
        granted[kind] = "allow"
    return granted


def _accept(step: _Step, target: SubtaskRecord) -> None:
    """The quality loop is satisfied with `target`: complete it and move the task on.

    The frequency rule counts a subtask once: accepting it again after a correction opens no
    new frequency checkpoint.
    """
    first_time = not (target.output or {}).get("accepted")
    if target.status is not SubtaskStatus.COMPLETED:
        target = step.set_subtask(
            target, status=transition(target.status, SubtaskStatus.COMPLETED), progress=100,
            completed_at=step.ctx.now, output={**dict(target.output or {}), "accepted": True})
        _emit_subtask(step, target)
    _accepted(step, target, frequency=first_time)


# ---- checkpoints ----------------------------------------------------------------------------


def _open_checkpoint(step: _Step, reason: str, target: SubtaskRecord | None, *,
                     message: str) -> None:
    """Pause the task for a person; `target` is the subtask the checkpoint is about."""
    if step.task.status in TERMINAL_TASK:
        return
    deadline = step.task.meta.get(DEADLINE_KEY) or {}
    seconds = deadline.get("seconds") if isinstance(deadline, dict) else None
    cp = CheckpointRecord(
        id=step.ctx.new_id(), task_id=step.task.id, reason=reason, status=PENDING_REVIEW,
        created_at=step.ctx.now, subtask_id=target.id if target else None,
        data=_checkpoint_data(step, target, message),
        deadline_at=step.ctx.now + timedelta(seconds=float(seconds)) if seconds else None,
        deadline_action=str(deadline.get("action", "escalate")) if seconds else None)
    step.add_checkpoint(cp)
    if step.task.status is TaskStatus.IN_PROGRESS:
        step.set_task(status=transition(step.task.status, TaskStatus.CHECKPOINT))
        _emit_task_update(step)
    step.audit(None, "checkpoint_opened", "checkpoint", cp.id, reason=reason,
               subtask_id=str(cp.subtask_id) if cp.subtask_id else None)
    step.emit(EventType.CHECKPOINT_READY, **checkpoint_summary(cp))


def _checkpoint_data(step: _Step, target: SubtaskRecord | None, message: str) -> dict[str, Any]:
    agents = [s for s in step.subtasks.values() if s.kind == "agent"]
    done = [s for s in agents if s.status is SubtaskStatus.COMPLETED]
    scores = [float(s.evaluation["overall"]) for s in agents
              if s.evaluation and s.evaluation.get("overall") is not None]
    focus = target.evaluation if target and target.evaluation else None
    return {
        "message": message,
        "completed_count": len(done), "total_count": len(agents),
        "subtasks_completed": [
            {"subtask_id": str(s.id), "name": s.name,
             "output": str((s.output or {}).get("text", ""))[:1000],
             "files_created": [str(f.get("path")) for f in (s.output or {}).get("files", [])]}
            for s in done[-10:]],
        "subtask": ({"subtask_id": str(target.id), "name": target.name,
                     "output": str((target.output or {}).get("text", ""))[:2000],
                     "files_created": [str(f.get("path"))
                                       for f in (target.output or {}).get("files", [])],
                     "review": dict(target.review) if target.review else None}
                    if target else None),
        "evaluation_scores": dict(focus["scores"]) if focus else None,
        "overall_score": focus["overall"] if focus else None,
        "average_score": round(sum(scores) / len(scores), 2) if scores else None,
        "next_subtasks": [{"subtask_id": str(s.id), "name": s.name} for s in agents
                          if s.status in (SubtaskStatus.PENDING, SubtaskStatus.QUEUED)][:10],
    }


def checkpoint_summary(cp: CheckpointRecord) -> dict[str, Any]:
    """What a `checkpoint_ready` event says."""
    return {"checkpoint_id": str(cp.id), "reason": cp.reason, "status": cp.status,
            "subtask_id": str(cp.subtask_id) if cp.subtask_id else None,
            "message": cp.data.get("message"),
            "completed_count": cp.data.get("completed_count"),
            "average_score": cp.data.get("average_score"),
            "overall_score": cp.data.get("overall_score"),
            "deadline_at": cp.deadline_at.isoformat() if cp.deadline_at else None}


def _pending(step: _Step, checkpoint_id: uuid.UUID) -> CheckpointRecord:
    cp = step.checkpoints.get(checkpoint_id)
    if cp is None:
        raise Conflict("This checkpoint has already been decided.", code="checkpoint_decided",
                       details={"checkpoint_id": str(checkpoint_id)})
    return cp


def _decide_checkpoint(step: _Step, inp: CheckpointDecision) -> None:
    cp = _pending(step, inp.checkpoint_id)
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
        _cancel(step, why)
        return
    if inp.action == "approve" and cp.reason == "approval_request" and target is not None:
        base = step.task.meta.get("shoal.permissions") or {}
        requests = (target.output or {}).get("approval_requests") or []
        fix = _add_correction(step, target, source="approval", issues=[], pin_worker=False,
                              guidance="A person approved what you asked for: "
                                       + "; ".join(f"{r.get('tool')} {r.get('target')}"
                                                   for r in requests)
                                       + ". Do it now.")
        step.set_subtask(fix, options={**fix.options,
                                       "permissions": _granted(target, base)})
    elif inp.action == "approve":
        if target is not None and target.status in (SubtaskStatus.VERIFYING,
                                                     SubtaskStatus.CORRECTING):
            _accept(step, target)
    else:
        assert target is not None
        fix = _add_correction(step, target, source="human", issues=[],
                              guidance=inp.guidance, correction_type=inp.correction_type,
                              reference_files=inp.reference_files, pin_worker=False)
        step.record("corrections", id=step.ctx.new_id(), checkpoint_id=cp.id,
                    subtask_id=target.id, correction_subtask_id=fix.id,
                    correction_type=inp.correction_type, guidance=inp.guidance,
                    reference_files=list(inp.reference_files),
                    apply_to_future=inp.apply_to_future, created_by=inp.user_id,
                    created_at=step.ctx.now)
        if inp.apply_to_future:
            step.record("guidance", id=step.ctx.new_id(), user_id=step.task.user_id,
                        correction_type=inp.correction_type, guidance=inp.guidance,
                        checkpoint_id=cp.id, created_at=step.ctx.now, active=True)
    _resume_if_clear(step)


def _check_correctable(step: _Step, inp: CheckpointDecision,
                       target: SubtaskRecord | None) -> None:
    if target is None or target.task_id != step.task.id or target.kind != "agent":
        raise InvalidInput(
            "Name the subtask to correct (`subtask_id`): one of this task's work subtasks.",
            details={"field": "subtask_id"})
    if target.status not in (SubtaskStatus.COMPLETED, SubtaskStatus.VERIFYING):
        raise Conflict(f"Subtask '{target.name}' is {target.status.value}; only a completed "
                       "or verifying subtask can be corrected.", code="not_correctable",
                       details={"subtask_id": str(target.id), "status": target.status.value})
    if not inp.guidance.strip():
        raise InvalidInput("Say what to change (`guidance`).", details={"field": "guidance"})


def _resume_if_clear(step: _Step) -> None:
    if step.checkpoints or step.task.status is not TaskStatus.CHECKPOINT:
        return
    step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS))
    _emit_task_update(step)
    _complete_task_if_done(step)


def _checkpoint_expired(step: _Step, checkpoint_id: uuid.UUID) -> None:
    cp = _pending(step, checkpoint_id)
    if cp.deadline_at is None or cp.deadline_at > step.ctx.now:
        raise Conflict("This checkpoint's deadline has not passed.", code="not_expired")
    action = cp.deadline_action or "escalate"
    if action in ("approve", "reject"):
        _decide_checkpoint(step, CheckpointDecision(
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


def _close_checkpoints(step: _Step, why: str) -> None:
    for cp in list(step.checkpoints.values()):
        step.set_checkpoint(cp, status="rejected", decision="closed", decided_at=step.ctx.now,
                            notes=f"Closed: {why}.")


def _unplaceable(step: _Step, inp: Unplaceable) -> None:
    sub = step.subtasks.get(inp.subtask_id)
    if sub is None or sub.status is not SubtaskStatus.QUEUED or sub.kind not in QUALITY_KINDS:
        return
    target = _targets(step, sub)
    if sub.kind == "review" and inp.peer and step.ctx.review_without_peer == "same_worker":
        step.set_subtask(sub, options={**sub.options, "exclude_workers": []})
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"No other worker can review '{sub.name}'; it runs on the author's "
                          "worker (policy: same_worker).")
        return
    sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.CANCELLED),
                           completed_at=step.ctx.now, error="no worker can run it")
    _emit_subtask(step, sub)
    if sub.kind == "review" and target is not None:
        if inp.peer and step.ctx.review_without_peer == "checkpoint":
            _open_checkpoint(step, "review_escalation", target,
                             message=f"No other worker can review '{target.name}'.")
            return
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(target.id),
                  message=f"No {'other ' if inp.peer else ''}worker can review "
                          f"'{target.name}'; accepted without a peer review.")
        _accept(step, target)
        return
    step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
              message=f"No worker can run '{sub.name}'; the evaluation goes on without it.")
    _quality_step_done(step, sub)


def _task_scores(step: _Step) -> dict[str, Any] | None:
    evaluations = [s.evaluation for s in step.subtasks.values()
                   if s.kind == "agent" and s.evaluation]
    if not evaluations:
        return None
    sums: dict[str, list[float]] = {}
    for ev in evaluations:
        for dim, score in (ev.get("scores") or {}).items():
            if score is not None:
                sums.setdefault(dim, []).append(float(score))
    scores: dict[str, Any] = {d: round(sum(v) / len(v), 2) for d, v in sums.items()}
    overalls = [float(e["overall"]) for e in evaluations if e.get("overall") is not None]
    scores["overall"] = round(sum(overalls) / len(overalls), 2) if overalls else None
    return scores
