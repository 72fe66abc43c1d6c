"""Row ↔ record conversion between store tables and engine values."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from shoal.engine.model import (
    AttemptRecord,
    CheckpointRecord,
    StepKind,
    StepOutput,
    SubtaskRecord,
    TaskMeta,
    TaskRecord,
)
from shoal.engine.options import StepOptions
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.store.models import (
    Attempt,
    AuditEntry,
    Checkpoint,
    Correction,
    Guidance,
    Review,
    Subtask,
    Task,
    table_of,
)

tasks = table_of(Task)
subtasks = table_of(Subtask)
attempts = table_of(Attempt)
checkpoints = table_of(Checkpoint)
RECORD_TABLES = {t.name: t for t in (table_of(Correction), table_of(Guidance), table_of(Review),
                                     table_of(AuditEntry))}


def task_from_row(row: sa.Row[Any]) -> TaskRecord:
    """A task record from a `tasks` row."""
    m = row._mapping
    return TaskRecord(
        id=m["id"], user_id=m["user_id"], description=m["description"],
        status=TaskStatus(m["status"]), created_at=m["created_at"], updated_at=m["updated_at"],
        workflow=m["workflow"], progress=m["progress"],
        checkpoint_frequency=m["checkpoint_frequency"], privacy_level=m["privacy_level"],
        tool_preferences=tuple(m["tool_preferences"] or ()),
        meta=TaskMeta.from_json(m["metadata"] or {}),
        error=m["error"], input_tokens=m["input_tokens"], output_tokens=m["output_tokens"],
        cost_usd=m["cost_usd"], started_at=m["started_at"], completed_at=m["completed_at"],
        version=m["version"], slot=m["slot"],
    )


def task_values(t: TaskRecord) -> dict[str, Any]:
    """Column values for a task record."""
    return {
        "id": t.id, "user_id": t.user_id, "description": t.description, "workflow": t.workflow,
        "status": t.status.value, "progress": t.progress,
        "checkpoint_frequency": t.checkpoint_frequency, "privacy_level": t.privacy_level,
        "tool_preferences": list(t.tool_preferences), "metadata": t.meta.to_json(),
        "error": t.error, "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
        "cost_usd": t.cost_usd, "created_at": t.created_at, "updated_at": t.updated_at,
        "started_at": t.started_at, "completed_at": t.completed_at, "version": t.version,
        "slot": t.slot,
    }


def subtask_from_row(row: sa.Row[Any]) -> SubtaskRecord:
    """A subtask record from a `subtasks` row."""
    m = row._mapping
    return SubtaskRecord(
        id=m["id"], task_id=m["task_id"], key=m["key"], role=m["role"], kind=StepKind(m["kind"]),
        name=m["name"], description=m["description"], status=SubtaskStatus(m["status"]),
        created_at=m["created_at"], progress=m["progress"],
        dependencies=tuple(_uuid(d) for d in (m["dependencies"] or ())),
        recommended_tool=m["recommended_tool"], pinned_tool=m["pinned_tool"],
        assigned_worker=m["assigned_worker"], assigned_tool=m["assigned_tool"],
        complexity=m["complexity"], priority=m["priority"], attempts=m["attempts"],
        declines=m["declines"] or 0, not_before=m["not_before"],
        current_attempt_id=m["current_attempt_id"],
        options=StepOptions.from_json(m["options"] or {}),
        output=StepOutput.from_json(m["output"]) if m["output"] is not None else None,
        error=m["error"],
        started_at=m["started_at"], completed_at=m["completed_at"], version=m["version"],
        target_id=m["target_id"], evaluation=m["evaluation"], review=m["review"],
        review_cycles=m["review_cycles"] or 0,
    )


def subtask_values(s: SubtaskRecord) -> dict[str, Any]:
    """Column values for a subtask record."""
    return {
        "id": s.id, "task_id": s.task_id, "key": s.key, "role": s.role, "kind": s.kind.value,
        "name": s.name, "description": s.description, "status": s.status.value,
        "progress": s.progress, "dependencies": [str(d) for d in s.dependencies],
        "recommended_tool": s.recommended_tool, "pinned_tool": s.pinned_tool,
        "assigned_worker": s.assigned_worker, "assigned_tool": s.assigned_tool,
        "complexity": s.complexity, "priority": s.priority, "attempts": s.attempts,
        "declines": s.declines, "not_before": s.not_before,
        "current_attempt_id": s.current_attempt_id,
        "options": s.options.to_json(),
        "output": s.output.to_json() if s.output is not None else None,
        "error": s.error, "created_at": s.created_at, "started_at": s.started_at,
        "completed_at": s.completed_at, "version": s.version, "target_id": s.target_id,
        "evaluation": dict(s.evaluation) if s.evaluation is not None else None,
        "review": dict(s.review) if s.review is not None else None,
        "review_cycles": s.review_cycles,
    }


def checkpoint_from_row(row: sa.Row[Any]) -> CheckpointRecord:
    """A checkpoint record from a `checkpoints` row."""
    m = row._mapping
    return CheckpointRecord(
        id=m["id"], task_id=m["task_id"], reason=m["reason"], status=m["status"],
        created_at=m["created_at"], subtask_id=m["subtask_id"], data=m["data"] or {},
        deadline_at=m["deadline_at"], deadline_action=m["deadline_action"],
        decided_by=m["decided_by"], decided_at=m["decided_at"], decision=m["decision"],
        notes=m["notes"], version=m["version"])


def checkpoint_values(c: CheckpointRecord) -> dict[str, Any]:
    """Column values for a checkpoint record."""
    return {"id": c.id, "task_id": c.task_id, "reason": c.reason, "status": c.status,
            "created_at": c.created_at, "subtask_id": c.subtask_id, "data": dict(c.data),
            "deadline_at": c.deadline_at, "deadline_action": c.deadline_action,
            "decided_by": c.decided_by, "decided_at": c.decided_at, "decision": c.decision,
            "notes": c.notes, "version": c.version}


def attempt_from_row(row: sa.Row[Any]) -> AttemptRecord:
    """An attempt record from an `attempts` row."""
    m = row._mapping
    return AttemptRecord(
        id=m["id"], subtask_id=m["subtask_id"], task_id=m["task_id"], worker_id=m["worker_id"],
        fence=m["fence"], tool=m["tool"], status=AttemptStatus(m["status"]),
        dispatched_at=m["dispatched_at"], lease_expires_at=m["lease_expires_at"],
        started_at=m["started_at"], finished_at=m["finished_at"], error=m["error"],
        usage=m["usage"] or {}, version=m["version"],
    )


def attempt_values(a: AttemptRecord) -> dict[str, Any]:
    """Column values for an attempt record."""
    return {
        "id": a.id, "subtask_id": a.subtask_id, "task_id": a.task_id, "worker_id": a.worker_id,
        "fence": a.fence, "tool": a.tool, "status": a.status.value,
        "lease_expires_at": a.lease_expires_at, "dispatched_at": a.dispatched_at,
        "started_at": a.started_at, "finished_at": a.finished_at, "error": a.error,
        "usage": dict(a.usage), "version": a.version,
    }


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
