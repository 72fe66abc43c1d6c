"""What can happen to a task: the inputs a decision applies (`graph.decide`).

The runtime builds them from requests, worker messages and timers, already checked at the edge.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from shoal.engine import planning
from shoal.engine.model import AttemptRecord


@dataclass(frozen=True, slots=True)
class Start:
    """A task starts (just created, or let out of its user's queue) holding active-task slot
    `slot`; `plan` is the user's own graph, if they sent one."""

    plan: planning.Plan | None = None
    options: tuple[Mapping[str, Any], ...] = ()  # per planned subtask (explicit plans only)
    slot: int | None = None


@dataclass(frozen=True, slots=True)
class Queued:
    """A task was just created while its user had no active-task slot free: it waits, at
    `position` in their queue, keeping `plan`, the user's own plan as sent, for its start."""

    position: int
    plan: tuple[Mapping[str, Any], ...] = ()


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
class Declined:
    """The worker (or the copy it is connected to) had no room for an attempt, or was leaving:
    the attempt never ran, so it costs its subtask none of its tries."""

    attempt_id: uuid.UUID
    reason: str


@dataclass(frozen=True, slots=True)
class UsageReported:
    """A live attempt of a task with a budget says what it has spent so far (in all)."""

    attempt_id: uuid.UUID
    usage: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """Time passed: a task with a time budget may have run out of it."""


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """A person cancelled the task."""

    reason: str = "Cancelled by the user."


@dataclass(frozen=True, slots=True)
class CheckpointDecision:
    """A person decided a checkpoint: approve, reject, or correct a subtask with guidance."""

    checkpoint_id: uuid.UUID
    action: Literal["approve", "reject", "correct", "answer"]
    user_id: uuid.UUID | None
    reason: str = ""
    answer: str = ""  # `answer`: what the person said to a workflow's question
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


EngineInput = (Start | Queued | Dispatched | DispatchedAll | Started | Finished | Expired
               | Declined | UsageReported | BudgetCheck | CancelRequested | CheckpointDecision
               | CheckpointExpired | Unplaceable)
