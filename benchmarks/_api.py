"""Shoal as a user runs it, for `bench_peers.py`: a real `shoal serve` process on a fresh
database, a worker process (`_worker.py`: two workers of 100 slots, the no-op `echo`) dialling
it over WebSockets, and a client that submits each workload over HTTP (`POST /api/v1/tasks`)
and follows the task's event stream (`GET /api/v1/tasks/{id}/events`, SSE) until its terminal
event. The makespan runs from just before the POST to that event's line reaching the client.

One copy with production timings (heartbeats, leases, sweeps: `bench_throughput.py`'s
environment), no Redis (one copy needs none; the in-process row has none either).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from _compare import Role, Row
from _workloads import Workload, plan_for, workloads
from bench_dag import database
from bench_throughput import production_env, quiet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for `tests`

from tests.e2e.procs import cluster, free_port, signed_in, wait_for, wait_healthy

HERE = Path(__file__).resolve().parent
WORKERS = 2
SLOTS = 100
TIMEOUT = 300.0  # seconds for one workload before the benchmark gives up
TERMINAL = ("task_complete", "task_failed", "task_cancelled")


class ApiShoal:
    """A signed-in client of a running `shoal serve` whose workers are online."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def run(self, work: Workload) -> float:
        """Seconds from the POST of `work` to its `task_complete` on the task's SSE stream."""
        body = {"description": f"benchmark {work.key}: {work.label}",
                "plan": plan_for(work.dag, work.delay)}
        start = time.perf_counter()
        created = await self.client.post("/api/v1/tasks", json=body)
        if created.status_code != 201:
            raise RuntimeError(f"submitting {work.key}: {created.status_code} {created.text}")
        task_id = created.json()["task_id"]
        status = ""
        async with asyncio.timeout(TIMEOUT), self.client.stream(
                "GET", f"/api/v1/tasks/{task_id}/events") as resp:
            async for line in resp.aiter_lines():
                if line.startswith("event: ") and line[7:] in TERMINAL:
                    status = line[7:]
                    break
        seconds = time.perf_counter() - start
        if status != "task_complete":
            raise RuntimeError(f"{work.key} task {task_id} ended with {status or 'no event'}")
        return seconds


@contextlib.asynccontextmanager
async def served(kind: str) -> AsyncIterator[ApiShoal]:
    """`shoal serve` on a fresh database of `kind` with its worker process, signed in."""
    with tempfile.TemporaryDirectory(prefix="shoal-api-") as name, quiet():
        root = Path(name)
        async with database(kind, root) as url, cluster(root, url) as group:
            await group.create_user("bench")
            env = production_env(group, f"bench-api-{os.getpid()}")
            for key in ("SHOAL_REDIS_URL", "SHOAL_REDIS_NAMESPACE"):
                env.pop(key, None)
            port = free_port()
            server = group.start("serve", ["serve", "--port", str(port)], env, root / "serve")
            base = f"http://127.0.0.1:{port}"
            await wait_healthy(base, server, within=60)
            tokens = [await group.create_worker_token(f"bench-{i}") for i in range(WORKERS)]
            worker = await asyncio.create_subprocess_exec(
                sys.executable, str(HERE / "_worker.py"), "--url", base, "--slots", str(SLOTS),
                "--data-dir", str(root / "worker"), "--records", str(root / "records.json"),
                stdin=asyncio.subprocess.PIPE,
                env={**os.environ, "SHOAL_BENCH_TOKENS": ",".join(tokens)})
            try:
                async with signed_in(base, "bench") as client:
                    client.timeout = httpx.Timeout(TIMEOUT)

                    async def online() -> bool:
                        listed = (await client.get("/api/v1/workers")).json()["workers"]
                        return bool(sum(w["status"] == "online" for w in listed) == WORKERS)

                    await wait_for(online, within=60, what="the workers online", procs=[server])
                    yield ApiShoal(client)
            finally:
                if worker.stdin is not None:
                    worker.stdin.close()  # the worker process stops when its stdin closes
                try:
                    await asyncio.wait_for(worker.wait(), 30)
                except TimeoutError:
                    worker.kill()
                    await worker.wait()


async def api_row(kind: str, works: list[Workload], repeat: int) -> Row:
    """Shoal through the API: every workload `repeat` times after a warm-up (W1, W2 quick)."""
    row = Row(Role.API.value, Role.API, note="shoal serve + 1 worker process; HTTP + SSE")
    async with served(kind) as shoal:
        for warm in workloads(quick=True, only="W1,W2"):
            await shoal.run(warm)
        for _ in range(repeat):
            for work in works:
                row.seconds.setdefault(work.key, []).append(await shoal.run(work))
    return row
