"""Request and response shapes of the REST API (seed 004 §4.1), Pydantic at the boundary."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from shoal.limits import MAX_INT64, value_problem

ToolName = Literal[
    "claude_code", "gemini_cli", "codex", "ollama", "anthropic", "openai", "gemini",
    "openai_compat", "echo",
]
MAX_DESCRIPTION = 20_000
MAX_ANSWER = 20_000  # characters of an answer to a workflow's question


class _Strict(BaseModel):
    """A request body: unknown fields refused, every string storable, numbers finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        found = value_problem(value)
        if found:
            inner, problem = found
            # `inner` is the path inside a JSON field (requirements, options); the error
            # handler appends it to the field's name.
            raise PydanticCustomError("unstorable_text", "{problem}",
                                      {"inner": inner, "problem": problem})
        return value


class PlanItem(_Strict):
    """One subtask of a plan the user brings (skips the planner)."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(min_length=1, max_length=MAX_DESCRIPTION)
    dependencies: list[int | str] = Field(default_factory=list, max_length=500)
    tool: ToolName | None = None
    recommended_tool: ToolName | None = None
    complexity: int = Field(3, ge=1, le=5)
    options: dict[str, Any] = Field(default_factory=dict)


class Permissions(_Strict):
    """What agents of a task may do without asking (edits outside the workspace: never)."""

    edits: Literal["allow", "deny", "ask"] = "allow"
    commands: Literal["allow", "deny", "ask"] = "allow"
    mcp: Literal["allow", "deny", "ask"] = "allow"  # the tools of a role's MCP servers


class CheckpointDeadline(_Strict):
    """How long a checkpoint may wait for a person, and what happens then."""

    seconds: float = Field(gt=0, le=30 * 24 * 3600)
    action: Literal["escalate", "approve", "reject"] = "escalate"


class InsertedRole(_Strict):
    """A role of the user's own, run right after a step of the workflow that allows it; what
    it says is shown to the steps that came after that one."""

    after: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    prompt: str = Field(min_length=1, max_length=20_000)
    tools: list[ToolName] = Field(default_factory=list, max_length=9)


class BudgetIn(_Strict):
    """What a task may spend; each limit optional. Past one, the task ends `budget_exceeded`
    (what its steps finished is kept)."""

    tokens: int | None = Field(None, ge=1, le=MAX_INT64, description="input and output tokens")
    cost_usd: float | None = Field(None, gt=0, le=1e9)
    seconds: float | None = Field(None, gt=0, le=366 * 86400, description="from its start")


class DailyBudgetIn(_Strict):
    """What a user may spend in a day (UTC) across their tasks; each limit optional."""

    tokens: int | None = Field(None, ge=1, le=MAX_INT64)
    cost_usd: float | None = Field(None, gt=0, le=1e9)


class TaskCreate(_Strict):
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


class ErrorBody(BaseModel):
    """Every error answer: a stable code, a sentence saying what to do, and details (for a
    validation error, a list of `{field, message, type}`)."""

    error: str = Field(description="A stable code (`not_found`, `validation_error`, …).")
    message: str = Field(description="What happened and what to do, for a person.")
    details: Any = Field(None, description="More about it: for a validation error, a list of "
                                           "`{field, message, type}`.")


class TaskCreated(BaseModel):
    """Answer to a submission."""

    task_id: uuid.UUID
    status: str
    message: str
    # Only for a task that waits (the seed's answer has exactly the three fields above).
    queue_position: int | None = Field(None, exclude_if=lambda v: v is None,
                                       description="`queued`: its place in your queue (1 next)")


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


class Login(_Strict):
    """`POST /api/v1/auth/login`."""

    username: str = Field(min_length=1, max_length=50)
    password: str = Field(min_length=1, max_length=200)


class Refresh(_Strict):
    """`POST /api/v1/auth/refresh`."""

    refresh_token: str = Field(min_length=1, max_length=4096)


class Exchange(_Strict):
    """`POST /api/v1/auth/exchange`: trade a one-time login link token for a session."""

    token: str = Field(min_length=1, max_length=256)


class TokenPairOut(BaseModel):
    """Access and refresh tokens."""

    access_token: str
    refresh_token: str
    token_type: str = "bearer"
    expires_in: int


class UserCreate(_Strict):
    """`POST /api/v1/users` (admins only)."""

    username: str = Field(min_length=1, max_length=50, pattern=r"^[A-Za-z0-9_.@-]+$")
    password: str = Field(min_length=8, max_length=72)
    email: str | None = Field(None, max_length=255)
    is_admin: bool = False


class UserPublic(BaseModel):
    """A user as the API shows them, with their own limits (None: the server's apply)."""

    user_id: uuid.UUID
    username: str
    email: str | None
    is_admin: bool
    created_at: datetime
    max_active_tasks: int | None = None
    daily_budget: dict[str, Any] | None = None


class UserLimits(_Strict):
    """`PATCH /api/v1/users/{id}` (admins only): a user's own limits; null returns a limit
    to the server's setting."""

    max_active_tasks: int | None = Field(None, ge=1, le=10_000)
    daily_budget: DailyBudgetIn | None = None


class WorkerTokenCreate(_Strict):
    """`POST /api/v1/workers/tokens`."""

    name: str = Field(min_length=1, max_length=100)


class WorkerTokenCreated(BaseModel):
    """A new worker token; shown once."""

    token_id: uuid.UUID
    name: str
    token: str


class WorkerTokenPublic(BaseModel):
    """A worker token without its secret."""

    token_id: uuid.UUID
    name: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class ResourceSample(BaseModel):
    """One heartbeat's resource readings."""

    at: datetime
    cpu_percent: float
    memory_percent: float
    disk_percent: float


class WorkerPublic(BaseModel):
    """A worker in the list (seed §4.1.2)."""

    worker_id: uuid.UUID
    machine_id: str
    machine_name: str
    status: str
    tools: list[str]
    tool_details: list[dict[str, Any]]
    slots: int
    resources: dict[str, float | None]
    current_task: uuid.UUID | None
    last_heartbeat: datetime | None
    registered_at: datetime
    recent: list[ResourceSample] = Field(default_factory=list, description=(
        "The last heartbeats' readings, oldest first (up to 60), while the worker is "
        "connected to the control-plane copy that answers"))


class WorkerDetail(WorkerPublic):
    """One worker with its system info and recent history."""

    system_info: dict[str, Any]
    current: dict[str, Any] | None
    task_history: list[dict[str, Any]]


class WorkerList(BaseModel):
    """`GET /api/v1/workers`."""

    workers: list[WorkerPublic]


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


class AnswerBody(_Strict):
    """`POST /api/v1/checkpoints/{id}/answer` (and the client socket's `answer` frame): the
    answer to a workflow's question, trimmed; only blanks is no answer."""

    answer: str = Field(min_length=1, max_length=MAX_ANSWER)

    @field_validator("answer")
    @classmethod
    def _answer_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("answer must not be blank")
        return value.strip()


class RejectBody(_Strict):
    """`POST /api/v1/checkpoints/{id}/reject`."""

    reason: str = Field("", max_length=5000)


class CorrectBody(_Strict):
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
