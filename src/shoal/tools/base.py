"""The `Tool` port: how a worker runs one attempt with one AI tool.

A tool gets a `ToolRun` (instructions, a private workspace, a time limit, a log callback) and
returns a `ToolOutcome`. The worker collects the files the run produced from the workspace; a
tool only writes them there. Cancellation arrives as `asyncio.CancelledError`: a tool must let it
propagate after stopping whatever it started.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from shoal.protocol import BudgetLeft, McpServer, Usage
from shoal.tools.permissions import Denial

if TYPE_CHECKING:
    from shoal.tracing import AttemptTrace

OutcomeStatus = Literal["succeeded", "failed"]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """Everything a tool needs for one attempt."""

    attempt_id: uuid.UUID
    task_id: uuid.UUID
    subtask_id: uuid.UUID
    role: str
    name: str
    instructions: str
    workspace: Path
    timeout: float
    log: Callable[[str], None]
    options: dict[str, Any] = field(default_factory=dict)
    trace: AttemptTrace | None = None  # set when the attempt is traced: spans of model calls
    mcp_servers: tuple[McpServer, ...] = ()  # MCP servers the agent may use (its role's)
    stream: Callable[[str], None] | None = None  # model text as it streams, if anyone watches
    budget: BudgetLeft | None = None  # what the task may still spend: no model call past it
    spent: Callable[[Usage], None] | None = None  # tell what the attempt has spent so far


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """How an attempt ended, as the tool saw it."""

    status: OutcomeStatus
    output: str = ""
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    denials: tuple[Denial, ...] = ()  # what the permission policy refused during the run


class Tool(Protocol):
    """An AI tool a worker can run attempts with."""

    name: str
    local: bool  # True when no data leaves this machine (allowed for `sensitive` tasks)

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Run one attempt in `run.workspace` and report how it ended."""
        ...


@dataclass(frozen=True, slots=True)
class Probe:
    """What discovery found out about one tool on this machine.

    Each adapter module has `async def probe(settings) -> Probe` (fast, no model call) and
    `def create(settings, probe) -> Tool`; `shoal worker --check` prints the probes.
    """

    name: str
    available: bool
    version: str | None = None
    local: bool = False  # no data leaves the machine (Ollama on this host, a local server)
    detail: str = ""  # where it was found, or why it was not
    enable: str = ""  # when not available: how to enable it, one line
