"""`schedule: waves` beside `schedule: eager` on a 20-task typed plan with realistic step times:
the engine's own decisions (`DocumentWorkflow` over `builtin/research.yaml`), driven on a
virtual clock by a simulated pool of workers, so the figures are the scheduling policies' and
repeat exactly for a seed (no I/O, no wall-clock).

    .venv/bin/python benchmarks/bench_waves.py [--workers 4] [--seeds 20] [--low 0.15]

Each task's answer takes a time drawn per type (retrieval 20-90 s, synthesis 60-150 s, the
report 120-240 s, lognormal within those ranges), each gate's judge 5-15 s; a share `--low` of
first answers scores below its gate (a retry, judged again). Prints, per policy, the median and
p90 makespan over the seeds, and the parallelism ratio (busy worker time / (workers x makespan)).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import uuid
from datetime import UTC, datetime, timedelta
from importlib import resources

from rich.console import Console
from rich.table import Table

from shoal.engine import graph
from shoal.engine.inputs import Dispatched, Finished, Start
from shoal.engine.model import AttemptRecord, StepKind, TaskMeta, TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows.interpreter import DocumentWorkflow
from shoal.workflows.loading import load_document

T0 = datetime(2026, 11, 26, tzinfo=UTC)
TIMES = {"retrieval_rag": (20, 90), "retrieval_nlq": (20, 90), "retrieval_graph": (20, 90),
         "synthesis": (60, 150), "write_report": (120, 240), None: (5, 15)}


def plan() -> str:
    """20 tasks: 12 retrievals (3 of which refine an earlier one), 6 syntheses over 2-4 of them
    each, one synthesis of syntheses, the report."""
    kinds = ["retrieval_rag", "retrieval_nlq", "retrieval_graph"]
    tasks = [{"name": f"R{i}", "type": kinds[i % 3], "description": f"retrieve {i}",
              "dependencies": [f"R{i - 9}"] if i >= 9 else []} for i in range(12)]
    groups = [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9], [10, 11], [1, 5, 9, 11]]
    tasks += [{"name": f"S{j}", "type": "synthesis", "description": f"combine {j}",
               "dependencies": [f"R{i}" for i in g]} for j, g in enumerate(groups)]
    tasks += [{"name": "S6", "type": "synthesis", "description": "combine all",
               "dependencies": [f"S{j}" for j in range(6)]},
              {"name": "Report", "type": "write_report", "description": "write",
               "dependencies": ["S6"]}]
    return json.dumps({"subtasks": tasks})


def simulate(schedule: str, workers: int, seed: int, low: float) -> tuple[float, float]:
    """(makespan in seconds, parallelism ratio) of one run."""
    rng = random.Random(seed)
    text = resources.files("shoal.workflows").joinpath("builtin/research.yaml").read_text()
    flow = DocumentWorkflow(load_document(text))
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="q",
                      status=TaskStatus.PENDING, created_at=T0, updated_at=T0,
                      workflow="research", meta=TaskMeta(parameters={"schedule": schedule}))
    state = TaskState(task=task, subtasks={}, attempts={})
    now = T0
    durations: dict[uuid.UUID, float] = {}

    def decide(inp: object) -> None:
        nonlocal state
        state = graph.decide(flow, state, inp, Context(now=now)).state  # type: ignore[arg-type]

    def answer(sub_id: uuid.UUID) -> str:
        sub = state.subtasks[sub_id]
        if sub.kind is StepKind.EXPAND:
            return plan()
        if sub.kind is StepKind.JUDGE:  # the first answer of a task scores low at `low`
            target = state.subtasks[sub.target_id or sub_id]
            first = not any(s.target_id == target.id and s.kind is StepKind.CORRECT
                            for s in state.subtasks.values())
            score = 0.3 if first and rng.random() < low else 0.95
            return json.dumps({"score": score, "feedback": "ok"})
        return json.dumps({"query": "q", "answered": True, "findings": [
            {"text": "a finding", "citation": "doc.md, chars 0-10"}]}) \
            if (sub.options.plan_type or "").startswith("retrieval") else "# Text\nDone."

    decide(Start())
    running: list[tuple[float, int, uuid.UUID, uuid.UUID]] = []  # (finish, n, subtask, attempt)
    busy = 0.0
    counter = 0
    while state.task.status not in (TaskStatus.COMPLETED, TaskStatus.FAILED):
        queued = sorted((s for s in state.subtasks.values()
                         if s.status is SubtaskStatus.QUEUED and s.current_attempt_id is None),
                        key=lambda s: -s.priority)
        for sub in queued[:workers - len(running)]:
            kind = None if sub.kind is StepKind.JUDGE else sub.options.plan_type
            low_s, high_s = TIMES.get(kind, (5, 15)) if sub.kind is not StepKind.EXPAND \
                else (10, 10)
            mu, sigma = math.log(math.sqrt(low_s * high_s)), 0.35
            took = min(high_s, max(low_s, rng.lognormvariate(mu, sigma)))
            att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=task.id,
                                worker_id=uuid.uuid4(), fence=sub.attempts + 1, tool="sim",
                                status=AttemptStatus.DISPATCHED, dispatched_at=now)
            decide(Dispatched(att))
            counter += 1
            heapq.heappush(running, (took + (now - T0).total_seconds(), counter, sub.id, att.id))
            durations[sub.id] = took
        if not running:
            raise RuntimeError(f"nothing runs and the task is {state.task.status}")
        finish, _, sub_id, att_id = heapq.heappop(running)
        now = T0 + timedelta(seconds=finish)
        busy += durations[sub_id]
        decide(Finished(attempt_id=att_id, status="succeeded", output=answer(sub_id)))
    makespan = (now - T0).total_seconds()
    return makespan, busy / (workers * makespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--low", type=float, default=0.15)
    args = parser.parse_args()
    table = Table(title=f"20-task research plan, {args.workers} workers, {args.seeds} seeds, "
                        f"{args.low:.0%} of first answers below their gate", title_justify="left")
    for col in ("schedule", "makespan median (s)", "makespan p90 (s)", "parallelism median"):
        table.add_column(col, justify="left" if col == "schedule" else "right")
    for schedule in ("waves", "eager"):
        runs = [simulate(schedule, args.workers, seed, args.low) for seed in range(args.seeds)]
        spans = sorted(r[0] for r in runs)
        table.add_row(schedule, f"{statistics.median(spans):.0f}",
                      f"{spans[int(0.9 * (len(spans) - 1))]:.0f}",
                      f"{statistics.median(r[1] for r in runs):.0%}")
    Console().print(table)


if __name__ == "__main__":
    main()
