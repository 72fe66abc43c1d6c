"""Which worker runs which ready subtask, and with which tool.

Hard constraints come first: a worker needs a free slot, must not be excluded for the subtask,
must offer the pinned tool if there is one, and a sensitive task only ever sees local tools.
Among the workers left, the seed's score decides (tool match 50 %, resources 30 %, privacy
20 %). Subtasks are placed greedily, highest priority (longest remaining path) first.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.engine.model import evolve

TOOL_WEIGHT = 0.5
RESOURCE_WEIGHT = 0.3
PRIVACY_WEIGHT = 0.2

# Tool-match scores, from an explicit request down to "any tool will do".
PINNED_MATCH = 1.0
RECOMMENDED_MATCH = 1.0
PREFERRED_MATCH = 0.75
DEFAULT_MATCH = 0.5
ANY_MATCH = 0.25

ECHO_TOOL = "echo"  # the test tool: never chosen unless some request names it
NON_AGENT_TOOLS = frozenset({ECHO_TOOL, "evaluator"})  # chosen only when a request names them
PREFERRED_WORKER_BONUS = 0.3  # a correction prefers the author's worker


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What allocation needs to know about one online worker."""

    worker_id: uuid.UUID
    tools: Mapping[str, bool]  # tool name -> whether it runs locally (no data leaves the box)
    slots: int
    running: int
    cpu_percent: float
    memory_percent: float
    disk_percent: float

    @property
    def free_slots(self) -> int:
        """How many more attempts this worker may take now."""
        return max(0, self.slots - self.running)


@dataclass(frozen=True, slots=True)
class SubtaskDemand:
    """A ready subtask waiting for a worker, with its constraints and wishes."""

    subtask_id: uuid.UUID
    priority: float  # higher goes first: the remaining critical-path length
    pinned_tool: str | None  # from an explicit plan: a hard constraint
    recommended_tool: str | None  # from the planner: a wish
    tool_preferences: tuple[str, ...]  # the task's preferences, best first: wishes
    sensitive: bool  # privacy level "sensitive": only local tools are eligible
    exclude_workers: frozenset[uuid.UUID] = frozenset()  # e.g. a reviewer is not the author
    default_tool: str | None = None  # the deployment's default, when nothing else matches
    pinned_worker: uuid.UUID | None = None  # only this worker (an automatic fix by its author)
    prefer_worker: uuid.UUID | None = None  # this worker if it can (a person's correction)


@dataclass(frozen=True, slots=True)
class Assignment:
    """A decision: this subtask runs on this worker with this tool."""

    subtask_id: uuid.UUID
    worker_id: uuid.UUID
    tool: str
    score: float


def choose_tool(demand: SubtaskDemand, worker: WorkerView) -> tuple[str, float] | None:
    """The worker's tool to use for `demand` and its tool-match score, or None if it has none.

    Only eligible tools count: all of them for normal tasks, only local ones for sensitive
    tasks; an excluded worker has none. Then, first match wins:
    pinned tool present → 1.0 (absent → None, whatever else the worker has);
    recommended tool → 1.0; the first present of `tool_preferences` → 0.75;
    the deployment default → 0.5; any other tool except `echo` → 0.25 (worker's order).
    """
    if demand.exclude_workers and worker.worker_id in demand.exclude_workers:
        return None  # (a UUID's hash is two calls: asked only when some worker is excluded)
    if demand.pinned_worker is not None and worker.worker_id != demand.pinned_worker:
        return None
    eligible = [name for name, local in worker.tools.items() if local or not demand.sensitive]
    if demand.pinned_tool is not None:
        return (demand.pinned_tool, PINNED_MATCH) if demand.pinned_tool in eligible else None
    if demand.recommended_tool in eligible:
        return demand.recommended_tool, RECOMMENDED_MATCH
    for name in demand.tool_preferences:
        if name in eligible:
            return name, PREFERRED_MATCH
    if demand.default_tool in eligible:
        return demand.default_tool, DEFAULT_MATCH
    fallback = next((name for name in eligible if name not in NON_AGENT_TOOLS), None)
    return None if fallback is None else (fallback, ANY_MATCH)


def resource_score(worker: WorkerView) -> float:
    """How much room the worker has, 0..1: half machine load, half free slots.

    Load is `1 - mean(cpu, memory, disk) / 100`; slots are `free_slots / slots`.
    """
    mean_load = (worker.cpu_percent + worker.memory_percent + worker.disk_percent) / 3
    headroom = _clamp(1.0 - mean_load / 100.0)
    capacity = worker.free_slots / worker.slots if worker.slots > 0 else 0.0
    return 0.5 * headroom + 0.5 * capacity


