"""Many connected workers on one copy: heartbeat handling time and memory per idle worker.

    .venv/bin/python benchmarks/bench_load.py [--db sqlite|postgres] [--workers 1000,2000,5000]
                                              [--seconds 30] [--interval 10]

The control plane runs in this process (`running_server`, production timings); the simulated
workers (`_load_workers.py`) run in a second process: N WebSocket connections, each registered
as a machine of its own, heartbeating every `--interval` seconds with their phases spread
evenly. A heartbeat's handling time runs from the moment the socket's reader hands it to the
runtime until the commit that stored it (the worker row, its lease renewals and its
`worker_update` event) has completed: the runtime's own `_post` and `_after_commit`, wrapped
here, stamp both ends. Memory per idle worker is the growth of this process's resident set
(`VmRSS`) from before the workers connected to after, divided by N (the first run of a process
also pays one-time allocations: read the larger counts). CPU per heartbeat is this process's
CPU time over the measured window divided by the heartbeats handled in it. A batch of only
bookkeeping jobs (heartbeats) waits up to `batch_linger` (5 ms) for a result to commit with,
so the handling time's floor is that linger. Target (issue 27): heartbeat p99 ≤ 5 ms at 1,000
workers, ≤ 50 kB per idle connection.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import percentile
from bench_dag import bench_settings, database, postgres_reachable, quiet_logs
from rich.console import Console
from rich.table import Table

from shoal import admin
from shoal.api.server import running_server
from shoal.runtime.jobs import Beat

HERE = Path(__file__).resolve().parent


def rss_kb() -> int:
    """This process's resident set, in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def measure(kind: str, workers: int, seconds: float, interval: float) -> dict[str, Any]:
    """One run with `workers` simulated workers; its figures."""
    with tempfile.TemporaryDirectory(prefix="shoal-load-") as name:
        tmp = Path(name)
        async with database(kind, tmp) as url:
            settings = bench_settings(tmp, url).model_copy(
                update={"heartbeat_interval": interval, "lease_seconds": 3 * interval})
            async with running_server(settings) as srv:
                runtime = srv.services.runtime
                posted: dict[int, float] = {}
                times: list[float] = []
                post, after = runtime._post, runtime._after_commit

                def stamp(job: Any) -> None:
                    if type(job) is Beat:
                        posted[id(job)] = time.perf_counter()
                    post(job)

                async def settled(batch: list[Any], *args: Any) -> None:
                    await after(batch, *args)
                    now = time.perf_counter()
                    for job in batch:
                        if (t := posted.pop(id(job), None)) is not None:
                            times.append(now - t)

                runtime._post = stamp  # type: ignore[method-assign]
                runtime._after_commit = settled  # type: ignore[method-assign]
                token = await admin.create_worker_token(srv.services.db, name="load")
                gc.collect()
                before = rss_kb()
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, str(HERE / "_load_workers.py"), "--url", srv.url,
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
    ms = [t * 1000 for t in sample]
    return {"workers": workers, "beats": len(ms), "per_s": len(ms) / seconds,
            "p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms, default=0),
            "kb": idle_kb, "connect_s": connect_s,
            "cpu_ms": cpu * 1000 / max(1, len(ms))}


async def main_async(args: argparse.Namespace, console: Console) -> None:
    table = Table(title=f"Workers heartbeating every {args.interval:g} s on one copy ({args.db})")
    for col in ("workers", "heartbeats", "per s", "p50", "p99", "max", "CPU / heartbeat",
                "memory / worker", "all connected in"):
        table.add_column(col, justify="right")
    for n in (int(x) for x in args.workers.split(",")):
        r = await measure(args.db, n, args.seconds, args.interval)
        table.add_row(f"{r['workers']:,}", f"{r['beats']:,}", f"{r['per_s']:.0f}",
                      f"{r['p50']:.2f} ms", f"{r['p99']:.2f} ms", f"{r['max']:.1f} ms",
                      f"{r['cpu_ms']:.2f} ms",
                      f"{r['kb']:.1f} kB", f"{r['connect_s']:.1f} s")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workers", default="1000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=10.0)
    args = parser.parse_args()
    if args.db == "postgres" and not postgres_reachable():
        sys.exit("PostgreSQL is not reachable.")
    quiet_logs()
    asyncio.run(main_async(args, Console(width=140)))


if __name__ == "__main__":
    main()
