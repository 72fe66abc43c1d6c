"""Two source trees of Shoal alternated run by run: which one a change makes cheaper.

    .venv/bin/python benchmarks/trees.py A B [--pairs 6] [--db sqlite|postgres] \
        [--only W1,W2,W3] [--repeat 3] [--quick] [--history TASKS]

A and B are folders that each hold a `shoal` package: another commit's `src` (`git worktree
add /tmp/before HEAD~1`, then `/tmp/before/src`), this checkout's `src`, or a build of it
(`cython_tree.py`). Each pair runs `bench_dag.py` once on each tree, from this checkout's
benchmarks, with the tree first on `PYTHONPATH` (ahead of the editable install): the first
pair runs A first, the next B first, and so on, so that the machine's drift over minutes
falls on both alike.

Per workload it prints each tree's median of Shoal's time a subtask, the durable floor's,
their ratio, and the control plane's and the worker process's CPU a subtask. Beside them, B
over A: the median of the pairs' own ratios, and in how many pairs B was lower. The same
ratio is then given over the quiet pairs alone: those where the host's steal (`_steal.py`),
the median over each run's measured runs, Shoal's and the floor's alike, was at most 2 % in
both runs. A pair made under steal can be the host's. Every figure is lower-is-better.
Each run's figures go to `benchmarks/results/trees.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _steal import NOTED
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
LATEST = HERE / "results" / "latest.json"
OUT = HERE / "results" / "trees.json"
# What `bench_dag.py`'s JSON gives per workload, under the name printed for it.
METRICS = {
    "shoal": "Shoal",
    "floor": "floor",
    "ratio_vs_floor": "÷ floor",
    "control_plane_cpu_ms_per_subtask": "control plane CPU",
    "worker_cpu_ms_per_subtask": "worker CPU",
}


@dataclass(frozen=True, slots=True)
class Run:
    """One `bench_dag.py` run of one tree: per workload, its figures and the steal over its
    measured runs (the highest of Shoal's and the floor's medians)."""

    pair: int
    tree: str  # "A" or "B"
    figures: dict[str, dict[str, float]]
    steal: dict[str, float]


def tree_of(path: str) -> Path:
    """`path` as a tree to run: a folder holding the `shoal` package."""
    folder = Path(path).resolve()
    if not (folder / "shoal" / "__init__.py").is_file():
        raise SystemExit(f"{path}: no shoal package there (give a folder that holds shoal/, "
                         "such as a checkout's src)")
    return folder


def order(pair: int) -> tuple[str, str]:
    """Which tree runs first in `pair`: A in even pairs, B in odd ones."""
    return ("A", "B") if pair % 2 == 0 else ("B", "A")


def read_run(doc: dict[str, Any], db: str, pair: int, tree: str) -> Run:
    """The figures of `bench_dag.py`'s JSON (`doc`) for `db`."""
    figures: dict[str, dict[str, float]] = {}
    steal: dict[str, float] = {}
    for key, found in doc["databases"][db].items():
        if not isinstance(found, dict) or "shoal" not in found:
            continue  # the database's other entries: its seconds, the commit floor
        figures[key] = {m: float(found[m]) for m in METRICS if found.get(m) is not None}
        shares = found.get("steal") or {}
        steal[key] = max((statistics.median(s) for s in shares.values() if s), default=0.0)
    return Run(pair, tree, figures, steal)


@dataclass(frozen=True, slots=True)
class Line:
    """One workload's metric over the pairs: each tree's median, and B over A."""

    workload: str
    metric: str
    a: float
    b: float
    ratio: float  # the median of the pairs' own B ÷ A
    lower: int  # pairs where B was lower
    pairs: int
    quiet_ratio: float | None  # the same median over the quiet pairs alone
    quiet: int


