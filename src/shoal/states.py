"""Lifecycles: one enum per kind of thing, one transition table each, one function to move.

`transition(current, target)` is the only way a status changes; it raises `Conflict` when the
table does not allow the move, so an illegal change can never be half-applied.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from shoal.errors import Conflict


class TaskStatus(StrEnum):
    """Where a task is in its life."""

    QUEUED = "queued"  # waiting for one of its user's active-task slots
    PENDING = "pending"
    INITIALIZING = "initializing"  # the planner is running
    IN_PROGRESS = "in_progress"
    CHECKPOINT = "checkpoint_pending"  # waiting for a person to decide a checkpoint
    AWAITING_INPUT = "awaiting_input"  # waiting for a person to answer a workflow's question
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET_EXCEEDED = "budget_exceeded"


class SubtaskStatus(StrEnum):
    """Where one node of the task graph is."""

    PENDING = "pending"  # dependencies not met yet
    QUEUED = "queued"  # ready; waiting for a worker (or for its retry time)
    IN_PROGRESS = "in_progress"  # an attempt holds it
    VERIFYING = "verifying"  # produced; being evaluated and reviewed (dependents wait)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CORRECTING = "correcting"  # a correction of its output runs (review or a person asked)


class AttemptStatus(StrEnum):
    """One try of a subtask on one worker."""

    DISPATCHED = "dispatched"  # sent; the worker has not confirmed yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"  # its lease ran out; a late result is refused
    CANCELLED = "cancelled"
    DECLINED = "declined"  # the worker had no room (or was leaving): it never ran


class WorkerStatus(StrEnum):
    """Whether a worker can take work."""

    ONLINE = "online"
    BUSY = "busy"
    OFFLINE = "offline"


S = TypeVar("S", TaskStatus, SubtaskStatus, AttemptStatus)

_TASK: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.PENDING, TaskStatus.FAILED, TaskStatus.CANCELLED}),
    TaskStatus.PENDING: frozenset(
        {TaskStatus.QUEUED, TaskStatus.INITIALIZING, TaskStatus.IN_PROGRESS, TaskStatus.FAILED,
         TaskStatus.CANCELLED}
    ),
    TaskStatus.INITIALIZING: frozenset(
        {TaskStatus.IN_PROGRESS, TaskStatus.FAILED, TaskStatus.CANCELLED,
         TaskStatus.BUDGET_EXCEEDED}
    ),
    TaskStatus.IN_PROGRESS: frozenset(
        {TaskStatus.CHECKPOINT, TaskStatus.AWAITING_INPUT, TaskStatus.COMPLETED,
         TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.BUDGET_EXCEEDED}
    ),
    TaskStatus.CHECKPOINT: frozenset(
        {TaskStatus.IN_PROGRESS, TaskStatus.FAILED, TaskStatus.CANCELLED,
         TaskStatus.BUDGET_EXCEEDED}
    ),
    TaskStatus.AWAITING_INPUT: frozenset(
        {TaskStatus.IN_PROGRESS, TaskStatus.FAILED, TaskStatus.CANCELLED,
         TaskStatus.BUDGET_EXCEEDED}
    ),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
    TaskStatus.BUDGET_EXCEEDED: frozenset(),
}

_SUBTASK: dict[SubtaskStatus, frozenset[SubtaskStatus]] = {
    # PENDING → COMPLETED: a typed plan's task skipped as a gap before it ran (`gap` says why).
    SubtaskStatus.PENDING: frozenset({SubtaskStatus.QUEUED, SubtaskStatus.CANCELLED,
                                      SubtaskStatus.COMPLETED}),
    SubtaskStatus.QUEUED: frozenset(
        {SubtaskStatus.IN_PROGRESS, SubtaskStatus.FAILED, SubtaskStatus.CANCELLED}
    ),
    SubtaskStatus.IN_PROGRESS: frozenset(
        {SubtaskStatus.COMPLETED, SubtaskStatus.VERIFYING, SubtaskStatus.QUEUED,
         SubtaskStatus.FAILED, SubtaskStatus.CANCELLED}
    ),
    SubtaskStatus.VERIFYING: frozenset(
        {SubtaskStatus.COMPLETED, SubtaskStatus.CORRECTING, SubtaskStatus.FAILED,
         SubtaskStatus.CANCELLED}
    ),
    SubtaskStatus.COMPLETED: frozenset({SubtaskStatus.CORRECTING}),
    SubtaskStatus.CORRECTING: frozenset(
        {SubtaskStatus.VERIFYING, SubtaskStatus.COMPLETED, SubtaskStatus.FAILED,
         SubtaskStatus.CANCELLED}
    ),
    SubtaskStatus.FAILED: frozenset(),
    SubtaskStatus.CANCELLED: frozenset(),
}

_ATTEMPT: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    AttemptStatus.DISPATCHED: frozenset(
        {AttemptStatus.RUNNING, AttemptStatus.SUCCEEDED, AttemptStatus.FAILED,
         AttemptStatus.EXPIRED, AttemptStatus.CANCELLED, AttemptStatus.DECLINED}
    ),
    AttemptStatus.RUNNING: frozenset(
        {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.EXPIRED,
         AttemptStatus.CANCELLED}
    ),
    AttemptStatus.SUCCEEDED: frozenset(),
    AttemptStatus.FAILED: frozenset(),
    AttemptStatus.EXPIRED: frozenset(),
    AttemptStatus.CANCELLED: frozenset(),
    AttemptStatus.DECLINED: frozenset(),
}

_TABLES: dict[type, dict[object, frozenset[object]]] = {
    TaskStatus: _TASK,  # type: ignore[dict-item]
    SubtaskStatus: _SUBTASK,  # type: ignore[dict-item]
    AttemptStatus: _ATTEMPT,  # type: ignore[dict-item]
}

TERMINAL_TASK = frozenset(s for s, nxt in _TASK.items() if not nxt)
PAUSED_TASK = frozenset({TaskStatus.CHECKPOINT, TaskStatus.AWAITING_INPUT})  # nothing dispatched
TERMINAL_SUBTASK = frozenset({SubtaskStatus.COMPLETED, SubtaskStatus.FAILED,
                              SubtaskStatus.CANCELLED})
TERMINAL_ATTEMPT = frozenset(s for s, nxt in _ATTEMPT.items() if not nxt)
LIVE_ATTEMPT = frozenset({AttemptStatus.DISPATCHED, AttemptStatus.RUNNING})
LIVE_ATTEMPT_VALUES = (AttemptStatus.DISPATCHED.value, AttemptStatus.RUNNING.value)
"""The live statuses as stored, in the order the index of live attempts names them: a query
that is to use that index (a partial one) names them as literals in this order."""


def can_transition(current: S, target: S) -> bool:
    """Whether the lifecycle table allows `current` → `target`."""
    return target in _TABLES[type(current)][current]


def transition(current: S, target: S) -> S:
    """Return `target` if the move is allowed; otherwise raise `Conflict`."""
    if not can_transition(current, target):
        kind = type(current).__name__.removesuffix("Status").lower()
        raise Conflict(
            f"A {kind} cannot go from {current.value!r} to {target.value!r}.",
            details={"from": current.value, "to": target.value},
            code="illegal_transition",
        )
    return target
