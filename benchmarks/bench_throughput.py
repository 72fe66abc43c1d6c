"""Sustained subtask throughput on one control-plane copy and on three, and what bounds it.

    .venv/bin/python benchmarks/bench_throughput.py [--db sqlite|postgres|both] [--copies 1,3]
                                                    [--seconds 30] [--tasks 4] [--width 200]

Each copy is a real `shoal serve` process (production timings) on one database; with PostgreSQL
they share one Redis, so each copy's workers serve every copy (ADR 0039). Each copy has its own
worker process (`_worker.py`: two workers of 100 slots, the no-op `echo`) dialling it. A driver
per copy keeps `--tasks` tasks running on it, each a fan-out of `--width` no-op subtasks between
a root and a join, submitting the next as soon as one ends (its SSE stream says so). After a
warm-up, subtasks completed in the store are counted over `--seconds`: throughput is their
number over the window. Beside it, the CPU each kind of process used in the window (from
`/proc`: the copies, the worker processes, PostgreSQL's backends, Redis, this driver) over the
window, so the table shows what bounds the figure: on this 2-core machine, 200 % is every core.
SQLite takes one copy only (one writer per file). Target (issue 27): ≥ 1,000 subtasks/s on one
copy; three copies ≥ 2x one copy on PostgreSQL when the cores allow it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa
from bench_dag import database, postgres_reachable
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for `tests`

from tests.e2e.procs import (
    PASSWORD,
    Cluster,
    Proc,
    cluster,
    free_port,
    signed_in,
    wait_for,
    wait_healthy,
)

from shoal.store.db import Database

HERE = Path(__file__).resolve().parent
WARM_UP = 5.0  # seconds of load before the window opens
TICK = os.sysconf("SC_CLK_TCK")
REDIS_URL = os.environ.get("SHOAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass
class Copies:
    """The processes of one run: copies, their worker processes and their URLs."""

    urls: list[str] = field(default_factory=list)
    servers: list[Proc] = field(default_factory=list)
    workers: list[asyncio.subprocess.Process] = field(default_factory=list)


def production_env(group: Cluster, namespace: str) -> dict[str, str]:
    """The copies' environment: production timings, limits out of the way, one Redis."""
    env = group.server_env()
    for key in ("SHOAL_HEARTBEAT_INTERVAL", "SHOAL_LEASE_SECONDS", "SHOAL_SWEEP_INTERVAL",
                "SHOAL_RETRY_DELAYS"):
        env.pop(key, None)
    env |= {"SHOAL_MAX_ACTIVE_TASKS": "1000", "SHOAL_RATE_LIMIT_PER_MINUTE": "1000000",
            "SHOAL_LOGIN_RATE_LIMIT_PER_MINUTE": "1000",
            "SHOAL_LOGIN_ACCOUNT_RATE_LIMIT_PER_MINUTE": "1000", "SHOAL_LOG_LEVEL": "warning"}
    if group.database_url.startswith("postgresql"):
        env |= {"SHOAL_REDIS_URL": REDIS_URL, "SHOAL_REDIS_NAMESPACE": namespace}
    return env


