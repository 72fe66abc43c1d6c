"""Response shapes of `/api/v1/subtasks`: a subtask's summary and detail, its files and their
previews."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel


class SubtaskSummary(BaseModel):
    """A subtask inside a task's detail."""

    subtask_id: uuid.UUID
    key: str
    name: str
    role: str
    status: str
    progress: int
    dependencies: list[uuid.UUID]
    assigned_worker: str | None
    assigned_worker_id: uuid.UUID | None
    assigned_tool: str | None
    recommended_tool: str | None
    attempts: int
    error: str | None
    started_at: datetime | None
    completed_at: datetime | None
    kind: str = "agent"  # agent | expand | evaluate | judge | review | correct | human | gate
    target_id: uuid.UUID | None = None  # quality steps: the subtask they serve
    evaluation: dict[str, Any] | None = None
    review: dict[str, Any] | None = None
    review_cycles: int = 0
    plan_type: str | None = None  # a typed plan's task (or its gate's judge or retry): its type
    wave: int | None = None  # a typed plan's task: its wave, from 0
    gap: str | None = None  # a typed plan's task that was skipped: why

    @classmethod
    def from_row(cls, s: Any) -> SubtaskSummary:
        """A subtask row (with its worker's name) in the API's shape."""
        options = s.options if isinstance(s.options, dict) else {}
        return cls(
            subtask_id=s.id, key=s.key, name=s.name, role=s.role, status=s.status,
            progress=s.progress, dependencies=[uuid.UUID(str(d)) for d in s.dependencies or []],
            assigned_worker=s.worker_name, assigned_worker_id=s.assigned_worker,
            assigned_tool=s.assigned_tool, recommended_tool=s.recommended_tool,
            attempts=s.attempts, error=s.error, started_at=s.started_at,
            completed_at=s.completed_at, kind=s.kind, target_id=s.target_id,
            evaluation=s.evaluation, review=s.review, review_cycles=s.review_cycles or 0,
            plan_type=_typed(options, "plan_type", str), wave=_typed(options, "wave", int),
            gap=_typed(options, "gap", str),
        )


def _typed(options: dict[str, Any], name: str, kind: type) -> Any:
    value = options.get(name)
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


class SubtaskDetail(SubtaskSummary):
    """`GET /api/v1/subtasks/{id}`: a subtask with its output and attempts."""

    task_id: uuid.UUID
    description: str
    output: dict[str, Any] | None
    attempt_history: list[dict[str, Any]]


class FileEntry(BaseModel):
    """One file in a subtask's manifest."""

    path: str
    size: int
    sha256: str


class FileList(BaseModel):
    """`GET /api/v1/subtasks/{id}/files`."""

    subtask_id: uuid.UUID
    files: list[FileEntry]


class FilePreview(BaseModel):
    """`GET /api/v1/subtasks/{id}/previews/{path}`: a produced file to read in the dashboard,
    highlighted, with its changes since the version written before it in the same work (by
    an earlier accepted attempt, or by the subtask a correction fixed)."""

    path: str
    size: int
    sha256: str
    attempt_id: uuid.UUID
    language: str | None  # the highlighter's name for it; None when it is not shown
    html: str | None  # highlighted lines (Pygments' escaped HTML, classes only)
    note: str | None  # why `html` is None: binary, or too large
    previous_attempt_id: uuid.UUID | None  # None: nothing wrote this file before
    diff_html: str | None  # the unified diff from that version ("" when unchanged)
