"""What every peer module shares: the workloads, the command line, the timing and the JSON.

Runs inside the peers' virtualenv (`benchmarks/.peers-venv`), so it imports nothing but the
standard library and `benchmarks/_workloads.py` (standard library only too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _workloads

from _workloads import Workload, workloads

NOTES: list[str] = []  # what a peer wants its row to say (e.g. how durable its store is)
SLOW = 20.0  # seconds: keeps `make bench` within minutes when a peer takes 100x the others
RunOne = Callable[[Workload], Awaitable[float]]  # seconds for one run of a workload


def parse_args(description: str) -> argparse.Namespace:
    """The options every peer module takes (`bench_peers.py` passes them)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--url", required=True,
                        help="SQLite file path, or a PostgreSQL URL of a fresh database")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", default="")
    parser.add_argument("--variant", default="", help="a peer's own configuration choice")
    parser.add_argument("--warm-runs", type=int, default=0,
                        help="unmeasured runs of each workload at its own size before its "
                             "measured ones (a run taking turns with Shoal's)")
    return parser.parse_args()


async def measure(args: argparse.Namespace, run_one: RunOne) -> dict[str, dict[str, object]]:
    """Every workload `args.repeat` times after a warm-up (W1 and W2 at quick size, then
    `args.warm_runs` unmeasured runs of the workload itself); once when its first run took
    over `SLOW` seconds (the row's note says so)."""
    for warm in workloads(quick=True, only="W1,W2"):
        await run_one(warm)
    out: dict[str, dict[str, object]] = {}
    for work in workloads(quick=args.quick, only=args.only):
        for _ in range(args.warm_runs):
            await run_one(work)
        seconds = [await run_one(work)]
        while len(seconds) < args.repeat and seconds[0] <= SLOW:
            seconds.append(await run_one(work))
        if len(seconds) < args.repeat:
            NOTES.append(f"{work.key} ran once ({seconds[0]:.0f} s)")
        out[work.key] = {"seconds": seconds, "n": len(work.dag)}
    return out


def timed(start: float) -> float:
    """Seconds since `start` (a `time.perf_counter()`)."""
    return time.perf_counter() - start


def emit(peer: str, packages: list[str], body: Callable[[], Awaitable[dict[str, object]]]) -> None:
    """Run `body`, print one JSON line: the peer, its packages' versions and the results, or
    the error that stopped it (the table shows it in the peer's row)."""
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    doc: dict[str, object] = {"peer": peer, "versions": versions, "notes": NOTES}
    try:
        doc["results"] = asyncio.run(body())
    except Exception as exc:  # reported in the table, not raised: the other peers still run
        traceback.print_exc()
        doc["error"] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(doc), flush=True)
