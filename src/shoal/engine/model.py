"""Domain values the engine decides over: frozen records of tasks, subtasks and attempts.

The runtime loads these from the store and writes back the ones a decision changed; the
engine never sees a database row.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus


class StepKind(StrEnum):
    """What a subtask is: the closed set of step kinds the engine runs."""

    AGENT = "agent"  # one unit of work for a role; counted in the task's progress
    EXPAND = "expand"  # a role's output becomes subtasks with dependencies (the planner)
    EVALUATE = "evaluate"  # quality: the analysers over a work subtask's files
    JUDGE = "judge"  # quality: a model scores a work subtask
    REVIEW = "review"  # quality: a peer reviews a work subtask
    CORRECT = "correct"  # quality: the author fixes a work subtask


QUALITY_KINDS = frozenset({StepKind.EVALUATE, StepKind.JUDGE, StepKind.REVIEW})
"""The steps that judge another subtask (`target_id`) without changing it."""
SERVING_KINDS = QUALITY_KINDS | {StepKind.CORRECT}
"""The steps that serve another subtask (`target_id`): its quality steps and corrections."""


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task as the engine sees it."""

    id: uuid.UUID
    user_id: uuid.UUID
    description: str
    status: TaskStatus
    created_at: datetime
    updated_at: datetime
    workflow: str = "dag"
    progress: int = 0
    checkpoint_frequency: str = "medium"
    privacy_level: str = "normal"
    tool_preferences: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    started_at: datetime | None = None
    completed_at: datetime | None = None
    version: int = 1

    @property
    def sensitive(self) -> bool:
        """Whether the task may run only on local tools."""
        return self.privacy_level == "sensitive"


@dataclass(frozen=True, slots=True)
class SubtaskRecord:
    """One node of a task's graph."""

    id: uuid.UUID
    task_id: uuid.UUID
    key: str
    role: str
    name: str
    description: str
    status: SubtaskStatus
    created_at: datetime
    kind: StepKind = StepKind.AGENT
    progress: int = 0
    dependencies: tuple[uuid.UUID, ...] = ()
    recommended_tool: str | None = None
    pinned_tool: str | None = None
    assigned_worker: uuid.UUID | None = None
    assigned_tool: str | None = None
    complexity: int = 3
    priority: float = 0.0
    attempts: int = 0
    not_before: datetime | None = None
    current_attempt_id: uuid.UUID | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    output: Mapping[str, Any] | None = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    target_id: uuid.UUID | None = None  # quality steps: the agent subtask they serve
    evaluation: Mapping[str, Any] | None = None  # agent subtasks: the latest scores
    review: Mapping[str, Any] | None = None  # agent subtasks: the latest peer review
    review_cycles: int = 0  # peer reviews done on this subtask
    version: int = 1


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A pause for a person: why, about what, and what they decided."""

    id: uuid.UUID
    task_id: uuid.UUID
    reason: str  # frequency | low_score | review_escalation | approval_request
    status: str  # pending_review | approved | rejected | corrected
    created_at: datetime
    subtask_id: uuid.UUID | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    deadline_at: datetime | None = None
    deadline_action: str | None = None  # escalate | approve | reject
    decided_by: uuid.UUID | None = None
    decided_at: datetime | None = None
    decision: str | None = None  # approve | reject | correct | expired:<action>
    notes: str | None = None
    version: int = 1


@dataclass(frozen=True, slots=True)
class Record:
    """A row a decision adds beside the state (corrections, guidance, audit entries)."""

    table: str
    values: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One try of a subtask on one worker."""

    id: uuid.UUID
    subtask_id: uuid.UUID
    task_id: uuid.UUID
    worker_id: uuid.UUID | None
    fence: int
    tool: str
    status: AttemptStatus
    dispatched_at: datetime
    lease_expires_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    version: int = 1


@dataclass(frozen=True, slots=True)
class TaskState:
    """A task with its subtasks and its live attempts: all one decision needs."""

    task: TaskRecord
    subtasks: Mapping[uuid.UUID, SubtaskRecord]
    attempts: Mapping[uuid.UUID, AttemptRecord]
    checkpoints: Mapping[uuid.UUID, CheckpointRecord] = field(default_factory=dict)  # pending
    # Who depends on each subtask: derived from `subtasks`, built on first use and carried
    # from one decision to the next (a subtask's dependencies never change once it exists).
    dependents: Mapping[uuid.UUID, tuple[uuid.UUID, ...]] | None = field(
        default=None, compare=False, repr=False)
    # (agent subtasks, completed ones) for the task's progress: derived the same way, and kept
    # up to date by each decision instead of counted over every subtask after each one.
    agents: tuple[int, int] | None = field(default=None, compare=False, repr=False)


R = TypeVar("R")
_FIELDS: dict[type, tuple[str, ...]] = {}


def record_fields(cls: type) -> tuple[str, ...]:
    """The field names of one of the record dataclasses above, in order."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


def evolve(record: R, **changes: Any) -> R:
    """`dataclasses.replace` for the frozen, slotted records above, several times as fast:
    they have no `__post_init__` and no `init=False` fields, so copying every field (with code
    generated once per class) and setting `changes` gives the same value without running the
    generated `__init__`."""
    cls = type(record)
    copy = _COPIERS.get(cls) or _generated(cls, _COPIERS, _copy_source)
    new: R = copy(record)
    if changes:
        names = _NAME_SETS.get(cls) or _NAME_SETS.setdefault(cls, frozenset(record_fields(cls)))
        put = object.__setattr__
        for name, value in changes.items():
            if name not in names:
                raise TypeError(f"{cls.__name__} has no field {name!r}")
            put(new, name, value)
    return new


def changed_fields(before: R, after: R) -> list[str]:
    """The names of the fields whose values differ between two records of one class."""
    cls = type(after)
    diff = _DIFFERS.get(cls) or _generated(cls, _DIFFERS, _diff_source)
    found: list[str] = diff(before, after)
    return found


_COPIERS: dict[type, Any] = {}
_DIFFERS: dict[type, Any] = {}
_NAME_SETS: dict[type, frozenset[str]] = {}


def _copy_source(names: tuple[str, ...]) -> list[str]:
    return ["def fn(r):", "    n = new(cls)",
            *(f"    put(n, {name!r}, r.{name})" for name in names), "    return n"]


def _diff_source(names: tuple[str, ...]) -> list[str]:
    lines = ["def fn(a, b):", "    out = []"]
    for name in names:
        lines += [f"    x, y = a.{name}, b.{name}",
                  f"    if x is not y and x != y: out.append({name!r})"]
    return [*lines, "    return out"]


def _generated(cls: type, cache: dict[type, Any], source: Any) -> Any:
    """A function for `cls` from `source(field names)`, compiled once: straight-line attribute
    reads instead of a `getattr` call per field. Only the dataclass's own field names (valid
    identifiers) go into the code."""
    env: dict[str, Any] = {"new": object.__new__, "put": object.__setattr__, "cls": cls}
    exec("\n".join(source(record_fields(cls))), env)
    cache[cls] = env["fn"]
    return env["fn"]
