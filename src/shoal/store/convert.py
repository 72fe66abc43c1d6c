"""Row ↔ record conversion between store tables and engine values."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
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


def checkpoint_from_row(row: sa.Row[Any]) -> CheckpointRecord:
    """A checkpoint record from a `checkpoints` row."""
    m = row._mapping
    return CheckpointRecord(
        id=m["id"], task_id=m["task_id"], reason=m["reason"], status=m["status"],
        created_at=m["created_at"], subtask_id=m["subtask_id"], data=m["data"] or {},
        deadline_at=m["deadline_at"], deadline_action=m["deadline_action"],
        decided_by=m["decided_by"], decided_at=m["decided_at"], decision=m["decision"],
        notes=m["notes"], version=m["version"])


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


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


# Each table's columns as Python expressions over its record `r`: the one definition from which
# a whole row (`task_values`, …) and the few columns an update changed (`column_values`) are
# built as generated functions, one call per row instead of one per column. An enum's
# `._value_` is its `.value` without the property's two calls.
_EXPRESSIONS: dict[str, dict[str, str]] = {
    "tasks": {
        "id": "r.id", "user_id": "r.user_id", "description": "r.description",
        "workflow": "r.workflow", "status": "r.status._value_", "progress": "r.progress",
        "checkpoint_frequency": "r.checkpoint_frequency", "privacy_level": "r.privacy_level",
        "tool_preferences": "list(r.tool_preferences)", "metadata": "r.meta.to_json()",
        "error": "r.error", "input_tokens": "r.input_tokens", "output_tokens": "r.output_tokens",
        "cost_usd": "r.cost_usd", "created_at": "r.created_at", "updated_at": "r.updated_at",
        "started_at": "r.started_at", "completed_at": "r.completed_at", "version": "r.version",
        "slot": "r.slot",
    },
    "subtasks": {
        "id": "r.id", "task_id": "r.task_id", "key": "r.key", "role": "r.role",
        "kind": "r.kind._value_", "name": "r.name", "description": "r.description",
        "status": "r.status._value_", "progress": "r.progress",
        "dependencies": "[str(d) for d in r.dependencies]",
        "recommended_tool": "r.recommended_tool", "pinned_tool": "r.pinned_tool",
        "assigned_worker": "r.assigned_worker", "assigned_tool": "r.assigned_tool",
        "complexity": "r.complexity", "priority": "r.priority", "attempts": "r.attempts",
        "declines": "r.declines", "not_before": "r.not_before",
        "current_attempt_id": "r.current_attempt_id", "options": "r.options.to_json()",
        "output": "r.output.to_json() if r.output is not None else None",
        "error": "r.error", "created_at": "r.created_at", "started_at": "r.started_at",
        "completed_at": "r.completed_at", "version": "r.version", "target_id": "r.target_id",
        "evaluation": "dict(r.evaluation) if r.evaluation is not None else None",
        "review": "dict(r.review) if r.review is not None else None",
        "review_cycles": "r.review_cycles",
    },
    "checkpoints": {
        "id": "r.id", "task_id": "r.task_id", "reason": "r.reason", "status": "r.status",
        "created_at": "r.created_at", "subtask_id": "r.subtask_id", "data": "dict(r.data)",
        "deadline_at": "r.deadline_at", "deadline_action": "r.deadline_action",
        "decided_by": "r.decided_by", "decided_at": "r.decided_at", "decision": "r.decision",
        "notes": "r.notes", "version": "r.version",
    },
    "attempts": {
        "id": "r.id", "subtask_id": "r.subtask_id", "task_id": "r.task_id",
        "worker_id": "r.worker_id", "fence": "r.fence", "tool": "r.tool",
        "status": "r.status._value_", "lease_expires_at": "r.lease_expires_at",
        "dispatched_at": "r.dispatched_at", "started_at": "r.started_at",
        "finished_at": "r.finished_at", "error": "r.error", "usage": "dict(r.usage)",
        "version": "r.version",
    },
}
Values = Callable[[Any], dict[str, Any]]


def column_expression(table: str, column: str) -> str:
    """The Python expression, over the record `r`, giving `column` of `table`'s row."""
    return _EXPRESSIONS[table][column]


@functools.cache
def column_values(table: str, columns: frozenset[str] | None = None) -> Values:
    """A function giving a record's values of `columns` (and its id) of `table`, or of every
    column when None; generated once per table and set of columns (a few per table)."""
    exprs = _EXPRESSIONS[table]
    names = list(exprs) if columns is None else [
        "id", *sorted(c for c in columns if c in exprs and c != "id")]
    body = ", ".join(f"{name!r}: {exprs[name]}" for name in names)
    fn: Values = eval(f"lambda r: {{{body}}}")  # only the literal expressions above
    return fn


task_values: Callable[[TaskRecord], dict[str, Any]] = column_values("tasks")
"""Column values for a task record."""
subtask_values: Callable[[SubtaskRecord], dict[str, Any]] = column_values("subtasks")
"""Column values for a subtask record."""
checkpoint_values: Callable[[CheckpointRecord], dict[str, Any]] = column_values("checkpoints")
"""Column values for a checkpoint record."""
attempt_values: Callable[[AttemptRecord], dict[str, Any]] = column_values("attempts")
"""Column values for an attempt record."""
