"""Request and response shapes of `/api/v1/checkpoints`: a checkpoint, its page, and a person's
decision on it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from shoal.api.schemas.base import MAX_ANSWER, MAX_DESCRIPTION, Strict


class CheckpointOut(BaseModel):
    """`GET /api/v1/checkpoints/{id}` (seed 004 §4.1.3, plus why and what was decided)."""

    checkpoint_id: uuid.UUID
    task_id: uuid.UUID
    task_description: str
    status: str
    reason: str
    message: str | None
    triggered_at: datetime
    subtask_id: uuid.UUID | None
    subtask: dict[str, Any] | None
    subtasks_completed: list[dict[str, Any]]
    evaluation_scores: dict[str, Any] | None
    overall_score: float | None
    average_score: float | None
    next_subtasks: list[dict[str, Any]]
    deadline_at: datetime | None
    deadline_action: str | None
    decision: str | None
    decided_by: uuid.UUID | None
    decided_at: datetime | None
    notes: str | None
    corrections: list[dict[str, Any]] = Field(default_factory=list)
    audit: list[dict[str, Any]] = Field(default_factory=list)  # who decided what, when
    question: str | None = None  # a workflow's `human` step: what the person is asked


class CheckpointPage(BaseModel):
    """`GET /api/v1/checkpoints`."""

    checkpoints: list[CheckpointOut]
    total: int
    limit: int
    offset: int


class CheckpointDecided(BaseModel):
    """Answer to approve / reject."""

    checkpoint_id: uuid.UUID
    status: str
    message: str


class AnswerBody(Strict):
    """`POST /api/v1/checkpoints/{id}/answer` (and the client socket's `answer` frame): the
    answer to a workflow's question, trimmed; only blanks is no answer."""

    answer: str = Field(min_length=1, max_length=MAX_ANSWER)

    @field_validator("answer")
    @classmethod
    def _answer_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("answer must not be blank")
        return value.strip()


class RejectBody(Strict):
    """`POST /api/v1/checkpoints/{id}/reject`."""

    reason: str = Field("", max_length=5000)


class CorrectBody(Strict):
    """`POST /api/v1/checkpoints/{id}/correct`."""

    subtask_id: uuid.UUID | None = None
    correction_type: Literal["wrong_approach", "incomplete", "bug", "style", "missing_feature",
                             "other"]
    guidance: str = Field(min_length=1, max_length=MAX_DESCRIPTION)
    reference_files: list[str] = Field(default_factory=list, max_length=50)
    apply_to_future: bool = False

    @field_validator("guidance")
    @classmethod
    def _guidance_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("guidance must not be blank")
        return value.strip()


class CorrectionStarted(BaseModel):
    """Answer to correct."""

    checkpoint_id: uuid.UUID
    correction_id: uuid.UUID | None
    correction_subtask_id: uuid.UUID | None
    status: str
    message: str
