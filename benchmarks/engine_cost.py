"""The engine alone: W1's and W2's graphs decided input by input (`shoal.workflows.decide`: a
dispatch and a success per subtask), no store, no bus, no network, so a workflow's own cost per
subtask shows without the disk's noise.

    .venv/bin/python benchmarks/engine_cost.py            # µs per subtask, best of --repeat
    valgrind --tool=lackey --basic-counts=yes .venv/bin/python benchmarks/engine_cost.py \\
        --once W2                                          # instructions: repeatable anywhere

Under valgrind, subtract a `--once none` run (the imports) from a `--once W1` or `W2` run.

    .venv/bin/python benchmarks/engine_cost.py --after-idle 0,0.2,1,5

times the same decisions after the process has slept that many milliseconds before each
subtask (the pauses alternated task by task): on a virtual machine whose idle vCPU halts, the
code a step runs after waiting on a worker is slower than the same code back to back, and this
says by how much (medians of each subtask's thread CPU, W2's chain).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
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
    return sum(decisions(items)) / len(items)


def decisions(items: list[dict[str, Any]], *, idle: float = 0.0,
              clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Decide one task to its end: the start, then each subtask's dispatch and success, after
    sleeping `idle` seconds before each subtask (none when 0); the `clock` seconds of each
    (the start's first)."""
    plan = planning.user_plan(items, max_subtasks=len(items))
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="Bench",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW,
                      meta=TaskMeta(quality=False))
    ctx = Context(now=NOW)
    began = clock()
    state = decide(TaskState(task=task, subtasks={}, attempts={}), Start(plan=plan), ctx).state
    spent = [clock() - began]
    while queued := [s for s in state.subtasks.values() if s.status is SubtaskStatus.QUEUED]:
        for sub in queued:
            att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=task.id,
                                worker_id=task.user_id, fence=1, tool="noop",
                                status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
            if idle:
                time.sleep(idle)
            began = clock()
            state = decide(state, Dispatched(att), ctx).state
            state = decide(state, Finished(att.id, "succeeded", "ok"), ctx).state
            spent.append(clock() - began)
    assert state.task.status is TaskStatus.COMPLETED, state.task.status
    return spent


def after_idle(pauses_ms: list[float], repeat: int) -> dict[float, float]:
    """µs of thread CPU per W2 subtask (the median over `repeat` tasks of each task's median)
    after each pause, the pauses alternated task by task so the machine's drift falls on all."""
    items = shape("W2")
    decisions(items)  # compile, fill caches
    medians: dict[float, list[float]] = {p: [] for p in pauses_ms}
    for _ in range(repeat):
        for pause in pauses_ms:
            spent = decisions(items, idle=pause / 1000, clock=time.thread_time)[1:]
            medians[pause].append(statistics.median(spent) * 1e6)
    return {p: statistics.median(m) for p, m in medians.items()}


def halt_polling(sys_root: Path = Path("/sys")) -> str:
    """The guest's halt polling, where the kernel says: how long an idle vCPU polls before it
    halts (`haltpoll`'s parameter, its longest poll: 0 polls never), and whether that is in
    effect at all: it is only while `haltpoll` is the cpuidle driver; under another (or none)
    an idle vCPU halts at once."""
    try:
        polls = int((sys_root / "module/haltpoll/parameters/guest_halt_poll_ns").read_text())
    except (OSError, ValueError):
        return "not known (no haltpoll module)"
    try:
        driver = (sys_root / "devices/system/cpu/cpuidle/current_driver").read_text().strip()
    except OSError:
        driver = "not known"
    if driver == "haltpoll":
        return f"{polls} ns" if polls else "0 ns: an idle vCPU halts at once"
    return f"{polls} ns set, not in effect: the cpuidle driver is {driver}, not haltpoll"


def pauses(text: str) -> list[float]:
    """`--after-idle`'s milliseconds: numbers ≥ 0, each once, one of them 0 (the back-to-back
    figure)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not numbers of milliseconds: {text!r}") from None
    if any(v < 0 for v in values) or 0 not in values or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError("milliseconds ≥ 0, each once, one of them 0 (no pause)")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--once", choices=["W1", "W2", "none"],
                        help="decide one task of this shape and print nothing (for valgrind)")
    parser.add_argument("--after-idle", type=pauses, metavar="MS,MS,…",
                        help="W2's decisions after each of these pauses (ms), one of them 0")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.after_idle:
        gc.disable()
        found = after_idle(args.after_idle, args.repeat)
        print(f"guest halt polling: {halt_polling()}")
        for pause, micro in found.items():
            print(f"W2 after {pause:g} ms idle: {micro:.1f} µs per subtask in the engine "
                  f"({micro / found[0]:.2f} times back to back)")
        return
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
