"""One of Shoal's tuning constants at several values, alternated task by task in one run: the
same control plane, worker process and database take each value in turn, so the machine's
drift over minutes (which moves a workload's makespan by more than most single changes are
worth) falls on every value alike.

    .venv/bin/python benchmarks/alternate.py shoal.runtime.executes:FIRST_SEND 1000000,32 \
        [--only W1] [--repeat 12] [--db sqlite|postgres] [--quick]

The constant is a module-level integer or float that the code reads when it runs (not one
copied at import); each value is set before its task is submitted and the original is put
back at the end. One unmeasured task of each workload warms the run. Prints, per workload and
value, the median and the mean makespan and each run's, in the order they ran.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType

import uvloop
from _workloads import Workload, workloads
from bench_dag import cluster, postgres_reachable, quiet_logs
from rich.console import Console
from rich.table import Table


@dataclass(frozen=True, slots=True)
class Knob:
    """A module-level constant: where it lives and its value before the run."""

    module: ModuleType
    name: str
    original: float

    @classmethod
    def parse(cls, spec: str) -> Knob:
        """`package.module:NAME`, which must exist and hold a number."""
        path, sep, name = spec.partition(":")
        if not sep or not path or not name:
            raise ValueError(f"{spec!r}: give the constant as package.module:NAME")
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            raise ValueError(f"{spec!r}: no module {path!r} ({exc})") from None
        value = getattr(module, name, None)
        if not _number(value):
            raise ValueError(f"{spec!r}: {name} is not a number in {path}")
        return cls(module, name, value)

    def set(self, value: float) -> None:
        setattr(self.module, self.name, type(self.original)(value))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(slots=True)
class Makespans:
    """Each value's makespans (ms) for one workload, in the order they ran."""

    workload: str
    by_value: dict[float, list[float]] = field(default_factory=dict)


def values_of(text: str) -> list[float]:
    """Comma-separated numbers, at least two and none repeated."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{text!r}: give the values as numbers separated by commas") from None
    if len(values) < 2 or len(set(values)) != len(values):
        raise ValueError(f"{text!r}: give two or more different values")
    return values


async def alternate(knob: Knob, values: Sequence[float], works: Sequence[Workload], *,
                    db: str, repeat: int) -> list[Makespans]:
    """Run each workload `repeat` times per value, the values taking turns task by task."""
    out = [Makespans(w.key) for w in works]
    try:
        async with cluster(db, uvloop=True) as bench:
            for work, spans in zip(works, out, strict=True):
                knob.set(knob.original)
                await bench.run(work)  # warm-up, not measured
                for _ in range(repeat):
                    for value in values:
                        knob.set(value)
                        run = await bench.run(work)
                        if run.status != "task_complete":
                            raise RuntimeError(f"{work.key} ended {run.status} at {value}")
                        spans.by_value.setdefault(value, []).append(run.makespan * 1e3)
    finally:
        knob.set(knob.original)
    return out


def table(knob: Knob, results: Sequence[Makespans]) -> Table:
    """Per workload and value: the median and mean makespan and each run's."""
    out = Table(title=f"{knob.module.__name__}:{knob.name}, alternated task by task (ms)")
    for col in ("workload", "value", "median", "mean", "runs, in order"):
        out.add_column(col, justify="left" if col in ("workload", "runs, in order") else "right")
    for spans in results:
        for value, ms in spans.by_value.items():
            out.add_row(spans.workload, f"{value:g}", f"{statistics.median(ms):.1f}",
                        f"{statistics.mean(ms):.1f}", " ".join(f"{m:.0f}" for m in ms))
    return out


def main(argv: list[str] | None = None) -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("constant", metavar="package.module:NAME")
    parser.add_argument("values", metavar="V1,V2[,…]")
    parser.add_argument("--only", default="W1", metavar="W1,W2,W3")
    parser.add_argument("--repeat", type=int, default=12, help="tasks per value (12)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="the workloads' small sizes")
    args = parser.parse_args(argv)
    try:
        knob, values = Knob.parse(args.constant), values_of(args.values)
    except ValueError as exc:
        parser.error(str(exc))
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    works = workloads(quick=args.quick, only=args.only)
    if not works:
        parser.error(f"--only {args.only!r} names no workload (W1, W2, W3)")
    quiet_logs()
    if args.db == "postgres" and not postgres_reachable():
        parser.error("PostgreSQL is not reachable; set SHOAL_BENCH_POSTGRES_URL.")
    results = uvloop.run(alternate(knob, values, works, db=args.db, repeat=args.repeat))
    Console(width=None if sys.stdout.isatty() else 160).print(table(knob, results))


if __name__ == "__main__":
    main()
