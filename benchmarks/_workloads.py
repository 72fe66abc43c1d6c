"""The benchmark's DAGs (W1 fan-out, W2 chain, W3 layers) and the plain-asyncio baseline."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

SEED = 20240601  # W3's edges; fixed so every run and every database sees the same graph

Dag = dict[str, list[str]]  # subtask name → names it depends on, in topological order


@dataclass(frozen=True, slots=True)
class Workload:
    """A DAG to run, how long each subtask sleeps, and how it is judged."""

    key: str
    label: str
    dag: Dag
    delay: float
    layers: int = 0  # critical path in subtasks (W3), for makespan ÷ critical path

    @property
    def critical_path(self) -> float:
        """Seconds the longest chain needs when every subtask takes `delay`."""
        return self.layers * self.delay


def fan_out(width: int) -> Dag:
    """One root, `width` subtasks that depend on it, and one join that depends on them all."""
    middle = [f"m{i}" for i in range(width)]
    return {"root": [], **{m: ["root"] for m in middle}, "join": middle}


def chain(length: int) -> Dag:
    """`length` subtasks, each depending on the one before."""
    return {f"c{i}": [f"c{i - 1}"] if i else [] for i in range(length)}


def layered(layers: int, width: int, fan_in: int, seed: int) -> Dag:
    """`layers` x `width` subtasks; each past the first depends on `fan_in` of the layer above."""
    rng = random.Random(seed)
    dag: Dag = {}
    for layer in range(layers):
        above = [f"l{layer - 1}_{i}" for i in range(width)]
        for i in range(width):
            dag[f"l{layer}_{i}"] = sorted(rng.sample(above, fan_in)) if layer else []
    return dag


def workloads(*, quick: bool, only: str = "") -> list[Workload]:
    """W1, W2 and W3 (or those named in `only`) at full size, or smaller with `quick`."""
    width, length, layers, per_layer = (50, 50, 5, 10) if quick else (200, 200, 10, 20)
    w3 = layered(layers, per_layer, 2, SEED)
    every = [
        Workload("W1", f"1→{width}→1", fan_out(width), 0.0),
        Workload("W2", f"chain {length}", chain(length), 0.0),
        Workload("W3", f"{layers}x{per_layer}, 50 ms", w3, 0.05, layers=layers),
    ]
    keys = {k.strip().upper() for k in only.split(",") if k.strip()}
    return [w for w in every if not keys or w.key in keys]


def depths(dag: Dag) -> dict[str, int]:
    """Each subtask's depth: 0 for a root, else one more than its deepest dependency (the
    longest path from a root; `dag` is in topological order)."""
    depth: dict[str, int] = {}
    for name, deps in dag.items():
        depth[name] = 1 + max(depth[d] for d in deps) if deps else 0
    return depth


def levels(dag: Dag) -> list[list[str]]:
    """`dag`'s subtasks grouped by depth, in order: the waves a user of a library without a DAG
    primitive runs one after the other, each in parallel. For W1, W2 and W3 each wave is
    exactly what becomes ready together, and W3's are its layers."""
    depth = depths(dag)
    waves: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for name, d in depth.items():
        waves[d].append(name)
    return waves


def plan_for(dag: Dag, delay: float) -> list[dict[str, Any]]:
    """The `plan` of a task submission that runs `dag` on the no-op tool."""
    return [
        {
            "name": name,
            "description": f"benchmark subtask {name}",
            "dependencies": deps,
            "tool": "echo",
            "options": {"delay": delay},
        }
        for name, deps in dag.items()
    ]


async def run_baseline(dag: Dag, delay: float) -> float:
    """Seconds to run `dag` as asyncio tasks awaiting their dependencies' futures."""
    loop = asyncio.get_running_loop()
    done: dict[str, asyncio.Future[None]] = {name: loop.create_future() for name in dag}

    async def node(name: str, deps: list[str]) -> None:
        for dep in deps:
            await done[dep]
        if delay:
            await asyncio.sleep(delay)
        done[name].set_result(None)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for name, deps in dag.items():
            tg.create_task(node(name, deps))
    return time.perf_counter() - start
