"""The whole story of issue 37: Shoal through its API and in-process, the durable floor and the
peers, per workload and database, each with its ratios. `make bench` runs it.

    .venv/bin/python benchmarks/bench_peers.py [--db sqlite|postgres|both] [--quick]
                                               [--repeat N] [--only W1,W2] [--no-peers]

Per database, one after the other so none competes with another for the 2 cores:

1. `bench_dag.py`'s run (its tables are printed as before): Shoal's control plane in this
   process with a worker process, the asyncio baseline and the durable floor (`_floor.py`);
2. Shoal through the API (`_api.py`): a `shoal serve` process, a worker process and a client
   that POSTs each workload and follows its SSE stream to `task_complete`; after each of its
   measured runs, the same workload once by LangGraph (the peer the targets name), so that the
   two take turns and share the machine's drift over the minutes of the run (each measured run
   of either follows an unmeasured one of the same workload in the same process);
3. the same writes with no Shoal logic (`same_writes.py`): Shoal's transactions for one run
   of each workload, recorded, then replayed on a copy of its database by an orchestrator
   that does nothing else, with the durable floor's worker process, then with Shoal's own
   (the least a run of Shoal's takes with no control-plane logic);
4. each other peer (`_peers.py`, `peers/*_peer.py`), in its own virtualenv, on a fresh
   database of the same kind: the same DAGs, durable per step as its users would write them
   (each module's docstring says exactly what it measures).

Then one table per database: per workload, each row's makespan, ms per subtask (W1, W2; no-op
subtasks) or makespan ÷ critical path (W3; 50 ms subtasks), makespan ÷ the durable floor's,
÷ the same writes' and the row's makespan ÷ Shoal-through-the-API's (> 1: Shoal is ahead).
Results also go to `benchmarks/results/peers.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _api import api_row
from _compare import Role, Row, summary, table
from _peers import Paired, peer_rows
from _report import Outcome, render
from _steal import describe
from _workloads import Workload, workloads
from bench_dag import (
    POSTGRES_URL,
    bench_database,
    postgres_reachable,
    print_steal,
    quiet_logs,
    workload_options,
)
from bench_dag import parse_args as bench_dag_args
from rich.console import Console
from same_writes import same_writes_seconds

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "peers.json"


def shoal_rows(outcomes: list[Outcome]) -> list[Row]:
    """Shoal in-process and the durable floor, from `bench_dag`'s outcomes."""
    inside = Row(Role.IN_PROCESS.value, Role.IN_PROCESS,
                 {o.work.key: [r.makespan for r in o.runs] for o in outcomes},
                 note="control plane in the benchmark's process; task_complete on its bus")
    floor = Row(Role.FLOOR.value, Role.FLOOR, {o.work.key: list(o.floor) for o in outcomes},
                note="_floor.py: stores each step before acting on it, nothing else")
    return [inside, floor]


async def same_writes_rows(kind: str, works: list[Workload], repeat: int, *,
                           uvloop: bool) -> list[Row]:
    """The same writes with no Shoal logic (`same_writes.py`), with the floor's worker process
    and with Shoal's own, or why they did not run."""
    roles = {"floor": Role.SAME_WRITES, "shoal": Role.SAME_WRITES_WORKER}
    try:
        seconds = await same_writes_seconds(kind, works, repeat, uvloop=uvloop,
                                            workers=tuple(roles))
    except Exception as exc:  # the rows say so; the rest still runs
        return [Row(role.value, role, failed=f"{type(exc).__name__}: {exc}"[:300])
                for role in roles.values()]
    return [Row(Role.SAME_WRITES.value, Role.SAME_WRITES, seconds["floor"],
                note="same_writes.py: Shoal's own transactions for the workload, replayed with "
                     "the floor's worker process and nothing else"),
            Row(Role.SAME_WRITES_WORKER.value, Role.SAME_WRITES_WORKER, seconds["shoal"],
                note="the same, with Shoal's own worker process: the least a run of Shoal's "
                     "takes with no control-plane logic")]


async def one_database(kind: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Every row on `kind`; print bench_dag's tables and the comparison; the JSON."""
    started = time.monotonic()
    works = workloads(quick=args.quick, only=args.only)
    outcomes, commits = await bench_database(kind, args)
    render(kind, outcomes, console, args.repeat, commits)
    print_steal(outcomes, console)
    same = await same_writes_rows(kind, works, args.repeat, uvloop=args.uvloop)
    paired = None if args.no_peers else Paired(kind, args.quick)
    try:
        api = await api_row(kind, works, args.repeat,
                            between=paired.run if paired is not None else None)
    except Exception as exc:  # the row says so; the rest still runs
        api = Row(Role.API.value, Role.API, failed=f"{type(exc).__name__}: {exc}"[:300])
    peers = [] if paired is None else [
        *(paired.rows.values() if api.seconds else await peer_rows(
            kind, args.quick, args.repeat, args.only, paired=True)),
        *await peer_rows(kind, args.quick, args.repeat, args.only, paired=False)]
    rows = [api, *shoal_rows(outcomes), *same, *peers]
    console.print(table(kind, works, rows, args.repeat))
    paired_steal = describe({f"{row.label}'s": row.steal for row in (api, *peers)})
    if paired_steal:
        console.print(paired_steal)
    return {"seconds": time.monotonic() - started, "rows": summary(works, rows)}


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Each database in turn; the JSON document."""
    doc: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "quick": args.quick,
        "repeat": args.repeat, "only": args.only, "databases": {}}
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"Load average {load} on {os.cpu_count()} CPUs: wall-clock figures are noisy "
                  "when other work shares the machine.")
    for kind in ["sqlite", "postgres"] if args.db == "both" else [args.db]:
        if kind == "postgres" and not postgres_reachable():
            console.print(f"[yellow]PostgreSQL is not reachable at {POSTGRES_URL}; skipped.[/]")
            continue
        doc["databases"][kind] = await one_database(kind, args, console)
    return doc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (`argv`, or the command's own); those of `bench_dag.py` this
    command does not take keep `bench_dag.py`'s defaults (`bench_dag.bench_database` reads
    them), whichever it adds."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    workload_options(parser)
    parser.add_argument("--no-peers", action="store_true",
                        help="Shoal and the floor only (no peers' venv)")
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    for name, default in vars(bench_dag_args([])).items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


def main() -> None:
    """Run, print, and write benchmarks/results/peers.json."""
    args = parse_args()
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 200)
    started = time.monotonic()
    doc = asyncio.run(main_async(args, console))
    doc["wall_seconds"] = time.monotonic() - started
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"Wall time {doc['wall_seconds']:.0f} s. Results written to "
                  f"{RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
