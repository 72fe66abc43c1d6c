"""The engine alone: W1's and W2's graphs decided input by input (`shoal.workflows.decide`: a
dispatch and a success per subtask), no store, no bus, no network, so a workflow's own cost per
subtask shows without the disk's noise.

    .venv/bin/python benchmarks/engine_cost.py            # µs per subtask, best of --repeat
    valgrind --tool=lackey --basic-counts=yes .venv/bin/python benchmarks/engine_cost.py \\
        --once W2                                          # instructions: repeatable anywhere

Under valgrind, subtract a `--once none` run (the imports) from a `--once W1` or `W2` run.
"""

from __future__ import annotations

import argparse
import gc
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from shoal.engine import planning
from shoal.engine.inputs import Dispatched, Finished, Start
from shoal.engine.model import AttemptRecord, TaskMeta, TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)
N = 200


def shape(name: str) -> list[dict[str, Any]]:
    """W1 (one root, 200 in parallel, one join) or W2 (a chain of 200), as a user's plan."""
    def item(label: str, deps: list[int]) -> dict[str, Any]:
        return {"name": label, "description": label, "tool": "noop", "dependencies": deps}
    if name == "W1":
        return [item("root", []), *(item(f"m{i}", [0]) for i in range(N)),
                item("join", list(range(1, N + 1)))]
    return [item(f"c{i}", [i - 1] if i else []) for i in range(N)]


def run(items: list[dict[str, Any]]) -> float:
    """Decide one task to its end; the seconds spent in `decide` per subtask."""
    plan = planning.user_plan(items, max_subtasks=len(items))
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="Bench",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW,
                      meta=TaskMeta(quality=False))
    ctx = Context(now=NOW)
    spent = 0.0
    began = time.perf_counter()
    state = decide(TaskState(task=task, subtasks={}, attempts={}), Start(plan=plan), ctx).state
    spent += time.perf_counter() - began
    while queued := [s for s in state.subtasks.values() if s.status is SubtaskStatus.QUEUED]:
        for sub in queued:
            att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=task.id,
                                worker_id=task.user_id, fence=1, tool="noop",
                                status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
            began = time.perf_counter()
            state = decide(state, Dispatched(att), ctx).state
            state = decide(state, Finished(att.id, "succeeded", "ok"), ctx).state
            spent += time.perf_counter() - began
    assert state.task.status is TaskStatus.COMPLETED, state.task.status
    return spent / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--once", choices=["W1", "W2", "none"],
                        help="decide one task of this shape and print nothing (for valgrind)")
    args = parser.parse_args()
    if args.once:
        if args.once != "none":
            run(shape(args.once))
        return
    gc.disable()  # a collection in one run and not another is noise here
    for name in ("W1", "W2"):
        best = min(run(shape(name)) for _ in range(args.repeat))
        print(f"{name}: {best * 1e6:.1f} µs per subtask in the engine")


if __name__ == "__main__":
    main()
