"""Shoal's SQLite writes statement by statement: what each kind of statement of a workload
took inside Shoal's run, beside what the same statements, with the same parameters, take
replayed alone on a copy of the database from before the run, one after another; and the
WAL frames a commit writes.

    .venv/bin/python benchmarks/statement_cost.py [--only W1,W2,W3] [--repeat 3]
        [--between N] [--quick] [--history TASKS]

Shoal runs each workload in-process once after its warm-up, as `bench_dag.py` runs it, while
`_same_writes.py` records its transactions and times each statement and each commit as the
`sqlite3` driver runs them (the driver's own time: SQLite's C, the parameters' binding).
Shoal stops; each recording is then replayed `--repeat` times, each on a fresh copy of the
database as it was before the run, with the pragmas Shoal's writer connection sets and no
automatic checkpoint (as Shoal's writer: its checkpoints run on a thread of their own), so
that the WAL's growth at each commit counts the frames it wrote. With `--between N`, the
replay reads N small objects before each statement, as Shoal's Python between two
statements reads its own: what that alone does to a statement's time.

Per workload, one row per kind of statement (its verb and table) and one for the commits:
how many there were and the rows they wrote, then µs a transaction inside Shoal and alone
(the median over the replays), and the ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _same_writes import SHOAL_PRAGMAS, Tx
from _workloads import Workload, workloads
from bench_dag import quiet_logs
from rich.console import Console
from rich.table import Table
from same_writes import recorded_runs

COMMIT = "COMMIT"
WAL_HEADER = 32  # bytes before a WAL's first frame
FRAME_HEADER = 24  # bytes before each frame's page
_KIND = re.compile(r"\s*(INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)"
                   r"\s+\"?(\w+)", re.IGNORECASE)


def kind_of(sql: str) -> str:
    """A statement's verb and table, `INSERT INTO attempts` say (the statement's first words
    where it has no table)."""
    found = _KIND.match(sql)
    if found is None:
        return " ".join(sql.split()[:3])
    verb = " ".join(found.group(1).upper().split())
    return f"{verb} {found.group(2)}"


def rows_of(sql: str, params: Any, many: bool) -> int:
    """The rows a statement wrote: one a parameter set of an `executemany`, else one a
    `VALUES` tuple (the events of a batch go as one statement of several)."""
    if many:
        return len(params)
    _, found, values = sql.upper().partition("VALUES")
    return max(1, values.split("RETURNING")[0].count("(")) if found else 1


@dataclass
class Costs:
    """One workload's statements by kind: how many, their rows, seconds inside Shoal and
    each replay's seconds alone; the WAL frames each replayed commit wrote."""

    transactions: int = 0
    count: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    inside: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    alone: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    frames: list[int] = field(default_factory=list)


def inside_shoal(txs: list[Tx]) -> Costs:
    """What the recorded statements took inside Shoal's run, by kind."""
    costs = Costs(transactions=len(txs))
    for tx in txs:
        if len(tx.seconds) != len(tx.statements) or tx.commit_seconds is None:
            raise RuntimeError("A recorded transaction has no times: not recorded on SQLite.")
        for (sql, params, many), seconds in zip(tx.statements, tx.seconds, strict=True):
            kind = kind_of(sql)
            costs.count[kind] += 1
            costs.rows[kind] += rows_of(sql, params, many)
            costs.inside[kind] += seconds
        costs.count[COMMIT] += 1
        costs.inside[COMMIT] += tx.commit_seconds
    return costs