@contextlib.asynccontextmanager
async def copies(group: Cluster, n: int) -> AsyncIterator[Copies]:
    """`n` copies, each with a worker process dialling it."""
    await group.create_user("bench")
    env = production_env(group, f"bench-{os.getpid()}-{n}")
    run = Copies()
    for i in range(n):
        port = free_port()
        proc = group.start(f"copy-{i}", ["serve", "--port", str(port)],
                           {**env, "SHOAL_INSTANCE_ID": f"copy-{i}"}, group.root / f"copy-{i}")
        run.urls.append(f"http://127.0.0.1:{port}")
        run.servers.append(proc)
    for url, proc in zip(run.urls, run.servers, strict=True):
        await wait_healthy(url, proc, within=60)
    try:
        for i, url in enumerate(run.urls):
            tokens = [await group.create_worker_token(f"w{i}-{j}") for j in range(2)]
            run.workers.append(await asyncio.create_subprocess_exec(
                sys.executable, str(HERE / "_worker.py"), "--url", url, "--slots", "100",
                "--data-dir", str(group.root / f"worker-{i}"), "--records",
                str(group.root / f"records-{i}.json"), stdin=asyncio.subprocess.PIPE,
                env={**os.environ, "SHOAL_BENCH_TOKENS": ",".join(tokens)}))
        async with signed_in(run.urls[0], "bench") as client:

            async def online() -> bool:
                workers = (await client.get("/api/v1/workers")).json()["workers"]
                return sum(w["status"] == "online" for w in workers) == 2 * n

            await wait_for(online, within=60, what="the workers online", procs=run.servers)
        yield run
    finally:
        for proc in run.workers:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in run.workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 30)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No copy's log printed when the cluster closes (`Cluster.close` shows each log's end),
    unless SHOAL_BENCH_LOGS is set."""
    if os.environ.get("SHOAL_BENCH_LOGS"):
        yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def plan(width: int) -> list[dict[str, object]]:
    """A root, `width` no-op subtasks depending on it, a join depending on them all."""
    mids = [{"name": f"m{i}", "description": "no-op", "tool": "echo", "dependencies": ["root"]}
            for i in range(width)]
    return [{"name": "root", "description": "no-op", "tool": "echo", "dependencies": []},
            *mids, {"name": "join", "description": "no-op", "tool": "echo",
                    "dependencies": [m["name"] for m in mids]}]


async def drive(url: str, body: dict[str, object], stop: asyncio.Event, ended: list[int]) -> None:
    """Keep one task running on the copy at `url` until `stop`: submit, follow, repeat."""
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        token = (await client.post("/api/v1/auth/login", json={
            "username": "bench", "password": PASSWORD})).json()["access_token"]
        client.headers["Authorization"] = f"Bearer {token}"
        while not stop.is_set():
            created = await client.post("/api/v1/tasks", json=body)
            if created.status_code != 201:
                raise RuntimeError(f"submitting failed: {created.status_code} {created.text}")
            task_id = created.json()["task_id"]
            async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp:
                async for line in resp.aiter_lines():
                    if line in ("event: task_complete", "event: task_failed"):
                        ended[0] += 1
                        break


async def completed(db: Database) -> int:
    """Subtasks completed in the store so far."""
    async with db.connection() as conn:
        return int((await conn.execute(sa.text(
            "SELECT count(*) FROM subtasks WHERE status = 'completed'"))).scalar_one())


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU the processes (and their reaped children) used so far."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / TICK


def pids_named(name: str) -> list[int]:
    """Every process whose command is `name` (PostgreSQL's backends, Redis)."""
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [pid] + [d for child in out.stdout.split() for d in descendants(int(child))]


async def measure(kind: str, n: int, args: argparse.Namespace) -> dict[str, float]:
    """One run: `n` copies on a fresh database of `kind`; subtasks/s and CPU by process kind."""
    with tempfile.TemporaryDirectory(prefix="shoal-throughput-") as name, quiet():
        root = Path(name)
        async with database(kind, root) as url, cluster(root, url) as group, \
                copies(group, n) as run:
            db = Database.connect(url)
            stop, ended = asyncio.Event(), [0]
            body = {"description": "throughput", "plan": plan(args.width)}
            drivers = [asyncio.create_task(drive(u, body, stop, ended))
                       for u in run.urls for _ in range(args.tasks)]
            try:
                await asyncio.sleep(WARM_UP)
                groups = {
                    "copies": [p for s in run.servers for p in descendants(s.pid)],
                    "workers": [w.pid for w in run.workers],
                    "database": pids_named("postgres") if kind == "postgres" else [],
                    "redis": pids_named("redis-server") if kind == "postgres" else [],
                    "driver": [os.getpid()]}
                before = {k: cpu_seconds(v) for k, v in groups.items()}
                done, started = await completed(db), time.monotonic()
                await asyncio.sleep(args.seconds)
                done, elapsed = await completed(db) - done, time.monotonic() - started
                cpu = {k: (cpu_seconds(v) - before[k]) / elapsed * 100
                       for k, v in groups.items()}
            finally:
                stop.set()
                for task in drivers:
                    task.cancel()
                await asyncio.gather(*drivers, return_exceptions=True)
                await db.dispose()
            for task in drivers:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
    return {"per_s": done / elapsed, "tasks": ended[0], **cpu}


async def main_async(args: argparse.Namespace, console: Console) -> None:
    table = Table(title=f"Sustained throughput: {args.tasks} tasks of {args.width + 2} no-op "
                        f"subtasks kept running per copy, {args.seconds:g} s window "
                        f"({os.cpu_count()} cores; CPU in % of one core)")
    for col in ("database", "copies", "subtasks/s", "x one copy", "tasks ended", "copies CPU",
                "workers CPU", "database CPU", "Redis CPU", "driver CPU", "total CPU"):
        table.add_column(col, justify="right")
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    for kind in kinds:
        one = 0.0
        for n in (int(x) for x in args.copies.split(",")):
            if kind == "sqlite" and n > 1:
                continue
            r = await measure(kind, n, args)
            one = one or r["per_s"]
            total = sum(r[k] for k in ("copies", "workers", "database", "redis", "driver"))
            table.add_row(kind, str(n), f"{r['per_s']:,.0f}", f"{r['per_s'] / one:.2f}",
                          f"{r['tasks']:.0f}", *(f"{r[k]:.0f} %" for k in (
                              "copies", "workers", "database", "redis", "driver")),
                          f"{total:.0f} %")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--copies", default="1,3")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--tasks", type=int, default=4, help="tasks kept running per copy")
    parser.add_argument("--width", type=int, default=200)
    args = parser.parse_args()
    if args.db != "sqlite" and not postgres_reachable():
        sys.exit("PostgreSQL is not reachable.")
    asyncio.run(main_async(args, Console(width=160)))


if __name__ == "__main__":
    main()
