"""Python function calls per subtask on the control plane: a measure of its work per subtask
that, unlike wall-clock or CPU time, does not move with the machine's speed.

    .venv/bin/python benchmarks/calls_per_subtask.py [--db sqlite|postgres] [--only W1,W2,W3]
                                                     [--top N] [--save PREFIX]
                                                     [--loop uvloop|asyncio]

For each workload: the same control plane and worker process as `bench_dag.py`, one warm-up run,
then one run under cProfile. Prints the calls per subtask, the same per layer (`_layers.py`:
api, runtime, engine, workflows, store, bus, metrics, events, protocol/sockets, worker,
asyncio's loop, the benchmark's own client, other; built-ins and the standard library's helpers
count to the layer that called them) and, with `--top N`, the N functions with the most time of
their own. The control plane's count is the budget the issues set; the benchmark's HTTP client
and event-bus subscriber run in its process, and are counted (in their own row). The worker
process (its event loop's thread, where both workers run) is profiled over the same run and
counted apart: on a chain every one of its calls is on the step's critical path too; its
"client (benchmark)" row is the benchmark's no-op tool and timestamps. Compare two versions of the
code by running this with `PYTHONPATH` pointed at each one's `src` (a git worktree): the counts
repeat within about 2 % run to run, where wall-clock figures on a shared machine may drift twofold.
cProfile slows the run down, so its times only rank the functions against each other.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import tempfile
from pathlib import Path

import uvloop
from _layers import LAYERS, Layers
from _workloads import workloads
from bench_dag import cluster, postgres_reachable, quiet_logs
from rich.console import Console
from rich.table import Table


async def measure(kind: str, only: str, top: int, console: Console, save: str = "",
                  loop: str = "uvloop") -> None:
    """Profile one run of each workload on a fresh database of `kind` and print the counts
    (the worker process on the same event loop as this one)."""
    table = Table(title=f"Control-plane function calls per subtask — {kind}", title_justify="left")
    for col in ("workload", "n", "calls per subtask", "makespan under cProfile",
                "worker process calls per subtask"):
        table.add_column(col, justify="left" if col == "workload" else "right")
    tops: list[str] = []
    layers: dict[str, tuple[Layers, int]] = {}
    worker_layers: dict[str, tuple[Layers, int]] = {}
    async with cluster(kind, uvloop=loop == "uvloop") as bench:
        for work in workloads(quick=False, only=only):
            await bench.run(work)  # warm-up: compile statements, fill caches
            assert bench.worker is not None
            with tempfile.TemporaryDirectory(prefix="shoal-calls-") as scratch:
                worker_path = Path(save + f".{work.key}.worker.prof" if save
                                   else Path(scratch) / "worker.prof")
                async with bench.worker.profiled(worker_path):
                    profile = cProfile.Profile()
                    profile.enable()
                    run = await bench.run(work)
                    profile.disable()
                worker_stats = pstats.Stats(str(worker_path))
            stats = pstats.Stats(profile)
            if save:
                profile.dump_stats(f"{save}.{work.key}.prof")
            n = len(work.dag)
            layers[work.key] = (Layers(stats), n)
            worker_layers[work.key] = (Layers(worker_stats), n)
            table.add_row(f"{work.key} {work.label}", str(n),
                          f"{stats.total_calls / n:,.0f}",  # type: ignore[attr-defined]
                          f"{run.makespan * 1000:.0f} ms",
                          f"{worker_stats.total_calls / n:,.0f}")  # type: ignore[attr-defined]
            if top:
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
                tops.append(f"{work.key}:\n{out.getvalue()}")
    console.print(table)
    console.print(layer_table(f"Calls per subtask by layer — {kind}", layers))
    console.print(layer_table(f"The worker process's calls per subtask by layer — {kind}",
                              worker_layers))
    for text in tops:
        console.print(text, markup=False, highlight=False)


def layer_table(title: str, layers: dict[str, tuple[Layers, int]]) -> Table:
    """Calls per subtask per layer: the layer's own functions, and with the helpers they
    called (built-ins, the standard library, pydantic)."""
    table = Table(title=f"{title} (own functions / with the helpers they call)",
                  title_justify="left")
    table.add_column("layer")
    for key in layers:
        table.add_column(f"{key} own", justify="right")
        table.add_column(f"{key} with helpers", justify="right")
    for name in LAYERS:
        row = [name]
        for counted, n in layers.values():
            row += [f"{counted.own.get(name, 0) / n:,.0f}",
                    f"{counted.total.get(name, 0) / n:,.0f}"]
        table.add_row(*row)
    row = ["all"]
    for counted, n in layers.values():
        row += [f"{sum(counted.own.values()) / n:,.0f}", f"{sum(counted.total.values()) / n:,.0f}"]
    table.add_row(*row)
    return table


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--only", default="", metavar="W1,W2,W3")
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="also list the N functions with the most time of their own")
    parser.add_argument("--save", default="", metavar="PREFIX",
                        help="also save each run's profile as PREFIX.W1.prof, …")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                        help="the event loop of the control plane and the worker process: "
                             "uvloop, as every Shoal command and `shoal serve` run it "
                             "(default), or asyncio's own, whose Python code is counted in "
                             "the loop's row")
    args = parser.parse_args()
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.db == "postgres" and not postgres_reachable():
        console.print("[red]PostgreSQL is not reachable; set SHOAL_BENCH_POSTGRES_URL.[/]")
        raise SystemExit(2)
    console.print(f"Event loop: {args.loop}")
    run = asyncio.run if args.loop == "asyncio" else uvloop.run
    run(measure(args.db, args.only, args.top, console, args.save, args.loop))


if __name__ == "__main__":
    main()
