"""Shoal as a user runs it, for `bench_peers.py`: a real `shoal serve` process on a fresh
database, a worker process (`_worker.py` on uvloop, as `shoal worker` runs: two workers of 100
slots, the no-op `echo`) dialling it over WebSockets, and a client that submits each workload
over HTTP (`POST /api/v1/tasks`) and follows the task's event stream
(`GET /api/v1/tasks/{id}/events`, SSE) until its terminal event. The makespan runs from just
before the POST to that event's line reaching the client. Each run also counts the CPU of the
three processes a subtask (psutil, user and system time): the server, the worker process, and
the client (this process).

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
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import psutil
from _compare import Role, Row
from _steal import counted
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
    """A signed-in client of a running `shoal serve` whose workers are online, with the
    processes whose CPU a run counts (`serve`, `worker`, and this one, the `client`)."""

    def __init__(self, client: httpx.AsyncClient, processes: dict[str, psutil.Process]) -> None:
        self.client = client
        self.processes = processes

    def cpu(self) -> dict[str, float]:
        """Each process's CPU time so far, seconds (`cpu_seconds`)."""
        return {name: cpu_seconds(proc) for name, proc in self.processes.items()}

    async def run(self, work: Workload) -> float:
        """Seconds from the POST of `work` to its `task_complete` on the task's SSE stream."""
        seconds, _ = await self.run_counted(work)
        return seconds

    async def run_counted(self, work: Workload) -> tuple[float, dict[str, float]]:
        """`run`, and each process's µs of CPU a subtask over it."""
        before = self.cpu()
        seconds = await self._run(work)
        after = self.cpu()
        return seconds, {name: (after[name] - before[name]) / len(work.dag) * 1e6
                         for name in after}

    async def _run(self, work: Workload) -> float:
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


def cpu_seconds(proc: psutil.Process) -> float:
    """`proc`'s CPU time so far, seconds: the run time of its live threads in nanoseconds
    (Linux's `/proc/<pid>/task/<tid>/schedstat`), where psutil counts clock ticks (10 ms, a
    twentieth of a 200-subtask run's time on the worker); else psutil's user and system
    time. A thread that ended takes its time with it: the processes measured keep theirs."""
    try:
        total = 0
        for task in os.scandir(f"/proc/{proc.pid}/task"):
            with open(f"{task.path}/schedstat", encoding="ascii") as stat:
                total += int(stat.read().split()[0])
    except (OSError, ValueError, IndexError):
        return float(sum(proc.cpu_times()[:2]))
    return total / 1e9


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
                "--uvloop", stdin=asyncio.subprocess.PIPE,
                env={**os.environ, "SHOAL_BENCH_TOKENS": ",".join(tokens)})
            try:
                async with signed_in(base, "bench") as client:
                    client.timeout = httpx.Timeout(TIMEOUT)

                    async def online() -> bool:
                        listed = (await client.get("/api/v1/workers")).json()["workers"]
                        return bool(sum(w["status"] == "online" for w in listed) == WORKERS)

                    await wait_for(online, within=60, what="the workers online", procs=[server])
                    yield ApiShoal(client, {"serve": psutil.Process(server.pid),
                                            "worker": psutil.Process(worker.pid),
                                            "client": psutil.Process()})
            finally:
                if worker.stdin is not None:
                    worker.stdin.close()  # the worker process stops when its stdin closes
                try:
                    await asyncio.wait_for(worker.wait(), 30)
                except TimeoutError:
                    worker.kill()
                    await worker.wait()


async def api_row(kind: str, works: list[Workload], repeat: int,
                  between: Callable[[Workload], Awaitable[None]] | None = None) -> Row:
    """Shoal through the API: every workload `repeat` times after a warm-up (W1, W2 quick,
    then each workload once at its size). With `between`, Shoal takes turns with something
    else (a peer's run of the same workload, so that the machine's drift over the minutes of
    a run falls on both alike): each measured run follows an unmeasured one of the same
    workload, as the peer's does in its own process, and `between(workload)` is awaited
    after it, `shoal serve` idle meanwhile."""
    row = Row(Role.API.value, Role.API, note="shoal serve + 1 worker process; HTTP + SSE")
    async with served(kind) as shoal:
        for warm in [*workloads(quick=True, only="W1,W2"), *works]:
            await shoal.run(warm)
        for _ in range(repeat):
            for work in works:
                if between is not None:
                    await shoal.run(work)
                with counted(row.steal):
                    seconds, cpu = await shoal.run_counted(work)
                row.seconds.setdefault(work.key, []).append(seconds)
                for name, us in cpu.items():
                    row.cpu.setdefault(work.key, {}).setdefault(name, []).append(us)
                if between is not None:
                    await between(work)
    return row
