"""Many connected workers on one copy: heartbeat handling time and memory per idle worker.

    .venv/bin/python benchmarks/bench_load.py [--db sqlite|postgres] [--workers 1000,2000,5000]
                                              [--seconds 30] [--interval 10]

The control plane runs in this process (`running_server`, production timings); the simulated
workers (`tests/load/sim_workers.py`) run in a second process: N WebSocket connections, each
registered as a machine of its own, heartbeating every `--interval` seconds with their phases
spread evenly. A heartbeat's handling time runs from the moment the socket's reader hands it to
the runtime until the commit that stored it (the worker row, its lease renewals and its
`worker_update` event) has completed: what the runtime observes as
`shoal_worker_heartbeat_seconds`, read here one by one. Memory per idle worker is the growth of
the control plane's resident set (`VmRSS`) from before the workers connected to after, divided
by N; each size runs in a process of its own, after WARM connections came and went (so neither
one-time allocations nor memory a larger run freed skew it; watchers likewise). CPU per
heartbeat is this process's CPU time over the measured window divided by the heartbeats handled
in it. A heartbeat is committed at once (it does not linger as other bookkeeping does, ADR
0010), so on PostgreSQL its floor is a commit's WAL flush: the table's commit floor times
200 one-row transactions through the store's write path on the same database after the
workers have gone (`bench_dag.commit_floor`). Target (issue 27): heartbeat p99
≤ 5 ms at 1,000 workers, ≤ 50 kB per idle connection.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from _fanout import measure_busy_copies, measure_clients, measure_clients_on_copies, measure_floor
from _fanout_replay import measure_floor_replay, measure_replay
from _report import percentile
from _sims import SIM, rss_kb, warm_up
from _steal import counted
from bench_dag import (
    bench_settings,
    commit_floor,
    database,
    postgres_reachable,
    quiet_logs,
)
from rich.console import Console
from rich.table import Table

from shoal import admin
from shoal.api.server import running_server


async def measure(kind: str, workers: int, seconds: float, interval: float) -> dict[str, Any]:
    """One run with `workers` simulated workers; its figures."""
    with tempfile.TemporaryDirectory(prefix="shoal-load-") as name:
        tmp = Path(name)
        async with database(kind, tmp) as url:
            settings = bench_settings(tmp, url).model_copy(
                update={"heartbeat_interval": interval, "lease_seconds": 3 * interval})
            async with running_server(settings) as srv:
                metrics = srv.services.runtime.metrics
                times: list[float] = []
                observe = metrics.heartbeats

                def stamp(posted: list[float], now: float) -> None:
                    times.extend(now - at for at in posted)
                    observe(posted, now)

                metrics.heartbeats = stamp  # type: ignore[method-assign]
                token = await admin.create_worker_token(srv.services.db, name="load")
                await warm_up("sim_workers.py", "--url", srv.url, "--token", token,
                              "--interval", str(interval))
                gc.collect()
                before = rss_kb()
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, str(SIM / "sim_workers.py"), "--url", srv.url,
                    "--token", token, "--count", str(workers), "--interval", str(interval),
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
                assert proc.stdout is not None
                assert proc.stdin is not None
                started = time.monotonic()
                line = await asyncio.wait_for(proc.stdout.readline(), 600)
                connect_s = time.monotonic() - started
                if not line.startswith(b"connected"):
                    raise RuntimeError(f"the simulated workers did not connect: {line!r}")
                gc.collect()
                idle_kb = (rss_kb() - before) / workers
                times.clear()  # registrations' heartbeats settle first
                cpu = time.process_time()
                await asyncio.sleep(seconds)
                cpu = time.process_time() - cpu
                sample = list(times)
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), 120)
                commits = await commit_floor(srv.services.db)  # the workers have gone
    ms = [t * 1000 for t in sample]
    return {"workers": workers, "beats": len(ms), "per_s": len(ms) / seconds,
            "p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms, default=0),
            "floor_p50": percentile(commits, 50), "floor_p99": percentile(commits, 99),
            "kb": idle_kb, "connect_s": connect_s,
            "cpu_ms": cpu * 1000 / max(1, len(ms))}


async def one(args: argparse.Namespace) -> dict[str, Any]:
    """The figures of the one size in `--workers` or `--clients`, measured in this process."""
    if args.clients:
        n = int(args.clients)
        if args.floor and args.replay:
            return await measure_floor_replay(args.db, n, args.tasks, args.watched, args.rounds)
        if args.floor:
            return await measure_floor(args.db, n)
        if args.busy is not None:
            return await measure_busy_copies(n, args.busy)
        if args.copies > 1:
            return await measure_clients_on_copies(n, args.copies)
        if args.replay:
            return await measure_replay(args.db, n, args.tasks, args.watched, args.rounds)
        return await measure_clients(args.db, n, args.profile, args.tasks, args.rounds,
                                     args.watched)
    return await measure(args.db, int(args.workers), args.seconds, args.interval)


async def fresh(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """The figures of size `n`, measured in a new process: in one that had served another size,
    memory freed by that run would be reused and the growth per connection read low."""
    with tempfile.TemporaryDirectory(prefix="shoal-load-run-") as name:
        out = Path(name) / "figures.json"
        argv = ["--db", args.db, "--seconds", str(args.seconds), "--interval",
                str(args.interval), "--copies", str(args.copies), "--json", str(out),
                *(["--clients", str(n)] if args.clients else ["--workers", str(n)]),
                "--tasks", str(args.tasks), "--rounds", str(args.rounds),
                *(["--watched", str(args.watched)] if args.watched else []),
                *(["--replay"] if args.replay else []),
                "--loop", args.loop, *(["--floor"] if args.floor else []),
                *(["--busy", str(args.busy)] if args.busy is not None else []),
                *(["--profile", args.profile] if args.profile else [])]
        stolen: list[float] = []
        with counted(stolen):
            proc = await asyncio.create_subprocess_exec(sys.executable, __file__, *argv)
            exit_code = await proc.wait()
        if exit_code != 0:
            raise RuntimeError(f"the run with {n} failed (exit {exit_code})")
        figures: dict[str, Any] = json.loads(await asyncio.to_thread(out.read_text))
        figures["steal"] = stolen[0] if stolen else None
        return figures


def steal_cell(r: dict[str, Any]) -> str:
    """The host's share of the machine's CPU time over the run (`_steal.py`), or "-"."""
    return "-" if r.get("steal") is None else f"{100 * r['steal']:.1f} %"


async def main_async(args: argparse.Namespace, console: Console) -> None:
    if args.json:
        figures = json.dumps(await one(args))
        await asyncio.to_thread(Path(args.json).write_text, figures)
        return
    if args.clients:
        await clients_table(args, console)
        return
    table = Table(title=f"Workers heartbeating every {args.interval:g} s on one copy ({args.db})")
    for col in ("workers", "heartbeats", "per s", "p50", "p99", "max", "commit floor p50",
                "commit floor p99", "CPU / heartbeat", "memory / worker", "all connected in",
                "steal"):
        table.add_column(col, justify="right")
    for n in (int(x) for x in args.workers.split(",")):
        r = await fresh(args, n)
        table.add_row(f"{r['workers']:,}", f"{r['beats']:,}", f"{r['per_s']:.0f}",
                      f"{r['p50']:.2f} ms", f"{r['p99']:.2f} ms", f"{r['max']:.1f} ms",
                      f"{r['floor_p50']:.2f} ms", f"{r['floor_p99']:.2f} ms",
                      f"{r['cpu_ms']:.2f} ms",
                      f"{r['kb']:.1f} kB", f"{r['connect_s']:.1f} s", steal_cell(r))
    console.print(table)


async def clients_table(args: argparse.Namespace, console: Console) -> None:
    what = (f"the fan-out floor (no Shoal logic), {args.tasks} tasks replayed"
            + (f", {args.watched} of them followed by all the watchers" if args.watched else "")
            if args.floor and args.replay else
            "the fan-out floor (no Shoal logic)" if args.floor else
            f"the second of two copies while {args.busy} tasks run on the first"
            if args.busy is not None else
            f"{args.copies} copies (postgres + Redis)" if args.copies > 1 else
            f"one copy ({args.db}), {args.tasks} tasks"
            f"{' replayed' if args.replay else ''}, {args.watched} of them followed by "
            "all the watchers" if args.watched else
            f"one copy ({args.db}), {args.tasks} tasks replayed, each followed by an equal "
            "share" if args.replay else
            f"one copy ({args.db}), {args.tasks} tasks each followed by an equal share"
            if args.tasks > 1 else f"one copy ({args.db})")
    table = Table(title=f"Watchers of a running task on {what}: from the event's "
                        "commit to the last watcher")
    for col in ("watchers", "events", "deliveries missing", "p50", "p99", "max",
                "control plane CPU / delivery", "of which in the kernel", "memory / watcher",
                "all subscribed in", "CPU / watcher leaving", "CPU / delivery, chains too",
                "steal"):
        table.add_column(col, justify="right")
    for n in (int(x) for x in args.clients.split(",")):
        r = await fresh(args, n)
        table.add_row(f"{r['clients']:,}", str(r["events"]), f"{r['missing']:,}",
                      f"{r['p50']:.0f} ms", f"{r['p99']:.0f} ms", f"{r['max']:.0f} ms",
                      f"{r['cpu_us']:.1f} µs",
                      f"{r['kernel_us']:.1f} µs" if r["kernel_us"] == r["kernel_us"] else "-",
                      f"{r['kb']:.1f} kB" if r["kb"] == r["kb"] else "-",
                      f"{r['connect_s']:.1f} s",
                      f"{r['closing_us']:.0f} µs" if r.get("closing_us", 0) == r.get(
                          "closing_us", 1) else "-",
                      f"{r['gross_us']:.1f} µs" if "gross_us" in r else "-", steal_cell(r))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workers", default="1000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--clients", default="",
                        help="watchers instead of workers, e.g. 1000,2000,5000,10000")
    parser.add_argument("--profile", default="", metavar="FILE",
                        help="watchers: profile the control plane while the task runs "
                             "(cProfile, saved as FILE.N; the top functions printed)")
    parser.add_argument("--tasks", type=int, default=1,
                        help="watchers: this many chains at once, each followed by an equal "
                             "share of the watchers (subscribed to it alone)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="watchers, with --tasks: run the chains unwatched then watched "
                             "this many times in turn (their own CPU, taken off, varies)")
    parser.add_argument("--watched", type=int, default=0, metavar="K",
                        help="watchers, with --tasks: all of them follow only the first K of "
                             "the chains (the others run unwatched); beside a run without it, "
                             "the same chains and deliveries, spread differently (see the "
                             "column 'chains too')")
    parser.add_argument("--replay", action="store_true",
                        help="watchers, with --tasks: no chain runs while they are counted; "
                             "the bus replays a chain's events for every task (the CPU is "
                             "the deliveries' alone); with --floor, the floor does the same")
    parser.add_argument("--copies", type=int, default=1,
                        help="watchers: spread over this many copies (PostgreSQL and Redis)")
    parser.add_argument("--busy", type=int, default=None, metavar="TASKS",
                        help="watchers: on the second of two copies (PostgreSQL and Redis), "
                             "following a chain on the first while TASKS other tasks run "
                             "there unwatched; CPU is the second copy's")
    parser.add_argument("--floor", action="store_true",
                        help="watchers: the fan-out floor instead of Shoal (no Shoal logic)")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                        help="the event loop of the process measured (the control plane, or "
                             "the floor): uvloop, as `shoal serve` runs (default), or asyncio's")
    parser.add_argument("--json", default="", help=argparse.SUPPRESS)  # one size, figures here
    args = parser.parse_args()
    if args.db == "postgres" and not postgres_reachable():
        sys.exit("PostgreSQL is not reachable.")
    quiet_logs()
    run = uvloop.run if args.loop == "uvloop" and args.json else asyncio.run
    run(main_async(args, Console(width=140)))


if __name__ == "__main__":
    main()