def privacy_score(demand: SubtaskDemand, tool_is_local: bool) -> float:
    """How well the tool fits the task's privacy level, 0..1.

    Normal tasks fit any tool (1.0); sensitive tasks fit local tools (1.0) and never cloud ones
    (0.0 — `choose_tool` already excludes them, so this only matters to direct callers).
    """
    if demand.sensitive and not tool_is_local:
        return 0.0
    return 1.0


def score(demand: SubtaskDemand, worker: WorkerView) -> tuple[str, float] | None:
    """The tool and total score of running `demand` on `worker`, or None if it cannot.

    Total = 0.5 * tool match + 0.3 * resources + 0.2 * privacy. Free slots are not checked here.
    """
    choice = choose_tool(demand, worker)
    if choice is None:
        return None
    tool, match = choice
    total = (
        TOOL_WEIGHT * match
        + RESOURCE_WEIGHT * resource_score(worker)
        + PRIVACY_WEIGHT * privacy_score(demand, worker.tools[tool])
    )
    if demand.prefer_worker is not None and worker.worker_id == demand.prefer_worker:
        total += PREFERRED_WORKER_BONUS
    return tool, total


def allocate(demands: Sequence[SubtaskDemand], workers: Sequence[WorkerView]) -> list[Assignment]:
    """Place demands greedily, highest priority first, each on its best worker with a free slot.

    Ties in priority keep the given order; ties in score go to the worker listed first. Each
    placement takes a slot, which also lowers that worker's resource score for later demands.
    Demands that fit nowhere right now are left out of the result.
    """
    current = list(workers)
    result: list[Assignment] = []
    for demand in sorted(demands, key=lambda d: -d.priority):
        best = _best_worker(demand, current)
        if best is None:
            continue
        at, tool, total = best
        worker = current[at]
        current[at] = evolve(worker, running=worker.running + 1)
        result.append(Assignment(demand.subtask_id, worker.worker_id, tool, total))
    return result


def unplaceable_reason(demand: SubtaskDemand, workers: Sequence[WorkerView]) -> str | None:
    """Why no online worker could ever run `demand`, or None if one could (even if busy now)."""
    if any(choose_tool(demand, worker) is not None for worker in workers):
        return None
    if not workers:
        return "No worker is online. Start one with: shoal worker --server URL --token TOKEN"
    if demand.pinned_worker is not None and all(
            w.worker_id != demand.pinned_worker for w in workers):
        return ("This subtask must run on the worker that wrote the work it fixes, and that "
                "worker is offline. It runs when the worker reconnects.")
    usable = [w for w in workers if w.worker_id not in demand.exclude_workers]
    if not usable:
        return (
            "Every online worker is excluded for this subtask (a reviewer must not be the "
            "author). Start one more worker."
        )
    return _tool_reason(demand, usable)


def _tool_reason(demand: SubtaskDemand, workers: Sequence[WorkerView]) -> str:
    offered = {name for worker in workers for name in worker.tools}
    pinned = demand.pinned_tool
    if pinned is not None and pinned not in offered:
        return (
            f"No online worker offers the tool {pinned!r} this subtask is pinned to. "
            "Start a worker that has it, or submit the plan without that tool."
        )
    if pinned is not None:
        return (
            f"This task is sensitive and no online worker runs the tool {pinned!r} it is "
            "pinned to locally. Start a worker with a local copy, or pin a local tool."
        )
    if demand.sensitive:
        return (
            "This task is sensitive and no online worker has a local tool. Start a worker "
            "with a local tool (such as ollama), or set the task's privacy level to normal."
        )
    return (
        f"No online worker offers a tool other than {ECHO_TOOL!r}, which runs only when asked "
        "for by name. Start a worker with an AI tool."
    )


def _best_worker(
    demand: SubtaskDemand, workers: Sequence[WorkerView]
) -> tuple[int, str, float] | None:
    best: tuple[int, str, float] | None = None
    for at, worker in enumerate(workers):
        if worker.running >= worker.slots:  # no free slot (`free_slots` is two calls)
            continue
        scored = score(demand, worker)
        if scored is not None and (best is None or scored[1] > best[2]):
            best = (at, *scored)
    return best


def _clamp(value: float) -> float:
    """`value` within 0..1 (NaN: 0), compared rather than `min(1, max(0, value))`."""
    return value if 0.0 <= value <= 1.0 else 1.0 if value > 1.0 else 0.0
