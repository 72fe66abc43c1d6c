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

from shoal.engine.options import StepOptions
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus


class StepKind(StrEnum):
    """What a subtask is: the closed set of step kinds the engine runs."""

    AGENT = "agent"  # one unit of work for a role; counted in the task's progress
    EXPAND = "expand"  # a role's output becomes subtasks with dependencies (the planner)
    EVALUATE = "evaluate"  # quality: the analysers over a work subtask's files
    JUDGE = "judge"  # quality: a model scores a work subtask
    REVIEW = "review"  # quality: a peer reviews a work subtask
    CORRECT = "correct"  # quality: the author fixes a work subtask
    HUMAN = "human"  # a person answers a workflow's question (no worker runs it)
    GATE = "gate"  # a workflow compares a score with its threshold (no worker runs it)
    CHECK = "check"  # code, not a model, checks a work subtask's answer (its citations)


QUALITY_KINDS = frozenset({StepKind.EVALUATE, StepKind.JUDGE, StepKind.REVIEW})
"""The steps that judge another subtask (`target_id`) without changing it."""
SERVING_KINDS = QUALITY_KINDS | {StepKind.CORRECT, StepKind.CHECK}
"""The steps that serve another subtask (`target_id`): its quality steps and corrections."""


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file a step produced, stored content-addressed."""

    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> FileRef:
        return cls(str(entry["path"]), int(entry.get("size", 0)), str(entry["sha256"]))


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What a step produced: stored as the JSON object of `subtasks.output` (`to_json`)."""

    text: str = ""
    files: tuple[FileRef, ...] = ()
    rejected_files: tuple[Mapping[str, Any], ...] = ()  # as the worker reported them
    usage: Mapping[str, Any] = field(default_factory=dict)
    answers: bool = False  # a step that answers in JSON: `parsed` is stored, even when None
    parsed: Mapping[str, Any] | None = None  # that answer, checked
    parse_error: str | None = None  # why the answer could not be read, after the repair
    approval_requests: tuple[Mapping[str, Any], ...] = ()  # what the agent asked a person
    accepted: bool = False  # the quality loop accepted it
    corrected_by: str | None = None  # the correction step whose work it now holds

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "text": self.text, "files": [f.to_json() for f in self.files],
            "rejected_files": [dict(r) for r in self.rejected_files], "usage": dict(self.usage)}
        if self.answers:
            out["parsed"] = dict(self.parsed) if self.parsed is not None else None
        if self.parse_error is not None:
            out["parse_error"] = self.parse_error
        if self.approval_requests:
            out["approval_requests"] = [dict(d) for d in self.approval_requests]
        if self.accepted:
            out["accepted"] = True
        if self.corrected_by is not None:
            out["corrected_by"] = self.corrected_by
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepOutput:
        parsed = data.get("parsed")
        return cls(
            text=str(data.get("text", "")),
            files=tuple(FileRef.from_json(f) for f in data.get("files") or ()),
            rejected_files=tuple(data.get("rejected_files") or ()),
            usage=data.get("usage") or {}, answers="parsed" in data,
            parsed=parsed if isinstance(parsed, Mapping) else None,
            parse_error=data.get("parse_error"),
            approval_requests=tuple(data.get("approval_requests") or ()),
            accepted=bool(data.get("accepted")), corrected_by=data.get("corrected_by"))


@dataclass(frozen=True, slots=True)
class Deadline:
    """How long a checkpoint may wait for a person, and what happens then."""

    seconds: float
    action: str = "escalate"  # escalate | approve | reject


class BudgetLimit(StrEnum):
    """What a task's budget limits."""

    TOKENS = "tokens"  # input and output tokens together
    COST_USD = "cost_usd"
    SECONDS = "seconds"  # from its start, waiting at checkpoints included


@dataclass(frozen=True, slots=True)
class Budget:
    """What a task may spend (None: no limit on that)."""

    tokens: int | None = None
    cost_usd: float | None = None
    seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("tokens", self.tokens), ("cost_usd", self.cost_usd),
                                  ("seconds", self.seconds)) if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budget:
        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) and value > 0 else None

        tokens = number("tokens")
        return cls(tokens=int(tokens) if tokens is not None else None,
                   cost_usd=number("cost_usd"), seconds=number("seconds"))

    def spent_past(self, tokens: int, cost_usd: float, seconds: float) -> BudgetLimit | None:
        """The first limit that `tokens`, `cost_usd` and `seconds` reach, if any."""
        if self.tokens is not None and tokens >= self.tokens:
            return BudgetLimit.TOKENS
        if self.cost_usd is not None and cost_usd >= self.cost_usd:
            return BudgetLimit.COST_USD
        if self.seconds is not None and seconds >= self.seconds:
            return BudgetLimit.SECONDS
        return None


