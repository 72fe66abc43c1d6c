"""Request and response shapes of `/api/v1/tasks`: a submission, a task's summary, detail, state,
messages, timeline and pages."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from shoal.api.schemas.base import MAX_DESCRIPTION, Strict, ToolName
from shoal.api.schemas.subtasks import SubtaskSummary
from shoal.limits import MAX_INT64


class PlanItem(Strict):
    """One subtask of a plan the user brings (skips the planner)."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(min_length=1, max_length=MAX_DESCRIPTION)
    dependencies: list[int | str] = Field(default_factory=list, max_length=500)
    tool: ToolName | None = None
    recommended_tool: ToolName | None = None
    complexity: int = Field(3, ge=1, le=5)
    options: dict[str, Any] = Field(default_factory=dict)


class Permissions(Strict):
    """What agents of a task may do without asking (edits outside the workspace: never)."""

    edits: Literal["allow", "deny", "ask"] = "allow"
    commands: Literal["allow", "deny", "ask"] = "allow"
    mcp: Literal["allow", "deny", "ask"] = "allow"  # the tools of a role's MCP servers


class CheckpointDeadline(Strict):
    """How long a checkpoint may wait for a person, and what happens then."""

    seconds: float = Field(gt=0, le=30 * 24 * 3600)
    action: Literal["escalate", "approve", "reject"] = "escalate"


class InsertedRole(Strict):
    """A role of the user's own, run right after a step of the workflow that allows it; what
    it says is shown to the steps that came after that one."""

    after: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    prompt: str = Field(min_length=1, max_length=20_000)
    tools: list[ToolName] = Field(default_factory=list, max_length=9)


class BudgetIn(Strict):
    """What a task may spend; each limit optional. Past one, the task ends `budget_exceeded`
    (what its steps finished is kept)."""

    tokens: int | None = Field(None, ge=1, le=MAX_INT64, description="input and output tokens")
    cost_usd: float | None = Field(None, gt=0, le=1e9)
    seconds: float | None = Field(None, gt=0, le=366 * 86400, description="from its start")


class DailyBudgetIn(Strict):
    """What a user may spend in a day (UTC) across their tasks; each limit optional."""

    tokens: int | None = Field(None, ge=1, le=MAX_INT64)
    cost_usd: float | None = Field(None, gt=0, le=1e9)


class TaskCreate(Strict):
    """`POST /api/v1/tasks`."""

    description: str = Field(min_length=1, max_length=MAX_DESCRIPTION,
                             description="What you want done (the prompts' `{query}`).")
    checkpoint_frequency: Literal["low", "medium", "high"] = Field(
        "medium", description="How often the quality loop stops for a person: `low` before "
                              "the last subtask, `medium` every 3 subtasks, at half-way and "
                              "before the last, `high` after every subtask.")
    privacy_level: Literal["normal", "sensitive"] = Field(
        "normal", description="`sensitive`: only tools that run on the worker's machine.")
    tool_preferences: list[ToolName] | None = Field(None, max_length=9,
                                                    description="Preferred tools, in order.")
    workflow: str = Field("dag", pattern=r"^[a-z][a-z0-9_-]{0,39}$",
                          description="The workflow that runs it (GET /api/v1/workflows).")
    parameters: dict[str, Any] | None = Field(None, description="The workflow's parameters, "
                                                                "by name.")
    skip: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")]] | None = Field(
        None, max_length=50, description="The workflow's optional steps to switch off.")
    insert: list[InsertedRole] | None = Field(None, max_length=10,
                                              description="Roles of your own, after the steps "
                                                          "that allow them.")
    requirements: dict[str, Any] | None = Field(None, description="What the task must meet "
                                                                  "besides its description, "
                                                                  "as you write it.")
    plan: list[PlanItem] | None = Field(None, min_length=1, max_length=500,
                                        description="Your own plan: the planner is skipped.")
    permissions: Permissions | None = Field(None, description="What agents may do without "
                                                              "asking.")
    quality: Literal["on", "off"] = Field("on", description="Evaluation, peer review and "
                                                            "checkpoints.")
    checkpoint_deadline: CheckpointDeadline | None = Field(
        None, description="How long a checkpoint waits for a person, and what happens then.")
    budget: BudgetIn | None = Field(None, description="What the task may spend.")
    sources: list[uuid.UUID] | None = Field(None, max_length=100, description=(
        "Ids of your uploads (POST /api/v1/uploads) the task reads, under sources/."))

    @field_validator("description")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("description must not be blank")
        return value.strip()


class TaskCreated(BaseModel):
    """Answer to a submission."""

    task_id: uuid.UUID
    status: str
    message: str
    # Only for a task that waits (the seed's answer has exactly the three fields above).
    queue_position: int | None = Field(None, exclude_if=lambda v: v is None,
                                       description="`queued`: its place in your queue (1 next)")


class Usage(BaseModel):
    """Tokens and cost a task spent."""

    input_tokens: int
    output_tokens: int
    cost_usd: float


class TaskSummary(BaseModel):
    """A task in a list."""

    task_id: uuid.UUID
    description: str
    status: str
    progress: int
    created_at: datetime
    workflow: str
    usage: Usage


