"""The fault matrix as a table: each fault injected while 30-subtask graphs run on real
processes, and what it cost (`tests/faults/matrix.py` has the scenarios; `make test` runs them at
a reduced size and asserts zero in every cell).

    .venv/bin/python benchmarks/faults.py [--size reduced|full] [--only NAME,…]

Columns: tasks finished of those submitted, steps lost (not completed), steps completed twice
(more than one accepted result), events a reconnecting client missed or got twice (against the
store's log), attempts that did not succeed (the fault's mark: expired or failed and run
again), and the scenario's wall-clock time. Faults that need root are skipped without it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for `tests`

from tests.faults.matrix import FAULTS, FULL, REDUCED, Report, run_fault


async def main_async(args: argparse.Namespace, console: Console) -> int:
    size = FULL if args.size == "full" else REDUCED
    wanted = {n.strip().lower() for n in args.only.split(",") if n.strip()}
    reports: list[Report] = []
    for fault in FAULTS:
        if wanted and not any(w in fault.name.lower() for w in wanted):
            continue
        if fault.privileged and os.geteuid() != 0:
            console.print(f"[yellow]skipped[/] {fault.name}: needs root")
            continue
        with tempfile.TemporaryDirectory(prefix="shoal-fault-") as root:
            console.print(f"running: {fault.name} …")
            reports.append(await run_fault(fault, Path(root), size))
    table = Table(title=f"Fault matrix ({args.size}: {size.tasks} graph(s) of "
                        f"{size.subtasks} subtasks, {size.delay:g} s a step)")
    for col in ("fault", "finished", "lost", "twice", "events lost", "events twice",
                "retried", "tracebacks", "time", "note"):
        table.add_column(col, justify="left" if col in ("fault", "note") else "right")
    for r in reports:
        mark = "" if r.clean else "[red]"
        table.add_row(f"{mark}{r.fault}", f"{r.finished}/{r.tasks}", str(r.lost), str(r.twice),
                      str(r.events_lost), str(r.events_twice), str(r.retried), str(r.tracebacks),
                      f"{r.seconds:.0f} s", r.note)
    console.print(table)
    return 0 if all(r.clean for r in reports) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("reduced", "full"), default="full")
    parser.add_argument("--only", default="", help="comma-separated parts of fault names")
    args = parser.parse_args()
    sys.exit(asyncio.run(main_async(args, Console(width=150))))


if __name__ == "__main__":
    main()