@dataclass(frozen=True, slots=True)
class SourceRef:
    """One of the user's files a task reads: under `sources/<name>` of its workspaces."""

    name: str
    kind: str
    size: int
    sha256: str
    text_sha256: str  # its text, as extracted at upload

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "size": self.size,
                "sha256": self.sha256, "text_sha256": self.text_sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceRef:
        return cls(str(data["name"]), str(data.get("kind", "")), int(data.get("size", 0)),
                   str(data["sha256"]), str(data.get("text_sha256", "")))


@dataclass(frozen=True, slots=True)
class TaskMeta:
    """What a task asked for besides its description: the user's requirements, kept as they
    gave them, and Shoal's settings for it. Stored as one JSON object (`tasks.metadata`) with
    Shoal's keys, prefixed `shoal.`, beside the requirements."""

    requirements: Mapping[str, Any] = field(default_factory=dict)
    permissions: Mapping[str, Any] | None = None  # the permission policy of its agents
    quality: bool = True  # whether work steps go through the quality loop
    checkpoint_deadline: Deadline | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)  # a document workflow's
    workflow: Mapping[str, Any] | None = None  # the document the task runs, pinned at submit
    skip: frozenset[str] = frozenset()  # the document's optional steps the user switched off
    plan: tuple[Mapping[str, Any], ...] = ()  # the user's own plan, as sent (read at its start)
    budget: Budget | None = None  # what it may spend
    sources: tuple[SourceRef, ...] = ()  # the user's files it reads

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.requirements.items() if not str(k).startswith("shoal.")}
        if self.permissions is not None:
            out[PERMISSIONS_KEY] = dict(self.permissions)
        if not self.quality:
            out[QUALITY_KEY] = "off"
        if self.checkpoint_deadline is not None:
            out[DEADLINE_KEY] = {"seconds": self.checkpoint_deadline.seconds,
                                 "action": self.checkpoint_deadline.action}
        if self.parameters:
            out[PARAMETERS_KEY] = dict(self.parameters)
        if self.workflow is not None:
            out[WORKFLOW_KEY] = dict(self.workflow)
        if self.skip:
            out[SKIP_KEY] = sorted(self.skip)
        if self.plan:
            out[PLAN_KEY] = [dict(item) for item in self.plan]
        if self.budget is not None:
            out[BUDGET_KEY] = self.budget.to_json()
        if self.sources:
            out[SOURCES_KEY] = [s.to_json() for s in self.sources]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskMeta:
        permissions = data.get(PERMISSIONS_KEY)
        deadline = data.get(DEADLINE_KEY)
        parameters = data.get(PARAMETERS_KEY)
        workflow = data.get(WORKFLOW_KEY)
        skip = data.get(SKIP_KEY)
        plan = data.get(PLAN_KEY)
        budget = data.get(BUDGET_KEY)
        sources = data.get(SOURCES_KEY)
        seconds = deadline.get("seconds") if isinstance(deadline, Mapping) else None
        return cls(
            requirements={k: v for k, v in data.items() if not str(k).startswith("shoal.")},
            permissions=permissions if isinstance(permissions, Mapping) else None,
            quality=data.get(QUALITY_KEY, "on") != "off",
            checkpoint_deadline=Deadline(float(seconds), str(deadline.get("action", "escalate")))
            if isinstance(deadline, Mapping) and seconds else None,
            parameters=parameters if isinstance(parameters, Mapping) else {},
            workflow=workflow if isinstance(workflow, Mapping) else None,
            skip=frozenset(str(s) for s in skip) if isinstance(skip, list) else frozenset(),
            plan=tuple(p for p in plan if isinstance(p, Mapping)) if isinstance(plan, list)
            else (),
            budget=Budget.from_json(budget) if isinstance(budget, Mapping) else None,
            sources=tuple(SourceRef.from_json(s) for s in sources if isinstance(s, Mapping))
            if isinstance(sources, list) else ())


PERMISSIONS_KEY = "shoal.permissions"
QUALITY_KEY = "shoal.quality"  # "on" (the default) or "off"
DEADLINE_KEY = "shoal.checkpoint_deadline"  # {"seconds": s, "action": a}
PARAMETERS_KEY = "shoal.parameters"  # a document workflow's parameters, as given
WORKFLOW_KEY = "shoal.workflow"  # the workflow document a task runs, as it was at submit
SKIP_KEY = "shoal.skip"  # the optional steps of that document the user switched off
SOURCES_KEY = "shoal.sources"  # [{"name", "kind", "size", "sha256", "text_sha256"}]
BUDGET_KEY = "shoal.budget"  # {"tokens": n, "cost_usd": x, "seconds": s}, each optional
PLAN_KEY = "shoal.plan"  # the user's own plan, kept until the task starts (it may wait)


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
    meta: TaskMeta = field(default_factory=TaskMeta)
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    started_at: datetime | None = None
    completed_at: datetime | None = None
    version: int = 1
    slot: int | None = None  # the user's active-task slot it holds while it runs

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
    attempts: int = 0  # tries spent (the retry policy's count)
    declines: int = 0  # attempts a worker declined for want of room: no try spent
    not_before: datetime | None = None
    current_attempt_id: uuid.UUID | None = None
    options: StepOptions = field(default_factory=StepOptions)
    output: StepOutput | None = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    target_id: uuid.UUID | None = None  # quality steps: the agent subtask they serve
    evaluation: Mapping[str, Any] | None = None  # agent subtasks: the latest scores
    review: Mapping[str, Any] | None = None  # agent subtasks: the latest peer review
    review_cycles: int = 0  # peer reviews done on this subtask
    version: int = 1


