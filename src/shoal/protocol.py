"""Worker wire protocol (DESIGN §5): versioned JSON messages over `/ws/worker`.

Every message is a JSON object with `type` and `v`. Worker → control plane: `worker_register`,
`heartbeat`, `task_accepted`, `agent_log`, `agent_tokens`, `task_result`, `task_results`.
Control plane →
worker: `registered`, `execute_task`, `execute_tasks`, `cancel_task`, `ack`, `acks`,
`resend_results`, `forget_tasks`, `error`.
`parse_worker_message` / `parse_server_message` turn raw text into the right model or raise
`pydantic.ValidationError`.

Additions past the first version are negotiated: a worker lists the ones it understands in
`worker_register.features`, the control plane in `registered.features`, and neither side sends
the other an addition it did not list. `acks`: acks of several results in one message.
`batches`: several results (`task_results`) or attempts (`execute_tasks`) that are ready at the
same moment travel in one frame instead of one frame each (ADR 0024). `agent_tokens`: a
running attempt's model text as it streams, at most one message per 50 ms per attempt.
`declines`: a worker with no free slot, or on its way out, answers an attempt with a
`task_result` of status `declined` (it never ran; the subtask keeps the try) instead of `failed`.
`resend`: `resend_results` asks a worker to send again the results of the attempts it names that
it still holds unacknowledged (a copy that took a crashed copy's tasks over asks for the results
that went to the dead one).
`forget`: `forget_tasks` tells a worker to delete what it keeps of tasks that were deleted
(their workspaces) and of sources no longer stored (their search indexes); a worker lists what
it keeps in `worker_register.kept_tasks` and `kept_sources`, so one that was away is told too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Literal, NotRequired

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypedDict  # the one pydantic can type on Python 3.11

from shoal.errors import UnstorableText
from shoal.ids import as_id
from shoal.limits import MAX_INT64, model_problem

PROTOCOL_VERSION = 1
# Most UTF-8 bytes one batched frame carries by default; a message larger than the limit travels
# alone. Senders also keep a frame within their `max_result_bytes`, as big as one message may
# be, so a frame never exceeds what the receiver accepts for a single message.
BATCH_BYTES = 1 << 20
MAX_BATCH = 256  # messages in one batched frame
WORKER_FEATURES = ("acks", "batches", "resend", "forget")  # what this version's worker understands
SERVER_FEATURES = ("batches", "agent_tokens", "declines")  # and its control plane

MAX_KEPT = 10_000  # tasks (or sources) a worker lists as kept, at most
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# An attempt's id as the worker receives it: an `Id`, whose hash and text are C, for the worker
# keys its attempts and their results by it (half a dozen lookups an attempt, each a Python
# frame with a plain UUID). The same UUID on the wire and in the schema.
AttemptKey = Annotated[uuid.UUID, AfterValidator(as_id)]
MAX_TOKENS = 10**12  # per attempt
MAX_COST_USD = 1e9
MAX_DURATION = 366 * 24 * 3600.0

ResultStatus = Literal["succeeded", "failed", "cancelled", "timed_out", "declined"]


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)
    v: int = Field(PROTOCOL_VERSION, ge=0, le=1_000)


class ToolInfo(BaseModel):
    """A tool a worker offers: its name, version, and whether it runs on this machine only."""

    model_config = ConfigDict(frozen=True)
    name: str
    version: str | None = None
    local: bool = False


class FilePayload(BaseModel):
    """One file carried inline: a relative path and its bytes in base64."""

    model_config = ConfigDict(frozen=True)
    path: str
    content_b64: str


class RejectedFile(BaseModel):
    """A file an agent produced that Shoal refused, and why."""

    model_config = ConfigDict(frozen=True)
    path: str
    reason: str


class Usage(BaseModel):
    """Tokens and cost one attempt spent (bounded so that a task's sums fit the store)."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)
    input_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    cost_usd: float = Field(0.0, ge=0, le=MAX_COST_USD)
    # The model the tool talked to, when it knows (metrics count tokens and cost by model).
    model: str | None = Field(None, max_length=200, exclude_if=lambda value: value is None)


class McpServer(BaseModel):
    """An MCP server the attempt's agent may use: a command to start with its arguments and
    environment (stdio), or a URL (Streamable HTTP). The command `shoal` is the worker's own."""

    model_config = ConfigDict(frozen=True)
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    command: str | None = Field(None, max_length=1_000)
    args: list[str] = Field(default_factory=list, max_length=100)
    url: str | None = Field(None, max_length=2_000)
    env: dict[str, str] = Field(default_factory=dict)


class UpstreamResult(BaseModel):
    """The output and files of a subtask this one depends on."""

    model_config = ConfigDict(frozen=True)
    subtask_id: uuid.UUID
    name: str
    output: str
    files: list[FilePayload] = Field(default_factory=list)


# ---- worker → control plane -------------------------------------------------------------


class WorkerRegister(_Message):
    """First message on a connection: who the worker is, what it has, what it still runs."""

    type: Literal["worker_register"] = "worker_register"
    machine_id: str = Field(min_length=1, max_length=100)
    machine_name: str = Field(min_length=1, max_length=100)
    system_info: dict[str, Any] = Field(default_factory=dict)
    tools: list[ToolInfo] = Field(default_factory=list)
    slots: int = Field(1, ge=1, le=256)
    running: list[uuid.UUID] = Field(default_factory=list)
    buffered: list[uuid.UUID] = Field(default_factory=list)  # finished, result not yet acked
    version: str | None = None
    features: list[str] = Field(default_factory=list, max_length=20)  # e.g. "acks"
    # what it keeps on disk: tasks' workspaces, and the sources its search indexes were built on
    kept_tasks: list[uuid.UUID] = Field(default_factory=list, max_length=MAX_KEPT)
    kept_sources: list[Sha256] = Field(default_factory=list, max_length=MAX_KEPT)


class Heartbeat(_Message):
    """Periodic liveness and load; renews the leases of the attempts in `running`."""

    type: Literal["heartbeat"] = "heartbeat"
    cpu_percent: float = Field(0.0, ge=0, le=100_000)  # a busy many-core machine passes 100
    memory_percent: float = Field(0.0, ge=0, le=100)
    disk_percent: float = Field(0.0, ge=0, le=100)
    running: list[uuid.UUID] = Field(default_factory=list)


class TaskAccepted(_Message):
    """The worker has started an attempt."""

    type: Literal["task_accepted"] = "task_accepted"
    attempt_id: uuid.UUID


class AttemptUsage(_Message):
    """What a running attempt of a task with a budget has spent so far, in all (sent after
    each model call the tool reports; the control plane stops the task past its budget)."""

    type: Literal["attempt_usage"] = "attempt_usage"
    attempt_id: uuid.UUID
    usage: Usage


class AgentLog(_Message):
    """A line of live output from an attempt."""

    type: Literal["agent_log"] = "agent_log"
    attempt_id: uuid.UUID
    message: str = Field(max_length=64_000)
    level: Literal["info", "warning", "error"] = "info"


class AgentTokens(_Message):
    """Model text of a running attempt as it streams (live only: clients see it as
    `agent_token` events; the attempt's `agent_log` lines keep it, line by line)."""

    type: Literal["agent_tokens"] = "agent_tokens"
    attempt_id: uuid.UUID
    text: str = Field(min_length=1, max_length=16_000)


class TaskResult(_Message):
    """The end of an attempt: output, files, usage, and a truthful end state."""

    type: Literal["task_result"] = "task_result"
    attempt_id: uuid.UUID
    fence: int = Field(ge=0, le=MAX_INT64)
    status: ResultStatus
    output: str = ""
    files: list[FilePayload] = Field(default_factory=list)
    rejected_files: list[RejectedFile] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    duration_seconds: float = Field(0.0, ge=0, le=MAX_DURATION)
    denials: list[dict[str, Any]] = Field(default_factory=list)  # tool, target, reason, …


class TaskResults(_Message):
    """Results that were ready at the same moment, in one frame: sent instead of single
    `task_result`s to a control plane that lists `batches` among its `features`."""

    type: Literal["task_results"] = "task_results"
    results: list[TaskResult] = Field(min_length=1, max_length=MAX_BATCH)


WorkerMessage = Annotated[
    WorkerRegister | Heartbeat | TaskAccepted | AttemptUsage | AgentLog | AgentTokens
    | TaskResult | TaskResults,
    Field(discriminator="type"),
]

# ---- control plane → worker -------------------------------------------------------------


class Registered(_Message):
    """Answer to `worker_register`: the worker's id and the timing it must keep."""

    type: Literal["registered"] = "registered"
    worker_id: uuid.UUID
    heartbeat_interval: float
    lease_seconds: float
    features: list[str] = Field(default_factory=list, max_length=20)  # e.g. "batches"


class BudgetLeft(BaseModel):
    """What a task may still spend (None: no limit on that)."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)
    tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    cost_usd: float | None = Field(None, ge=0, le=MAX_COST_USD)

    def allows(self, usage: Usage) -> bool:
        """Whether an attempt that has spent `usage` may make another model call."""
        if self.tokens is not None and usage.input_tokens + usage.output_tokens >= self.tokens:
            return False
        return self.cost_usd is None or usage.cost_usd < self.cost_usd


class ExecuteTask(_Message):
    """Run one attempt of a subtask."""

    type: Literal["execute_task"] = "execute_task"
    attempt_id: AttemptKey
    fence: int
    task_id: uuid.UUID
    subtask_id: uuid.UUID
    role: str
    tool: str
    name: str
    instructions: str
    upstream: list[UpstreamResult] = Field(default_factory=list)
    timeout: float = 900.0
    options: dict[str, Any] = Field(default_factory=dict)
    mcp_servers: list[McpServer] = Field(default_factory=list, max_length=20,
                                         exclude_if=lambda value: not value)
    # a workflow's final answer: the worker also saves the output as this workspace file
    output_file: str | None = Field(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.md$",
                                    exclude_if=lambda value: value is None)
    # what is left of the task's budget when this attempt starts, sent only for a task with a
    # budget: the agent makes no model call past it, and reports what it spends as it goes
    budget: BudgetLeft | None = Field(None, exclude_if=lambda value: value is None)
    # W3C trace context of the subtask's span, sent only while the control plane traces
    # (`shoal.tracing`); a worker ignores one it cannot parse.
    traceparent: str | None = Field(None, exclude_if=lambda value: value is None)


class ExecuteTasks(_Message):
    """Attempts for one worker that one commit dispatched, in one frame: sent instead of single
    `execute_task`s to workers that list `batches` among their `features`."""

    type: Literal["execute_tasks"] = "execute_tasks"
    tasks: list[ExecuteTask] = Field(min_length=1, max_length=MAX_BATCH)


class CancelTask(_Message):
    """Stop an attempt now (task cancelled, lease reassigned)."""

    type: Literal["cancel_task"] = "cancel_task"
    attempt_id: uuid.UUID
    reason: str = ""


class Ack(_Message):
    """The control plane has durably handled a `task_result`; the worker may forget it."""

    type: Literal["ack"] = "ack"
    attempt_id: AttemptKey
    accepted: bool
    reason: str | None = None


class Acks(_Message):
    """`Ack`s for every result of one worker a commit handled, in one message: sent instead of
    single acks to workers that list `acks` among their `features`."""

    type: Literal["acks"] = "acks"
    acks: list[Ack] = Field(min_length=1)


class ResendResults(_Message):
    """Send again the results of these attempts that are not yet acknowledged (to workers that
    list `resend` among their `features`): their first copies went to a control-plane copy that
    died before it acknowledged them."""

    type: Literal["resend_results"] = "resend_results"
    attempt_ids: list[uuid.UUID] = Field(min_length=1, max_length=10_000)


class ForgetTasks(_Message):
    """Delete what is kept of these deleted tasks (their workspaces) and of these sources no
    longer stored anywhere (their search indexes); sent to workers that list `forget`."""

    type: Literal["forget_tasks"] = "forget_tasks"
    task_ids: list[uuid.UUID] = Field(default_factory=list, max_length=MAX_KEPT)
    sources: list[Sha256] = Field(default_factory=list, max_length=2 * MAX_KEPT)


class ErrorMessage(_Message):
    """A message the control plane could not handle."""

    type: Literal["error"] = "error"
    code: str
    message: str


ServerMessage = Annotated[
    Registered | ExecuteTask | ExecuteTasks | CancelTask | Ack | Acks | ResendResults
    | ForgetTasks | ErrorMessage,
    Field(discriminator="type"),
]

_worker_adapter: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)
_server_adapter: TypeAdapter[ServerMessage] = TypeAdapter(ServerMessage)


def parse_worker_message(raw: str | bytes) -> WorkerMessage:
    """Parse a message a worker sent; `pydantic.ValidationError` if it is malformed,
    `UnstorableText` if it holds text no database can store.

    Lone surrogates never get this far (the JSON parser refuses them), a NUL character can
    only arrive escaped, and a non-finite number only as a bare `NaN` or `Infinity`, so the
    search through the fields runs only for frames that hold one of those (rarely, and then
    it finds the field to name)."""
    msg = _worker_adapter.validate_json(raw)
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    if "\\u0000" in text or "NaN" in text or "Infinity" in text:
        found = model_problem(msg)
        if found:
            raise UnstorableText(found[0], found[1])
    return msg


def parse_server_message(raw: str | bytes) -> ServerMessage:
    """Parse a message the control plane sent."""
    return _server_adapter.validate_json(raw)


def _fields_of(model: type[BaseModel], *, leave_out: tuple[str, ...] = (),
               optional: tuple[str, ...] = (), **replaced: Any) -> Any:
    """A TypedDict of `model`'s fields, typed as the model types them (`leave_out` left out,
    `optional` not required, `replaced` typed as given): a frame built as a plain dict and
    serialized through it is the model's own text, each value written by its type, without
    the model's validation or the value-by-value typing of a `dict[str, Any]` (half the time
    of the latter)."""
    fields = {name: replaced.get(name, NotRequired[f.annotation] if name in optional
                                 else f.annotation)
              for name, f in model.model_fields.items() if name not in leave_out}
    return TypedDict(f"{model.__name__}Fields", fields)  # type: ignore[operator]


# The rare fields of `execute_task` (sent only when set) go through the model itself.
_EXECUTE: TypeAdapter[dict[str, Any]] = TypeAdapter(_fields_of(
    ExecuteTask, leave_out=("mcp_servers", "output_file", "budget"), optional=("traceparent",)))
_ACK = _fields_of(Ack)
_ACKS: TypeAdapter[dict[str, Any]] = TypeAdapter(
    _fields_of(Acks, acks=list[_ACK]))  # type: ignore[valid-type]  # (built at run time)


def execute_task_json(
    *, attempt_id: uuid.UUID, fence: int, task_id: uuid.UUID, subtask_id: uuid.UUID, role: str,
    tool: str, name: str, instructions: str, upstream: list[UpstreamResult], timeout: float,
    options: dict[str, Any], mcp_servers: list[McpServer], output_file: str | None,
    budget: BudgetLeft | None, traceparent: str | None,
) -> str:
    """`ExecuteTask(…).model_dump_json()`, the same text, for the frame every dispatch sends:
    its fields (the models among them already validated) serialized by pydantic-core in one
    call, without building and validating the frame's model. A frame with one of the rare
    fields (`mcp_servers`, `output_file`, `budget`) still goes through the model."""
    if mcp_servers or output_file is not None or budget is not None:
        return ExecuteTask(
            attempt_id=attempt_id, fence=fence, task_id=task_id, subtask_id=subtask_id,
            role=role, tool=tool, name=name, instructions=instructions, upstream=upstream,
            timeout=timeout, options=options, mcp_servers=mcp_servers, output_file=output_file,
            budget=budget, traceparent=traceparent).model_dump_json()
    frame: dict[str, Any] = {
        "v": PROTOCOL_VERSION, "type": "execute_task", "attempt_id": attempt_id, "fence": fence,
        "task_id": task_id, "subtask_id": subtask_id, "role": role, "tool": tool, "name": name,
        "instructions": instructions, "upstream": upstream, "timeout": timeout,
        "options": options}  # in the model's order
    if traceparent is not None:
        frame["traceparent"] = traceparent
    return _EXECUTE.dump_json(frame).decode()


def acks_json(acks: Sequence[tuple[uuid.UUID, bool, str | None]]) -> str:
    """`Acks(acks=[Ack(attempt_id=…, accepted=…, reason=…), …]).model_dump_json()`, the same
    text, serialized in one call: (attempt id, accepted, reason) for each stored result."""
    return _ACKS.dump_json({"v": PROTOCOL_VERSION, "type": "acks", "acks": [
        {"v": PROTOCOL_VERSION, "type": "ack", "attempt_id": aid, "accepted": accepted,
         "reason": reason} for aid, accepted, reason in acks]}).decode()


def frames(texts: Sequence[str], kind: str, field: str,
           limit: int = BATCH_BYTES) -> list[tuple[str, list[int]]]:
    """`texts` (single messages' JSON, in order) grouped into frames of `kind` messages that
    carry them in their list `field`: consecutive texts share a frame while it stays within
    `limit` UTF-8 bytes and MAX_BATCH messages. Returns each frame's JSON and the indices of
    the texts in it; a frame of one text is that text itself, unchanged."""
    out: list[tuple[str, list[int]]] = []
    group: list[int] = []
    envelope = len(_envelope(kind, field, ""))
    size = envelope
    for i, text in enumerate(texts):
        length = len(text) if text.isascii() else len(text.encode())
        if group and (size + length > limit or len(group) >= MAX_BATCH):
            out.append(_frame(texts, group, kind, field))
            group, size = [], envelope
        group.append(i)
        size += length + 1  # and its comma
    if group:
        out.append(_frame(texts, group, kind, field))
    return out


def _frame(texts: Sequence[str], group: list[int], kind: str,
           field: str) -> tuple[str, list[int]]:
    if len(group) == 1:
        return texts[group[0]], group
    return _envelope(kind, field, ",".join(texts[i] for i in group)), group


def _envelope(kind: str, field: str, body: str) -> str:
    return f'{{"v":{PROTOCOL_VERSION},"type":"{kind}","{field}":[{body}]}}'
