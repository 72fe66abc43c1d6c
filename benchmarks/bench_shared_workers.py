"""What sharing workers between control-plane copies costs (ADR 0039), measured in one run.

    .venv/bin/python benchmarks/bench_shared_workers.py [--repeat 3] [--quick] [--probes 500]

Two copies ("a" and "b") of the control plane run in this process on one PostgreSQL database
and one Redis; the worker process (`_worker.py`, as in `bench_dag.py`) connects to copy "b"
only. Each workload is submitted to "b" (its workers are connected there: the direct path) and
to "a" (every frame between it and the workers travels through "b" over Redis: the relayed
path), alternately, `--repeat` times; the table shows the median makespan and per-subtask
overhead of each path. W2, a chain, pays the extra hops on every step; W1, a fan-out, shows
the throughput of the relay.

Beside them, the primitives the two designs the ADR weighed would rest on, timed on the same
services: a relayed hop (RPUSH to a list another connection BLPOPs, and its answer back), and
claiming a slot in the database (a transaction inserting an offer, a second one taking it with
`FOR UPDATE SKIP LOCKED` and deleting it: the least a worker's copy would do per attempt, before
any polling delay).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import redis.asyncio as aioredis
import sqlalchemy as sa
from _report import percentile
from _workloads import workloads
from bench_dag import (
    POSTGRES_URL,
    Bench,
    bench_settings,
    database,
    postgres_reachable,
    quiet_logs,
    signed_in_client,
    worker_process,
)
from rich.console import Console
from rich.table import Table

from shoal.api.server import running_server
from shoal.store.db import Database

REDIS_URL = "redis://127.0.0.1:6379/0"


async def redis_hop(probes: int) -> list[float]:
    """Round trips of a relayed frame: pushed to a list, popped by another connection, answered
    on a second list."""
    out, back = f"bench:hop:{uuid.uuid4().hex}", f"bench:back:{uuid.uuid4().hex}"
    a = aioredis.Redis.from_url(REDIS_URL)
    b = aioredis.Redis.from_url(REDIS_URL)

    async def echo() -> None:
        for _ in range(probes):
            found = await b.blpop([out], timeout=5)
            assert found is not None
            await b.rpush(back, found[1])

    times = []
    task = asyncio.create_task(echo())
    try:
        for _ in range(probes):
            start = time.perf_counter()
            await a.rpush(out, b"x" * 512)
            await a.blpop([back], timeout=5)
            times.append((time.perf_counter() - start) * 1000)
        await task
    finally:
        await a.aclose()
        await b.aclose()
    return times


async def database_claim(probes: int) -> list[float]:
    """An offer written by one transaction and taken (`SKIP LOCKED`, deleted) by another."""
    db = Database.connect(POSTGRES_URL)
    offers = sa.table("bench_offers", sa.column("id"), sa.column("body"))
    times = []
    try:
        async with db.engine.begin() as conn:
            await conn.execute(sa.text(
                "CREATE TABLE IF NOT EXISTS bench_offers (id uuid PRIMARY KEY, body text)"))
        take = sa.text("DELETE FROM bench_offers WHERE id = (SELECT id FROM bench_offers "
                       "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING body")
        for _ in range(probes):
            start = time.perf_counter()
            async with db.engine.begin() as conn:
                await conn.execute(sa.insert(offers).values(id=uuid.uuid4(), body="x" * 512))
            async with db.engine.begin() as conn:
                assert (await conn.execute(take)).first() is not None
            times.append((time.perf_counter() - start) * 1000)
        async with db.engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE bench_offers"))
    finally:
        await db.dispose()
    return times


async def copies_run(args: argparse.Namespace) -> dict[str, list[float]]:
    """Makespans (s) per workload and path."""
    found: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-shared-") as name:
        tmp = Path(name)
        async with database("postgres", tmp) as url:
            base = bench_settings(tmp, url)
            a_set = base.model_copy(update={"instance_id": "bench-a", "redis_url": REDIS_URL})
            b_set = base.model_copy(update={"instance_id": "bench-b", "redis_url": REDIS_URL,
                                            "data_dir": tmp / "control-plane-b"})
            async with running_server(a_set) as srv_a, running_server(b_set) as srv_b:
                client_a = await signed_in_client(srv_a, a_set)
                client_b = httpx.AsyncClient(base_url=srv_b.url, headers=client_a.headers,
                                             timeout=30)  # the same user, through copy "b"
                try:
                    async with worker_process(srv_b, tmp, uvloop=False, records={}):
                        await _until_shared(srv_a)
                        paths = {"direct (submitted to b)": Bench(srv_b, client_b, "bus"),
                                 "relayed (submitted to a)": Bench(srv_a, client_a, "bus")}
                        for warm in workloads(quick=True, only="W1,W2"):
                            for bench in paths.values():
                                await bench.run(warm)
                        for work in workloads(quick=args.quick, only="W1,W2"):
                            for _ in range(args.repeat):
                                for label, bench in paths.items():
                                    run = await bench.run(work)
                                    if run.status != "task_complete":
                                        raise RuntimeError(f"{work.key} {label}: {run.status}")
                                    key = f"{work.key} {work.label}|{label}|{len(work.dag)}"
                                    found.setdefault(key, []).append(run.makespan)
                finally:
                    await client_a.aclose()
                    await client_b.aclose()
    return found


async def _until_shared(srv_a: object) -> None:
    """Wait until copy "a" sees the workers connected to "b" (the directory's cards)."""
    fleet = srv_a.services.runtime.fleet  # type: ignore[attr-defined]
    for _ in range(600):
        if fleet.connections():
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("Copy a never saw the workers connected to copy b.")


async def main_async(args: argparse.Namespace, console: Console) -> None:
    hop = await redis_hop(args.probes)
    claim = await database_claim(args.probes)
    prims = Table(title="Primitives (ms per round trip)")
    for col in ("primitive", "p50", "p95", "p99"):
        prims.add_column(col, justify="right" if col != "primitive" else "left")
    for label, times in (("Redis relay hop (push, pop, answer)", hop),
                         ("PostgreSQL slot claim (offer + take)", claim)):
        prims.add_row(label, *(f"{percentile(times, q):.2f}" for q in (50, 95, 99)))
    console.print(prims)
    found = await copies_run(args)
    table = Table(title="Two copies on PostgreSQL, workers connected to copy b")
    for col in ("workload", "path", "makespan (median)", "per subtask"):
        table.add_column(col, justify="left" if col in ("workload", "path") else "right")
    for key, spans in found.items():
        work, path, n = key.split("|")
        mid = statistics.median(spans)
        table.add_row(work, path, f"{mid * 1000:.0f} ms", f"{mid / int(n) * 1000:.2f} ms")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="50-subtask workloads")
    args = parser.parse_args()
    console = Console()
    if not postgres_reachable():
        console.print("PostgreSQL is not reachable; this benchmark needs it.")
        sys.exit(1)
    quiet_logs()
    asyncio.run(main_async(args, console))


if __name__ == "__main__":
    main()