def serving_key(kind: StepKind, number: int, target: SubtaskRecord) -> str:
    """The key of the `number`th step of `kind` that serves `target` (evaluates, judges,
    reviews or fixes it). It names the target by the random end of its id: subtasks made in
    one decision have ids that begin alike (`shoal.ids.new_ordered_id`), and a task's keys
    are unique."""
    return f"{kind}-{number}-{target.id.hex[-12:]}"


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
class WrittenFile:
    """A file the engine itself writes for a subtask (a partial result written from what was
    done): stored by the runtime as a version of that subtask's file, `id` standing for the
    attempt that would have produced it."""

    id: uuid.UUID
    subtask_id: uuid.UUID
    path: str
    text: str


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
    # (runs, completed ones) of each round (`Step.round_counts`): derived and kept the same way.
    rounds: Mapping[str, tuple[int, int]] | None = field(default=None, compare=False, repr=False)


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
    generated `__init__`. (Subscripts rather than `dict.get` and keys rather than `items()`:
    this runs for every record a decision changes.)"""
    cls = type(record)
    try:
        copy = _COPIERS[cls]
    except KeyError:
        copy = _generated(cls, _COPIERS, _copy_source)
    new: R = copy(record)
    if changes:
        setters = _SETTERS[cls]  # (filled by `_generated` with the copier)
        for name in changes:
            try:
                setter = setters[name]
            except KeyError:
                raise TypeError(f"{cls.__name__} has no field {name!r}") from None
            setter(new, changes[name])
    return new


def changed_fields(before: R, after: R) -> tuple[str, ...]:
    """The names of the fields whose values differ between two records of one class, in the
    class's order. The generated comparison sets one bit per differing field (no call per
    field); each distinct set of bits is named once."""
    cls = type(after)
    try:
        diff, named = _DIFFERS[cls]
    except KeyError:
        diff = _generated(cls, {}, _diff_source)
        diff, named = _DIFFERS[cls] = (diff, {})
    mask: int = diff(before, after)
    try:
        found: tuple[str, ...] = named[mask]
    except KeyError:
        names = record_fields(cls)
        found = named[mask] = tuple(n for i, n in enumerate(names) if mask >> i & 1)
    return found


_COPIERS: dict[type, Any] = {}
_DIFFERS: dict[type, tuple[Any, dict[int, tuple[str, ...]]]] = {}
_SETTERS: dict[type, dict[str, Any]] = {}  # each field's slot setter, by name


def _copy_source(names: tuple[str, ...]) -> list[str]:
    # Each field through its own slot's setter (`_generated` binds `set_<name>`): no look-up
    # of the field by name on the class, as `object.__setattr__` makes (1.07 µs for a
    # subtask's 31 fields against 1.74, `python -m timeit`).
    return ["def fn(r):", "    n = new(cls)",
            *(f"    set_{name}(n, r.{name})" for name in names), "    return n"]


def _diff_source(names: tuple[str, ...]) -> list[str]:
    lines = ["def fn(a, b):", "    m = 0"]
    for i, name in enumerate(names):
        lines += [f"    x, y = a.{name}, b.{name}",
                  f"    if x is not y and x != y: m |= {1 << i}"]
    return [*lines, "    return m"]


def _generated(cls: type, cache: dict[type, Any], source: Any) -> Any:
    """A function for `cls` from `source(field names)`, compiled once: straight-line attribute
    reads instead of a `getattr` call per field. Only the dataclass's own field names (valid
    identifiers) go into the code."""
    names = record_fields(cls)
    setters = _setters(cls)
    env: dict[str, Any] = {"new": object.__new__, "cls": cls}
    env.update((f"set_{name}", setters[name]) for name in names)
    exec("\n".join(source(names)), env)
    cache[cls] = env["fn"]
    return env["fn"]


def _setters(cls: type) -> dict[str, Any]:
    """Each field of `cls` by name, with the setter of its slot (a frozen record refuses
    `setattr`; the slot's own descriptor sets it with no look-up by name on the class)."""
    found = _SETTERS.get(cls)
    if found is None:
        slots = {name: k.__dict__[name] for k in reversed(cls.__mro__)
                 for name in getattr(k, "__slots__", ())}
        missing = [name for name in record_fields(cls) if name not in slots]
        if missing:
            raise TypeError(f"{cls.__name__} is not a slotted dataclass: no slot {missing[0]!r}")
        found = _SETTERS[cls] = {name: slots[name].__set__ for name in record_fields(cls)}
    return found
