"""The engine's cost per route hop and per loop round of a workflow document, beside W2's per
subtask, measured in the same run on the same control plane.

    .venv/bin/python benchmarks/bench_workflows.py [--db sqlite|postgres|both] [--repeat N]

As `bench_dag.py` does, the control plane runs in this process and two benchmark workers in a
second one, with a tool that answers at once (a role that must answer in JSON has its answer as
its prompt's first line). Workloads:

- W2: the chain of 200 no-op subtasks of `bench_dag.py` (the reference);
- R50: a route of 50 hops — a router that always picks `work` (repeatable), 50 times, then the
  hop cap sends it to `done`: 101 steps, each decided by the route's rules;
- L10: a write → review loop whose reviewer always asks for a revision, 10 times (its cap):
  22 steps, each review's answer checked against its JSON Schema contract.

Reported per workload: makespan, ms per step (makespan / steps) and its ratio to W2's ms per
subtask in the same run (target ≤ 1.5), and ms per hop / per round (two steps each).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from _workloads import Workload, workloads
from bench_dag import TERMINAL, TIMEOUT, Bench, cluster, postgres_reachable, quiet_logs
from rich.console import Console
from rich.table import Table

HOPS = 50
ROUNDS = 10

ROUTE = f"""\
name: bench_route
version: 1
description: A router that always picks work, until its hop cap.
parameters:
  hops: {{type: integer, default: {HOPS}, minimum: 1, maximum: 100}}
roles:
  router: {{prompt: '{{"next": "work"}}', tools: [echo]}}
  worker: {{prompt: Work., tools: [echo]}}
steps:
  - {{id: route, kind: route, role: router, choices: [work], repeatable: [work], finish: done,
     max_hops: "{{hops}}"}}
  - {{id: work, kind: agent, role: worker}}
  - {{id: done, kind: agent, role: worker}}
"""

LOOP = f"""\
name: bench_loop
version: 1
description: A reviewer that always asks for a revision, until the loop's cap.
roles:
  writer: {{prompt: Draft., tools: [echo]}}
  reviewer:
    prompt: '{{"verdict": "NEEDS_REVISION", "feedback": "again"}}'
    tools: [echo]
    output: {{type: object, required: [verdict], properties: {{verdict: {{type: string}}}}}}
steps:
  - {{id: write, kind: agent, role: writer}}
  - {{id: review, kind: agent, role: reviewer, after: [write]}}
loops:
  - {{from: review, to: write, when: {{entry: review, field: verdict, equals: NEEDS_REVISION}},
     max: {ROUNDS}}}
"""

DOCUMENTS = {"bench_route": ROUTE, "bench_loop": LOOP}
# workload → (workflow, steps it runs, steps per hop or round, what a unit is called)
SHAPES = {"R50": ("bench_route", 2 * HOPS + 1, 2, "hop"),
          "L10": ("bench_loop", 2 * (ROUNDS + 1), 2, "round")}


async def run_document(bench: Bench, workflow: str) -> float:
    """Submit one task of `workflow`; seconds until its end reaches the event bus."""
    async with bench.srv.services.bus.subscribe() as sub:
        started = time.monotonic()
        resp = await bench.client.post("/api/v1/tasks", json={
            "description": f"benchmark {workflow}", "workflow": workflow})
        if resp.status_code != 201:
            raise RuntimeError(f"Submitting {workflow} failed: {resp.status_code} {resp.text}")
        task_id = resp.json()["task_id"]
        async with asyncio.timeout(TIMEOUT):
            async for event in sub:
                if event.type in TERMINAL and str(event.task_id) == task_id:
                    if event.type != "task_complete":
                        raise RuntimeError(f"{workflow} ended {event.type}: {event.data}")
                    return time.monotonic() - started
    raise RuntimeError("The event bus closed before the task ended.")


async def bench_database(kind: str, repeat: int) -> dict[str, list[float]]:
    """Seconds of each run of W2, R50 and L10 on a fresh database of `kind`."""
    chain: Workload = workloads(quick=False, only="W2")[0]
    times: dict[str, list[float]] = {"W2": [], "R50": [], "L10": []}
    async with cluster(kind, documents=DOCUMENTS) as bench:
        await bench.run(workloads(quick=True, only="W2")[0])  # compile, fill caches
        for workflow, *_ in SHAPES.values():
            await run_document(bench, workflow)
        for _ in range(repeat):
            times["W2"].append((await bench.run(chain)).makespan)
            for key, (workflow, *_) in SHAPES.items():
                times[key].append(await run_document(bench, workflow))
    return times


def render(kind: str, times: dict[str, list[float]], console: Console) -> dict[str, Any]:
    w2 = statistics.median(times["W2"]) * 1000 / 200
    table = Table(title=f"Workflow documents on {kind} (median of {len(times['W2'])})")
    for column in ("workload", "steps", "makespan ms", "ms / step", "÷ W2 per subtask",
                   "ms / hop or round"):
        table.add_column(column, justify="right")
    table.add_row("W2 chain", "200", f"{w2 * 200:.0f}", f"{w2:.2f}", "1.00", "")
    out: dict[str, Any] = {"W2_ms_per_subtask": round(w2, 3)}
    for key, (_, steps, per_unit, unit) in SHAPES.items():
        makespan = statistics.median(times[key]) * 1000
        per_step = makespan / steps
        table.add_row(key, str(steps), f"{makespan:.0f}", f"{per_step:.2f}",
                      f"{per_step / w2:.2f}", f"{per_step * per_unit:.2f} / {unit}")
        out[key] = {"ms_per_step": round(per_step, 3), "ratio_to_W2": round(per_step / w2, 2),
                    f"ms_per_{unit}": round(per_step * per_unit, 3)}
    console.print(table)
    return out


async def main_async(args: argparse.Namespace, console: Console) -> None:
    for kind in ["sqlite", "postgres"] if args.db == "both" else [args.db]:
        if kind == "postgres" and not postgres_reachable():
            console.print("[yellow]PostgreSQL is not reachable; skipped.[/]")
            continue
        render(kind, await bench_database(kind, args.repeat), console)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    quiet_logs()
    asyncio.run(main_async(args, Console(width=None if sys.stdout.isatty() else 160)))


if __name__ == "__main__":
    main()
