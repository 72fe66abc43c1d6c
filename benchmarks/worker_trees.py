"""Shoal's worker on two source trees, alternated round by round: which one a change to the
worker makes cheaper.

    .venv/bin/python benchmarks/worker_trees.py A B [--pairs 6] [--burst 100] [--steps N]

A and B are folders that each hold a `shoal` package (another commit's `src`: `git worktree add
/tmp/before HEAD~1`, then `/tmp/before/src`; or this checkout's `src`), as `trees.py` takes
them. Each round is one of `worker_roundtrip.py`'s rounds of Shoal's worker alone (a worker
process of its own, `--steps` steps of `--burst` attempts after a fifth as many unmeasured),
the tree first on the worker process's `PYTHONPATH`; the first pair runs A first, the next B
first, and so on, so that the machine's drift falls on both alike. A worker's CPU an attempt
moves less than a whole run's time (two runs back to back agree within a few per cent), and a
change inside the worker shows here before it shows in `bench_dag.py`.

It prints each tree's median CPU an attempt and round trip p50, B over A as the median of the
pairs' own ratios, and in how many pairs B was lower (lower is better). The figures go to
`benchmarks/results/worker_trees.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvloop
from rich.console import Console
from rich.table import Table
from trees import order, python_path, tree_of
from worker_roundtrip import one_round

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "worker_trees.json"
FIGURES = {"cpu_us": "worker CPU / attempt", "p50_us": "round trip p50"}


@contextlib.contextmanager
def first_on_path(tree: Path) -> Iterator[None]:
    """`tree` first on `PYTHONPATH` for the processes started meanwhile."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = python_path(tree)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


async def alternate(trees: dict[str, Path], pairs: int, steps: int,
                    burst: int) -> list[dict[str, Any]]:
    """`pairs` pairs of rounds, one of each tree (`trees`' "A" and "B"), the first tree
    alternating: each round's tree, pair and figures (`Round.figures`)."""
    runs = []
    for pair in range(pairs):
        for name in order(pair):
            with first_on_path(trees[name]):
                done = await one_round("shoal", steps, steps // 5, burst)
            runs.append({"tree": name, "pair": pair, **done.figures()})
    return runs


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tree the median of each figure; per figure B over A, the median of the pairs'
    ratios, and the pairs where B was lower."""
    out: dict[str, Any] = {}
    for tree in ("A", "B"):
        mine = [r for r in runs if r["tree"] == tree]
        out[tree] = {key: statistics.median(r[key] for r in mine) for key in FIGURES}
    by_pair: dict[int, dict[str, dict[str, Any]]] = {}
    for run in runs:
        by_pair.setdefault(run["pair"], {})[run["tree"]] = run
    for key in FIGURES:
        ratios = [p["B"][key] / p["A"][key] for p in by_pair.values()]
        out[f"{key}_ratio"] = {"median": statistics.median(ratios),
                               "lower": sum(r < 1 for r in ratios), "pairs": len(ratios)}
    return out


def render(figures: dict[str, Any], trees: dict[str, Path], burst: int, console: Console) -> None:
    """The table: each tree's medians, and B over A."""
    table = Table(title=f"Shoal's worker on two trees, bursts of {burst} (medians)")
    for col in ("", *FIGURES.values()):
        table.add_column(col, justify="left" if not col else "right")
    for tree in ("A", "B"):
        table.add_row(f"{tree}: {trees[tree]}",
                      *(f"{figures[tree][key]:.1f} µs" for key in FIGURES))
    table.add_row("B ÷ A, median of the pairs",
                  *(f"{figures[f'{key}_ratio']['median']:.3f}" for key in FIGURES))
    table.add_row("pairs where B was lower",
                  *(f"{figures[f'{key}_ratio']['lower']} of {figures[f'{key}_ratio']['pairs']}"
                    for key in FIGURES))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", metavar="A")
    parser.add_argument("b", metavar="B")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--burst", type=int, default=100,
                        help="attempts a step, in one frame (1 to 256)")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps a round (default 20,000 attempts' worth)")
    args = parser.parse_args()
    steps = args.steps or max(10, 20_000 // args.burst)
    if args.pairs < 1 or steps < 1 or not 1 <= args.burst <= 256:
        parser.error("--pairs and --steps must be at least 1, --burst 1 to 256")
    trees = {"A": tree_of(args.a), "B": tree_of(args.b)}
    runs = uvloop.run(alternate(trees, args.pairs, steps, args.burst))
    figures = summary(runs)
    render(figures, trees, args.burst, Console(width=120))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()},
                                   "burst": args.burst, "steps": steps, "figures": figures,
                                   "runs": runs}, indent=2))
    print(f"Results written to {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