def replay_alone(copy: Path, txs: list[Tx], between: int) -> tuple[dict[str, float], list[int]]:
    """`txs` run one after another on the database file `copy`, each statement and commit
    timed: seconds by kind, and the WAL frames of each commit. The transactions begin as
    Shoal's writer's do: the driver's own `BEGIN` before the first change, in its time."""
    db = sqlite3.connect(copy)
    try:
        for pragma in (*SHOAL_PRAGMAS, "wal_autocheckpoint=0"):
            db.execute(f"PRAGMA {pragma}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # an empty WAL: its growth is the frames
        page = int(db.execute("PRAGMA page_size").fetchone()[0]) + FRAME_HEADER
        wal = Path(f"{copy}-wal")
        others = [{"n": i, "text": str(i)} for i in range(between)]
        seconds: dict[str, float] = defaultdict(float)
        frames: list[int] = []
        for tx in txs:
            size = wal.stat().st_size if wal.exists() else 0
            for sql, params, many in tx.statements:
                if others:
                    _read(others)
                began = time.perf_counter()
                if many:
                    db.executemany(sql, params)
                else:
                    db.execute(sql, params)
                seconds[kind_of(sql)] += time.perf_counter() - began
            began = time.perf_counter()
            db.commit()
            seconds[COMMIT] += time.perf_counter() - began
            grown = wal.stat().st_size - max(size, WAL_HEADER)
            frames.append(grown // page)
        return seconds, frames
    finally:
        db.close()


def _read(objects: list[dict[str, Any]]) -> int:
    """Read every object of `objects` (work between two statements, as Shoal's is)."""
    total = 0
    for obj in objects:
        total += obj["n"] + len(obj["text"])
    return total


async def measure(works: list[Workload], repeat: int, between: int,
                  history: int = 0) -> list[Costs]:
    """Each workload recorded once inside Shoal (after `history` W1 tasks, unrecorded), then
    replayed alone `repeat` times."""
    with tempfile.TemporaryDirectory(prefix="shoal-statements-") as name:
        scratch = Path(name)
        _, recorded, _ = await recorded_runs("sqlite", works, 0, scratch, history_tasks=history)
        results = []
        for work in works:
            txs = recorded[work.key]
            costs = inside_shoal(txs)
            for turn in range(repeat):
                copy = scratch / f"{work.key}.{turn}.db"
                shutil.copyfile(scratch / f"{work.key}.db", copy)
                seconds, frames = replay_alone(copy, txs, between)
                for kind, spent in seconds.items():
                    costs.alone[kind].append(spent)
                costs.frames = frames
                for path in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
                    if path.exists():
                        os.unlink(path)
            results.append(costs)
        return results


def table(work: Workload, costs: Costs, repeat: int, between: int) -> Table:
    """One workload's statements by kind, inside Shoal and alone."""
    n = costs.transactions
    also = f", {between} objects read before each statement" if between else ""
    out = Table(title=f"{work.key}'s SQLite writes, statement by statement (µs a transaction "
                      f"of {n}; alone: median of {repeat}{also})", title_justify="left")
    for col in ("statement", "run", "rows", "inside Shoal", "alone", "inside ÷ alone"):
        out.add_column(col, justify="left" if col == "statement" else "right")
    order = sorted((k for k in costs.count if k != COMMIT), key=lambda k: -costs.inside[k])
    total_in = total_alone = 0.0
    for kind in [*order, COMMIT]:
        inside = costs.inside[kind] / n * 1e6
        alone = statistics.median(costs.alone[kind]) / n * 1e6
        total_in, total_alone = total_in + inside, total_alone + alone
        rows = "" if kind == COMMIT else str(costs.rows[kind])
        out.add_row(kind, str(costs.count[kind]), rows, f"{inside:.1f}", f"{alone:.1f}",
                    f"{inside / alone:.2f}x" if alone else "-")
    out.add_row("all", "", "", f"{total_in:.1f}", f"{total_alone:.1f}",
                f"{total_in / total_alone:.2f}x" if total_alone else "-", style="bold")
    frames = costs.frames[1:] or costs.frames  # the first commit is the submission's
    out.caption = (f"WAL frames a commit, replayed: {statistics.mean(frames):.2f} on average "
                   f"after the first ({costs.frames[0] if costs.frames else 0} for the first)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="W1,W2,W3", metavar="W1,W2,W3")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--between", type=int, default=0, metavar="N",
                        help="read N small objects before each replayed statement")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--history", type=int, default=0, metavar="TASKS",
                        help="first run this many W1 tasks, unrecorded (bench_dag.py's)")
    args = parser.parse_args()
    if args.repeat < 1 or args.between < 0 or args.history < 0:
        parser.error("--repeat must be at least 1, --between and --history not below 0")
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 160)
    works = workloads(quick=args.quick, only=args.only)
    import uvloop
    results = uvloop.run(measure(works, args.repeat, args.between, args.history))
    for work, costs in zip(works, results, strict=True):
        console.print(table(work, costs, args.repeat, args.between))


if __name__ == "__main__":
    main()
