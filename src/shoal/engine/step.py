"""The working copy of one task while a decision is made, and what a decision yields.

`Step` is mutable so the engine's functions can record changes one by one; `Step.finish()`
freezes them into a `Decision`: the new state plus exactly what changed (rows to write, events
to append, attempts to cancel, files the engine wrote). `Context` is all a decision may know
about the world.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from shoal import ids
from shoal.engine.model import (
    AttemptRecord,
    CheckpointRecord,
    Record,
    StepKind,
    SubtaskRecord,
    TaskState,
    WrittenFile,
    evolve,
)
from shoal.engine.quality import PENDING_REVIEW
from shoal.engine.retry import RetryPolicy
from shoal.events import EventType, NewEvent
from shoal.states import LIVE_ATTEMPT, SubtaskStatus

ROUND_KINDS = frozenset({StepKind.AGENT, StepKind.HUMAN, StepKind.GATE})  # a workflow's runs


@dataclass(frozen=True, slots=True)
class Context:
    """What a decision may know about the world: time, chance, ids, policies, limits."""

    now: datetime
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rand: float = 0.5
    new_id: Callable[[], uuid.UUID] = ids.new_id  # what a person names by its id's start
    new_ordered_id: Callable[[], uuid.UUID] = ids.new_ordered_id  # rows made in bulk
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
    files: list[WrittenFile] = field(default_factory=list)  # written by the engine itself


class Step:
    """A mutable working copy of one task's state while a decision is made."""

    def __init__(self, state: TaskState, ctx: Context) -> None:
        self.ctx = ctx
        self.task = state.task
        self.subtasks = dict(state.subtasks)
        self.attempts = dict(state.attempts)
        self.checkpoints = dict(state.checkpoints)
        self._dependents = state.dependents
        self._agents = state.agents
        self._rounds = state.rounds
        self._rounds_copied = False  # the carried counts are shared until this step changes them
        self._own_rounds: dict[str, tuple[int, int]] = {}  # this step's copy, once it has one
        # What a workflow derived from the subtasks during this decision (its rounds of a step,
        # say), kept until a subtask changes: read several times, computed once.
        self.derived: dict[Any, Any] = {}
        self.d = Decision(state=state)
        self._task_id = ""  # the task's id as text, for its events: made once per decision

    # -- recording changes --
    def set_task(self, **changes: Any) -> None:
        self.task = evolve(self.task, updated_at=self.ctx.now, **changes)
        self.d.task_changed = True

    def set_subtask(self, sub: SubtaskRecord, **changes: Any) -> SubtaskRecord:
        new = evolve(sub, **changes)
        sid = sub.id
        old = self.subtasks.get(sid)
        self.subtasks[sid] = new
        if not self.d.new_subtasks or sid not in self.d.new_subtasks:
            self.d.changed_subtasks.add(sid)
        if old is None or old.kind is not new.kind or old.status is not new.status:
            self._count(old, new)  # (most changes keep both: nothing to count)
        if self.derived:
            self.derived.clear()
        return new

    def add_subtask(self, sub: SubtaskRecord) -> None:
        self._count(self.subtasks.get(sub.id), sub)
        self.subtasks[sub.id] = sub
        self.d.new_subtasks.append(sub.id)
        self._dependents = None
        if self.derived:
            self.derived.clear()

    def agent_counts(self) -> tuple[int, int]:
        """(agent subtasks, completed ones): counted once per task, then kept up to date."""
        if self._agents is None:
            total = done = 0
            completed = SubtaskStatus.COMPLETED
            for s in self.subtasks.values():
                if s.kind is StepKind.AGENT:
                    total += 1
                    done += s.status is completed
            self._agents = (total, done)
        return self._agents

    def round_counts(self) -> Mapping[str, tuple[int, int]]:
        """(runs, completed ones) of each round: the subtasks of kind agent, human or gate whose
        keys share what comes before the first '.' (a workflow step's run `write#2`, or its
        runs one per item, `research#1.1`, `research#1.2` …). Counted once per task, then kept
        up to date, so a workflow knows whether a round is whole without a scan."""
        if self._rounds is None:
            counts: dict[str, tuple[int, int]] = {}
            for sub in self.subtasks.values():
                if sub.kind in ROUND_KINDS:
                    key = sub.key.partition(".")[0]
                    total, done = counts.get(key, (0, 0))
                    counts[key] = (total + 1, done + (sub.status is SubtaskStatus.COMPLETED))
            self._rounds = self._own_rounds = counts
            self._rounds_copied = True
        return self._rounds

    def _count_round(self, old: SubtaskRecord | None, new: SubtaskRecord) -> None:
        if self._rounds is None or (new.kind not in ROUND_KINDS and (
                old is None or old.kind not in ROUND_KINDS)):
            return
        completed = SubtaskStatus.COMPLETED
        if old is not None and old.kind is new.kind and (
                old.status is completed) == (new.status is completed):
            return  # most changes: a run moving on, its round's counts the same
        if self._rounds_copied:
            counts = self._own_rounds
        else:
            counts = self._own_rounds = dict(self._rounds)
            self._rounds, self._rounds_copied = counts, True
        if old is not None and old.kind in ROUND_KINDS:
            key = old.key.partition(".")[0]
            total, done = counts[key]
            counts[key] = (total - 1, done - (old.status is completed))
        if new.kind in ROUND_KINDS:
            key = new.key.partition(".")[0]
            total, done = counts.get(key, (0, 0))
            counts[key] = (total + 1, done + (new.status is completed))

    def _count(self, old: SubtaskRecord | None, new: SubtaskRecord) -> None:
        self._count_round(old, new)
        if self._agents is None:
            return
        total, done = self._agents
        completed = SubtaskStatus.COMPLETED
        if old is not None and old.kind is StepKind.AGENT:
            total, done = total - 1, done - (old.status is completed)
        if new.kind is StepKind.AGENT:
            total, done = total + 1, done + (new.status is completed)
        self._agents = (total, done)

    def dependents(self, sid: uuid.UUID) -> tuple[uuid.UUID, ...]:
        """The subtasks that depend on `sid` (the index is built once per task, not per call)."""
        if self._dependents is None:
            index: dict[uuid.UUID, list[uuid.UUID]] = {}
            for sub in self.subtasks.values():
                for dep in sub.dependencies:
                    index.setdefault(dep, []).append(sub.id)
            self._dependents = {k: tuple(v) for k, v in index.items()}
        return self._dependents.get(sid, ())

    def set_attempt(self, att: AttemptRecord, **changes: Any) -> AttemptRecord:
        new = evolve(att, **changes)
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
        new = evolve(cp, **changes)
        self.d.changed_checkpoints[cp.id] = new
        if new.status == PENDING_REVIEW:
            self.checkpoints[cp.id] = new
        else:
            self.checkpoints.pop(cp.id, None)
        return new

    def record(self, table: str, **values: Any) -> None:
        self.d.records.append(Record(table, values))

    def write_file(self, sub: SubtaskRecord, path: str, text: str) -> None:
        """Write `text` as a new version of `sub`'s file `path` (the runtime stores it)."""
        self.d.files.append(WrittenFile(self.ctx.new_ordered_id(), sub.id, path, text))

    def audit(self, user_id: uuid.UUID | None, action: str, object_type: str,
              object_id: uuid.UUID, **details: Any) -> None:
        self.record("audit_log", id=self.ctx.new_ordered_id(), user_id=user_id, action=action,
                    object_type=object_type, object_id=object_id, task_id=self.task.id,
                    details=details, created_at=self.ctx.now)

    def emit(self, type_: EventType, **data: Any) -> None:
        if not self._task_id:
            self._task_id = str(self.task.id)
        self.d.events.append(
            NewEvent(type=type_, data={"task_id": self._task_id, **data},
                     task_id=self.task.id, user_id=self.task.user_id)
        )

    def finish(self) -> Decision:
        self.d.state = TaskState(task=self.task, subtasks=self.subtasks, attempts=self.attempts,
                                 checkpoints=self.checkpoints, dependents=self._dependents,
                                 agents=self._agents, rounds=self._rounds)
        return self.d
