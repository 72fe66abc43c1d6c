"""Shoal beside the same writes with no Shoal logic, and beside the durable floor.

    .venv/bin/python benchmarks/same_writes.py [--db sqlite|postgres|both] [--only W1,W2,W3]
        [--repeat 3] [--uvloop]

Shoal runs each workload in-process as `bench_dag.py` runs it (`--repeat` times, after its
warm-up), then once more while its transactions are recorded, from a copy of its database
taken just before (`_same_writes.py`). Shoal stops; the durable floor (`_floor.py`) runs the
same workloads on its own small tables; then the recordings are replayed, each `--repeat`
times on a fresh copy of its database, by an orchestrator with no Shoal logic and the
floor's worker process, and again with Shoal's own worker process (`_shoal_worker.py`: the
worker protocol's frames, each result acknowledged after the transaction that stored it).
Each figure is the median; "÷ same writes + worker" is what the control plane's logic costs
beside its own writes and its own worker, "same writes ÷ floor" what those writes cost beside
the floor's, and "same writes + worker ÷ floor" the two together: the least a step of Shoal's
could take with no control-plane logic at all. The transactions and statements columns
describe one recorded run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from _same_writes import (
    RECORDING,
    PostgresTarget,
    SqliteTarget,
    Tx,
    installed,
    replay_server,
    snapshot,
)
from _workloads import Workload, workloads
from bench_dag import (
    POSTGRES_URL,
    cluster,
    database,
    floor_on,
    history,
    postgres_reachable,
    quiet_logs,
)
from rich.console import Console
from rich.table import Table


async def recorded_runs(kind: str, works: list[Workload], repeat: int, scratch: Path, *,
                        uvloop: bool = True, after: bool = False, history_tasks: int = 0,
                        ) -> tuple[dict[str, list[float]], dict[str, list[Tx]],
                                   dict[str, uuid.UUID]]:
    """Shoal's makespans of each workload (`repeat` runs after the warm-up and
    `history_tasks` W1 tasks: `bench_dag.history`), then one more run of each recorded, on
    a database of `kind`, copied to `scratch/<key>.db` just before it (`snapshot`; with
    `after`, to `scratch/<key>.after.db` just after too); and each recorded run's task."""
    makespans: dict[str, list[float]] = {w.key: [] for w in works}
    recorded: dict[str, list[Tx]] = {}
    tasks: dict[str, uuid.UUID] = {}
    with installed():
        async with cluster(kind, uvloop=uvloop) as bench:
            for warm in workloads(quick=True, only="W1,W2"):
                await bench.run(warm)
            await history(bench.run, history_tasks, f"Shoal on {kind}")
            for _ in range(repeat):
                for work in works:
                    makespans[work.key].append((await bench.run(work)).makespan)
            url = bench.srv.services.settings.database_url
            for work in works:
                await asyncio.to_thread(snapshot, url, scratch / f"{work.key}.db")
                with RECORDING.recording() as txs:
                    tasks[work.key] = uuid.UUID((await bench.run(work)).task_id)
                recorded[work.key] = txs
                if after:
                    await asyncio.to_thread(snapshot, url, scratch / f"{work.key}.after.db")
    return makespans, recorded, tasks


@contextlib.asynccontextmanager
async def target(kind: str, dump: Path) -> AsyncIterator[SqliteTarget | PostgresTarget]:
    """A fresh copy of the snapshot `dump` to replay on (dropped afterwards on PostgreSQL)."""
    if kind == "sqlite":
        copy = dump.with_name(f"{dump.stem}.{uuid.uuid4().hex[:8]}.db")
        shutil.copyfile(dump, copy)
        on: SqliteTarget | PostgresTarget = SqliteTarget(copy)
        try:
            yield on
        finally:
            await on.close()
            copy.unlink()
        return
    async with database(kind, dump.parent) as url:  # a fresh one, dropped afterwards
        on = await PostgresTarget.restored(dump, url)
        try:
            yield on
        finally:
            await on.close()


async def replayed(kind: str, works: list[Workload], recorded: dict[str, list[Tx]],
                   scratch: Path, repeat: int, worker: str = "floor") -> dict[str, list[float]]:
    """Each recording replayed `repeat` times (after one unmeasured turn), each time on a
    fresh copy of the database it was recorded on, with `worker`'s worker process (the
    floor's, or Shoal's)."""
    times: dict[str, list[float]] = {w.key: [] for w in works}
    async with replay_server(worker) as replay:
        for turn in range(repeat + 1):
            for work in works:
                async with target(kind, scratch / f"{work.key}.db") as on:
                    seconds = await replay.run(recorded[work.key], on, work.delay)
                if turn:
                    times[work.key].append(seconds)
    return times