def summary(runs: Sequence[Run]) -> list[Line]:
    """Per workload and metric, what `runs` (whole pairs only) say of B against A."""
    by_pair: dict[int, dict[str, Run]] = {}
    for run in runs:
        by_pair.setdefault(run.pair, {})[run.tree] = run
    whole = [(p["A"], p["B"]) for _, p in sorted(by_pair.items()) if {"A", "B"} <= p.keys()]
    lines: list[Line] = []
    if not whole:
        return lines
    for workload in whole[0][0].figures:
        for metric in METRICS:
            both = [(a, b) for a, b in whole if metric in a.figures.get(workload, {})
                    and metric in b.figures.get(workload, {})]
            if not both:
                continue
            paired = [(b.figures[workload][metric] / a.figures[workload][metric],
                       max(a.steal.get(workload, 0.0), b.steal.get(workload, 0.0)))
                      for a, b in both if a.figures[workload][metric] > 0]
            ratios = [ratio for ratio, _ in paired]
            quiet = [ratio for ratio, steal in paired if steal <= NOTED]
            lines.append(Line(
                workload, metric,
                statistics.median(a.figures[workload][metric] for a, _ in both),
                statistics.median(b.figures[workload][metric] for _, b in both),
                statistics.median(ratios) if ratios else float("nan"),
                sum(b.figures[workload][metric] < a.figures[workload][metric] for a, b in both),
                len(both), statistics.median(quiet) if quiet else None, len(quiet)))
    return lines


def table(lines: Sequence[Line], a: Path, b: Path) -> Table:
    """The lines as a table for a reader."""
    out = Table(title=f"B ({b}) beside A ({a}): medians; B ÷ A, the median of the pairs' own")
    for name in ("workload", "figure", "A", "B", "B ÷ A", "B lower", "quiet pairs' B ÷ A"):
        out.add_column(name, justify="left" if name in ("workload", "figure") else "right")
    for line in lines:
        unit = "" if line.metric == "ratio_vs_floor" or (
            line.workload == "W3" and line.metric in ("shoal", "floor")) else " ms"
        quiet = (f"{line.quiet_ratio:.2f}x of {line.quiet}" if line.quiet_ratio is not None
                 else "no quiet pair")
        out.add_row(line.workload, METRICS[line.metric], f"{line.a:.3f}{unit}",
                    f"{line.b:.3f}{unit}", f"{line.ratio:.2f}x",
                    f"{line.lower} of {line.pairs}", quiet)
    return out


def python_path(tree: Path) -> str:
    """`PYTHONPATH` with `tree` first, ahead of what it held and of the editable install."""
    return os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH", "")])])


def bench_argv(args: argparse.Namespace) -> list[str]:
    """The command of one `bench_dag.py` run with this command's options."""
    return [sys.executable, str(HERE / "bench_dag.py"), "--db", args.db, "--uvloop",
            "--repeat", str(args.repeat), *(["--only", args.only] if args.only else []),
            *(["--quick"] if args.quick else []), "--history", str(args.history)]


def bench(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One `bench_dag.py` run with `tree` first on the path; its JSON."""
    env = {**os.environ, "PYTHONPATH": python_path(tree)}
    done = subprocess.run(bench_argv(args), env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"bench_dag.py failed on {tree} (exit {done.returncode}):\n{tail}")
    doc: dict[str, Any] = json.loads(LATEST.read_text())
    return doc


def main(argv: list[str] | None = None) -> None:
    """Alternate the two trees, print what they gave, and write the runs as JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("a", help="a folder holding the shoal package (the baseline)")
    parser.add_argument("b", help="a folder holding the shoal package (the change)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--only", default="W1,W2,W3", metavar="W1,W2,W3")
    parser.add_argument("--repeat", type=int, default=3, help="bench_dag.py's runs a workload")
    parser.add_argument("--quick", action="store_true", help="bench_dag.py's small workloads")
    parser.add_argument("--history", type=int, default=0, metavar="TASKS",
                        help="bench_dag.py's W1 tasks run before the measured ones")
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.history < 0:
        parser.error("--pairs must be at least 1 and --history not below 0")
    trees = {"A": tree_of(args.a), "B": tree_of(args.b)}
    console = Console(width=None if sys.stdout.isatty() else 160)
    runs: list[Run] = []
    for pair in range(args.pairs):
        for tree in order(pair):
            runs.append(read_run(bench(trees[tree], args), args.db, pair, tree))
            console.print(f"pair {pair + 1} of {args.pairs}: {tree} done", style="dim")
    console.print(table(summary(runs), trees["A"], trees["B"]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"a": str(trees["A"]), "b": str(trees["B"]), "db": args.db,
                               "runs": [asdict(r) for r in runs]}, indent=2) + "\n")
    console.print(f"Runs written to {OUT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
