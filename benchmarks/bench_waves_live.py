"""Wave transition time of a typed plan on a real control plane, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/bench_waves_live.py [--db sqlite|postgres|both] [--runs 20]

As `bench_dag.py` does, the control plane runs in this process (`running_server`) and two
benchmark workers in a second one (`_worker.py`: real `Worker`s over WebSockets, 100 slots each,
a tool that answers at once). Each run submits one task of a workflow document of our own
(`bench_waves`) whose planner answers a typed plan of 4 waves x 5 tasks (each task of a wave
after two of the wave before), scheduled in `waves`, every task checked by a gate whose judge
passes it; a role that must answer JSON has its answer as its prompt's first line.

A wave transition is measured for each pair of waves N → N+1 of each run, two ways:

- **stored**: the last completion of wave N (`subtasks.completed_at`: its last gate decided) →
  the first attempt of wave N+1 dispatched (`attempts.dispatched_at`). Both are the control
  plane's clock at the start of the batch that wrote them, so this is the time between the batch
  that decided the last gate and the one that dispatched the next wave — 0 when one batch did
  both;
- **on the workers**: the last gate's result of wave N leaving its worker → the first
  `execute_task` of wave N+1 arriving at a worker, both stamped by the worker process with the
  system-wide monotonic clock: the whole reaction (the result's trip, the batch that decides the
  gate and releases the wave, its commit, the execute's trip back) as a user would see it.

Reported per database: p50, p95 and max of each (target: p95 ≤ 100 ms, seed 002), the
makespan of a run and the task's parallelism ratio (`GET /api/v1/tasks/{id}`, `waves`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import datetime
from typing import Any

from _report import percentile
from bench_dag import TERMINAL, TIMEOUT, Bench, Records, cluster, postgres_reachable, quiet_logs
from rich.console import Console
from rich.table import Table

WAVES, WIDTH = 4, 5
TARGET_MS = 100.0  # p95 of a wave transition (seed 002)


def plan() -> list[dict[str, Any]]:
    """4 waves x 5 tasks; task i of wave k > 0 depends on tasks i and i+1 of wave k-1."""
    return [{"name": f"W{k}T{i}", "type": "step", "description": f"task {i} of wave {k}",
             "dependencies": [f"W{k - 1}T{i}", f"W{k - 1}T{(i + 1) % WIDTH}"] if k else []}
            for k in range(WAVES) for i in range(WIDTH)]


DOCUMENT = f"""\
name: bench_waves
version: 1
description: A typed plan of {WAVES} waves of {WIDTH} tasks, each gated by a judge that passes it.
roles:
  planner: {{prompt: '{json.dumps({"subtasks": plan()})}', tools: [echo]}}
  doer: {{prompt: "Do {{item}}", tools: [echo]}}
  judge:
    prompt: '{{"score": 0.9}}'
    tools: [echo]
    output: {{type: object, required: [score], properties: {{score: {{type: number}}}}}}
steps:
  - id: plan
    kind: expand
    role: planner
    schedule: waves
    types:
      step: {{role: doer, gate: {{judge: judge, min_score: 0.5}}}}
