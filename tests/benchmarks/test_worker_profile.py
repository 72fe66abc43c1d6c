"""The benchmark's worker process profiled on command (`bench_dag.WorkerProcess.profiled`, which
`calls_per_subtask.py` counts the worker process's calls with): the profile covers the runs
inside the block and only those, and counts every attempt the worker ran."""

from __future__ import annotations

import pstats
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _layers import Layers
from _workloads import Workload, chain
from bench_dag import cluster


def calls_of(stats: pstats.Stats, name: str, module: str) -> int:
    """How many times the profile saw `module`'s function `name` called."""
    return sum(nc for (path, _, func), (_, nc, *_rest) in stats.stats.items()  # type: ignore[attr-defined]
               if func == name and path.replace("\\", "/").endswith(module))


@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_the_worker_process_is_profiled_over_the_block_only(tmp_path: Path) -> None:
    work = Workload("W2", "chain 12", chain(12), 0.0)
    inside = tmp_path / "inside.prof"
    async with cluster("sqlite", uvloop=True) as bench:
        assert bench.worker is not None
        first = await bench.run(work)  # before the block: not counted
        async with bench.worker.profiled(inside):
            second = await bench.run(work)
        assert inside.exists()  # whole once the block has ended
        size = inside.stat().st_size
        third = await bench.run(work)  # after it: not counted, the file left alone
    assert {first.status, second.status, third.status} == {"task_complete"}
    assert inside.stat().st_size == size
    stats = pstats.Stats(str(inside))
    assert calls_of(stats, "outcome", "shoal/worker/executor.py") == 12
    layers = Layers(stats)
    assert layers.own["worker"] > 0
    assert layers.total["protocol/sockets"] > 0  # the worker's socket, `websockets`