async def same_writes_seconds(kind: str, works: list[Workload], repeat: int, *,
                              uvloop: bool = True, workers: tuple[str, ...] = ("floor",),
                              ) -> dict[str, dict[str, list[float]]]:
    """The same writes' makespans of each workload on `kind`, with each of `workers`' worker
    process (by worker, then workload): one run of each by Shoal recorded (after its
    warm-up), then replayed `repeat` times with each."""
    with tempfile.TemporaryDirectory(prefix="shoal-same-") as name:
        _, recorded, _ = await recorded_runs(kind, works, 0, Path(name), uvloop=uvloop)
        return {worker: await replayed(kind, works, recorded, Path(name), repeat, worker)
                for worker in workers}


async def measure(kind: str, args: argparse.Namespace) -> list[
        tuple[Workload, dict[str, list[float]], list[Tx]]]:
    """Each workload's makespans (Shoal, floor, same writes) on `kind`, and its recording."""
    works = workloads(quick=args.quick, only=args.only)
    floor: dict[str, list[float]] = {w.key: [] for w in works}
    with tempfile.TemporaryDirectory(prefix="shoal-same-") as name:
        scratch = Path(name)
        shoal, recorded, _ = await recorded_runs(kind, works, args.repeat, scratch,
                                                 uvloop=args.uvloop)
        async with floor_on(kind) as low:  # Shoal has stopped
            for warm in workloads(quick=True, only="W1,W2"):
                await low.run(warm.dag, warm.delay)
            for _ in range(args.repeat):
                for work in works:
                    floor[work.key].append(await low.run(work.dag, work.delay))
        same = await replayed(kind, works, recorded, scratch, args.repeat)
        worker = await replayed(kind, works, recorded, scratch, args.repeat, worker="shoal")
    return [(w, {"shoal": shoal[w.key], "floor": floor[w.key], "same": same[w.key],
                 "worker": worker[w.key]}, recorded[w.key]) for w in works]


def table(kind: str, results: list[tuple[Workload, dict[str, list[float]], list[Tx]]],
          repeat: int) -> Table:
    """The comparison on `kind`, one row per workload."""
    out = Table(title=f"Shoal beside its own writes with no Shoal logic — {kind} (median of "
                      f"{repeat}; + worker: the same writes with Shoal's worker process)",
                title_justify="left")
    for col in ("workload", "Shoal", "same writes + worker", "same writes", "durable floor",
                "÷ floor", "÷ same writes + worker", "same writes + worker ÷ floor",
                "same writes ÷ floor", "transactions", "statements"):
        out.add_column(col, justify="left" if col == "workload" else "right")
    for work, times, txs in results:
        shoal, worker, same, low = (statistics.median(times[k])
                                    for k in ("shoal", "worker", "same", "floor"))
        rows = sum(len(p) if many else 1 for tx in txs for _, p, many in tx.statements)
        out.add_row(work.key, f"{shoal * 1000:.0f} ms", f"{worker * 1000:.0f} ms",
                    f"{same * 1000:.0f} ms", f"{low * 1000:.0f} ms", f"{shoal / low:.2f}x",
                    f"{shoal / worker:.2f}x", f"{worker / low:.2f}x", f"{same / low:.2f}x",
                    str(len(txs)), f"{sum(len(tx.statements) for tx in txs)} ({rows} rows)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--only", default="W1,W2,W3", metavar="W1,W2,W3")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--uvloop", action="store_true", help="uvloop, as `shoal serve` runs")
    args = parser.parse_args()
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 160)
    for kind in ["sqlite", "postgres"] if args.db == "both" else [args.db]:
        if kind == "postgres" and not postgres_reachable():
            console.print(f"[yellow]PostgreSQL is not reachable at {POSTGRES_URL}; skipped.[/]")
            continue
        if args.uvloop:
            import uvloop
            results = uvloop.run(measure(kind, args))
        else:
            results = asyncio.run(measure(kind, args))
        console.print(table(kind, results, args.repeat))


if __name__ == "__main__":
    main()
