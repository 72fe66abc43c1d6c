"""DBOS Transact: W1, W2 and W3 as one durable workflow each, one step per subtask.

    benchmarks/.peers-venv/bin/python benchmarks/peers/dbos_peer.py --db sqlite|postgres
        --url PATH|URL [--quick] [--repeat N] [--only W1,W2]

What is measured, so the comparison with Shoal is stated:

- The workflow: one `@DBOS.workflow()` (async) that runs the DAG's subtasks as `@DBOS.step()`s
  (async), wave by wave in depth order (`_workloads.levels`): the subtasks of one wave start
  together with `asyncio.gather` (DBOS's documented way to run steps in parallel inside a
  workflow), the next wave when they have all ended. For W1, W2 and W3 each wave is exactly the
  set that becomes ready together (W3's waves are its layers, all subtasks 50 ms), so the
  makespan is the DAG's. A step sleeps `delay` (W3) and returns its name, which DBOS stores.
- Durability: DBOS's system database records the workflow's start, each step's output before
  the workflow moves on, and its end: a SQLite file (DBOS's own settings) or a fresh PostgreSQL
  database. Every run is a new workflow id.
- The clock: `await workflow(...)` from the caller, start to return, in this process (a
  library: no network, no HTTP, no worker processes). `DBOS.launch()` is outside the clock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from _common import Workload, emit, measure, parse_args, timed
from _workloads import levels
from dbos import DBOS, SetWorkflowID

PACKAGES = ["dbos"]


@DBOS.step()
async def subtask(name: str, delay: float) -> str:
    """One subtask: optionally sleep; its output (the name) is what DBOS stores."""
    if delay:
        await asyncio.sleep(delay)
    return name


@DBOS.workflow()
async def run_dag(waves: list[list[str]], delay: float) -> int:
    """Run `waves` one after the other, each wave's steps in parallel; how many ran."""
    ran = 0
    for wave in waves:
        if len(wave) == 1:
            await subtask(wave[0], delay)
        else:
            await asyncio.gather(*(subtask(name, delay) for name in wave))
        ran += len(wave)
    return ran


def config(kind: str, url: str) -> dict[str, Any]:
    """DBOS's configuration for a system database of `kind` at `url`."""
    target = f"sqlite:///{url}" if kind == "sqlite" else url
    return {"name": "shoal-bench-peer", "system_database_url": target, "log_level": "WARNING"}


async def main_async() -> dict[str, object]:
    args = parse_args(__doc__.split("\n")[0])
    DBOS(config=config(args.db, args.url))  # type: ignore[arg-type]
    DBOS.launch()
    try:

        async def run_one(work: Workload) -> float:
            waves = levels(work.dag)
            start = time.perf_counter()
            with SetWorkflowID(uuid.uuid4().hex):
                ran = await run_dag(waves, work.delay)
            seconds = timed(start)
            if ran != len(work.dag):
                raise RuntimeError(f"{work.key}: {ran} of {len(work.dag)} steps ran")
            return seconds

        return await measure(args, run_one)
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    emit("dbos", PACKAGES, main_async)