class StateRevision(BaseModel):
    """One revision of a blackboard entry: what a step's round wrote."""

    revision: int
    step: str
    value: Any
    subtask_ids: list[uuid.UUID]
    completed_at: datetime | None


class TaskStateView(BaseModel):
    """`GET /api/v1/tasks/{id}/state`: a document workflow's blackboard, every revision of
    every entry (`dag`'s one entry, `work`, is its subtasks' answers in plan order)."""

    task_id: uuid.UUID
    workflow: str
    entries: dict[str, list[StateRevision]]
    state: dict[str, Any] = Field(default_factory=dict, description=(
        "The task's state in one view: query, messages, response; with a route step also "
        "plan, execution_order, agent_outputs and summary (seed 001)."))


class MessageView(BaseModel):
    """One hand-over of a workflow's message log (`shoal.workflows.messages`)."""

    id: uuid.UUID
    timestamp: datetime
    sender: str = Field(description="a role, or `user` (the person who submitted the task)")
    recipient: str
    kind: Literal["request", "output", "feedback", "question", "answer", "delegation"]
    subtask_id: uuid.UUID = Field(description="the run that receives it")
    content: str | None = Field(None, description="what was said: a request, a question, an "
                                                  "answer (else null: see entry)")
    entry: str | None = Field(None, description="the blackboard entry read, at `revision`")
    revision: int | None = None
    source_subtask_id: uuid.UUID | None = Field(None, description="the run that wrote it")


class MessagePage(BaseModel):
    """`GET /api/v1/tasks/{id}/messages`: a task's hand-overs in order, a page at a time."""

    task_id: uuid.UUID
    messages: list[MessageView]
    total: int
    limit: int
    offset: int


class WaveSummary(BaseModel):
    """A typed plan's waves (`shoal.engine.waves` defines each figure)."""

    count: int = Field(description="waves in the plan (its topological layers)")
    parallelism_ratio: float | None = Field(description=(
        "Σ planned tasks' run times ÷ (span of their runs x the most that ran at once); null "
        "until one has completed"))
    transitions_ms: list[float | None] = Field(description=(
        "per pair of waves N → N+1: the last completion of wave N to the first start of wave "
        "N+1, ms; null until both happened"))


class QuestionView(BaseModel):
    """One sub-question of a typed plan, as the engine counted it (`workflows/questions.py`)."""

    id: str
    question: str
    answered: bool
    by: list[str] | None = Field(None, description="the tasks whose findings answer it")
    searched: list[str] | None = Field(None, description="a gap: what was searched for it")
    why: str | None = Field(None, description="a gap: why nothing answers it")


class QuestionSummary(BaseModel):
    """A typed plan's sub-questions: how many of them are answered."""

    answered: int
    of: int
    questions: list[QuestionView]


class CitationCheck(BaseModel):
    """Shoal's check of a report's citations, computed in code (`workflows/checks.py`)."""

    cited: int = Field(description="sentences that cite a source")
    supported: int = Field(description="…whose source holds every figure, date and name")
    precision: float = Field(description="supported ÷ cited")
    citations: int = Field(description="citation markers in those sentences")
    resolved: int = Field(description="…that name a passage of the sources, or SQL that runs")
    resolution: float = Field(description="resolved ÷ citations")
    removed: list[dict[str, Any]] = Field(default_factory=list,
                                          description="the sentences removed, and why")


class TaskDetail(TaskSummary):
    """`GET /api/v1/tasks/{id}`."""

    checkpoint_frequency: str
    privacy_level: str
    tool_preferences: list[str]
    error: str | None
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    subtasks: list[SubtaskSummary]
    checkpoints: list[dict[str, Any]]
    evaluation_scores: dict[str, Any] | None
    queue_position: int | None = None  # `queued`: where it stands in your queue (1: next)
    budget: dict[str, Any] | None = None  # what it may spend, as submitted
    sources: list[dict[str, Any]] = Field(default_factory=list)  # the uploads it reads
    budget_remaining: dict[str, Any] | None = None  # what is left of each limit
    waves: WaveSummary | None = Field(None, exclude_if=lambda v: v is None)  # typed plans only
    phase: str | None = Field(None, exclude_if=lambda v: v is None)  # typed plans: seed 002's
    stage: str | None = Field(None, exclude_if=lambda v: v is None)  # declared stages
    questions: QuestionSummary | None = Field(None, exclude_if=lambda v: v is None)
    citations: CitationCheck | None = Field(None, exclude_if=lambda v: v is None)


class AttemptSpan(BaseModel):
    """One attempt on the task's timeline: which step, on which worker, from when to when."""

    attempt_id: uuid.UUID
    subtask_id: uuid.UUID
    subtask_name: str
    kind: str
    worker_id: uuid.UUID | None
    worker_name: str | None
    tool: str
    status: str
    dispatched_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class AttemptTimeline(BaseModel):
    """`GET /api/v1/tasks/{id}/attempts`: every attempt, in the order they were sent."""

    attempts: list[AttemptSpan]


class TaskPage(BaseModel):
    """`GET /api/v1/tasks`."""

    tasks: list[TaskSummary]
    total: int
    limit: int
    offset: int


class TaskCancelled(BaseModel):
    """Answer to a cancellation."""

    task_id: uuid.UUID
    status: str
    message: str