"""


async def run_plan(bench: Bench) -> tuple[str, float]:
    """Submit one task of `bench_waves`; its id and seconds until its end reached the bus."""
    async with bench.srv.services.bus.subscribe() as sub:
        started = time.monotonic()
        resp = await bench.client.post("/api/v1/tasks", json={
            "description": "benchmark waves", "workflow": "bench_waves"})
        if resp.status_code != 201:
            raise RuntimeError(f"Submitting failed: {resp.status_code} {resp.text}")
        task_id: str = resp.json()["task_id"]
        async with asyncio.timeout(TIMEOUT):
            async for event in sub:
                if event.type in TERMINAL and str(event.task_id) == task_id:
                    if event.type != "task_complete":
                        raise RuntimeError(f"The plan ended {event.type}: {event.data}")
                    return task_id, time.monotonic() - started
    raise RuntimeError("The event bus closed before the task ended.")


async def stored_transitions(bench: Bench, task_id: str) -> tuple[list[float], float]:
    """Milliseconds of each stored transition of a task (see the module's docstring), and the
    task's parallelism ratio."""
    detail = (await bench.client.get(f"/api/v1/tasks/{task_id}")).json()
    attempts = (await bench.client.get(f"/api/v1/tasks/{task_id}/attempts")).json()["attempts"]
    wave = {s["subtask_id"]: s["wave"] for s in detail["subtasks"]
            if s["kind"] == "agent" and s["wave"] is not None}
    out = []
    for n in range(WAVES - 1):
        decided = max(_at(s["completed_at"]) for s in detail["subtasks"]
                      if wave.get(s["subtask_id"]) == n)
        first = min(_at(a["dispatched_at"]) for a in attempts if wave.get(a["subtask_id"]) == n + 1)
        out.append((first - decided).total_seconds() * 1000)
    return out, float(detail["waves"]["parallelism_ratio"])


def worker_transitions(task_id: str, records: Records) -> list[float]:
    """Milliseconds of each transition of a task as its workers saw it (module docstring)."""
    mine = [r for r in records.values() if r.get("task_id") == task_id]
    out = []
    for n in range(WAVES - 1):
        gates = [r["sent"] for r in mine if r.get("name", "").startswith(f"Gate: W{n}T")]
        nexts = [r["recv"] for r in mine if r.get("name", "").startswith(f"W{n + 1}T")]
        out.append((min(nexts) - max(gates)) * 1000)
    return out


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def bench_database(kind: str, runs: int) -> dict[str, Any]:
    """`runs` plans (after one to warm up) on a fresh database of `kind`."""
    records: Records = {}
    tasks: list[str] = []
    stored: list[float] = []
    ratios: list[float] = []
    spans: list[float] = []
    async with cluster(kind, documents={"bench_waves": DOCUMENT}, records=records) as bench:
        await run_plan(bench)  # compile, fill caches
        for _ in range(runs):
            task_id, makespan = await run_plan(bench)
            tasks.append(task_id)
            spans.append(makespan * 1000)
            found, ratio = await stored_transitions(bench, task_id)
            stored += found
            ratios.append(ratio)
    seen = [ms for t in tasks for ms in worker_transitions(t, records)]
    return {"stored": stored, "workers": seen, "makespan_ms": spans, "ratios": ratios}


def render(kind: str, found: dict[str, Any], console: Console) -> dict[str, Any]:
    """Print one database's table; its figures as JSON."""
    n = len(found["makespan_ms"])
    table = Table(title=f"Wave transitions on {kind}: {n} plans of {WAVES} waves x {WIDTH} "
                        f"tasks, {n * (WAVES - 1)} transitions", title_justify="left")
    for column in ("measured", "p50 ms", "p95 ms", "max ms", f"p95 ≤ {TARGET_MS:g} ms"):
        table.add_column(column, justify="left" if column == "measured" else "right")
    out: dict[str, Any] = {}
    for key, label in (("stored", "stored: last completion → first dispatch"),
                       ("workers", "on the workers: last gate's result sent → next execute "
                                   "received")):
        values = found[key]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        table.add_row(label, f"{p50:.1f}", f"{p95:.1f}", f"{max(values):.1f}",
                      "yes" if p95 <= TARGET_MS else "no")
        out[key] = {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2),
                    "max_ms": round(max(values), 2)}
    console.print(table)
    makespan, ratio = statistics.median(found["makespan_ms"]), statistics.median(found["ratios"])
    console.print(f"Makespan of a plan (submit → task_complete on the bus): median "
                  f"{makespan:.0f} ms; parallelism ratio (task detail): median {ratio:.2f}")
    out.update(makespan_median_ms=round(makespan, 1), parallelism_median=ratio)
    return out


async def main_async(args: argparse.Namespace, console: Console) -> None:
    for kind in ["sqlite", "postgres"] if args.db == "both" else [args.db]:
        if kind == "postgres" and not postgres_reachable():
            console.print("[yellow]PostgreSQL is not reachable; skipped.[/]")
            continue
        render(kind, await bench_database(kind, args.runs), console)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=20, help="plans per database (default 20)")
    args = parser.parse_args()
    quiet_logs()
    asyncio.run(main_async(args, Console(width=None if sys.stdout.isatty() else 160)))


if __name__ == "__main__":
    main()
