"""DAG scheduling overhead of Shoal, beside a plain-asyncio baseline, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/bench_dag.py [--db sqlite|postgres|both] [--quick]
        [--history TASKS]

For each database the real control plane runs in this process (`running_server`) and real
workers run in a second process (`benchmarks/_worker.py`: two `Worker`s over WebSockets with
100 slots each and a no-op tool), so the workers' CPU does not compete with the control plane's
event loop. Three workloads are submitted as explicit plans over the HTTP API:

- W1 fan-out: one root → 200 independent subtasks → one join (no-op subtasks);
- W2 chain: 200 subtasks, each depending on the one before (no-op subtasks);
- W3 layers: 10 layers of 20 subtasks, each depending on 2 of the previous layer (fixed seed),
  each sleeping 50 ms.

Makespan runs from just before `POST /api/v1/tasks` to the moment the task's `task_complete`
event reaches a subscriber of the event bus (in-process; `--observe sse` reads the task's SSE
stream over HTTP instead). The baseline runs the same DAG as asyncio tasks awaiting their
dependencies' futures, in this process, in the same run. The durable floor (`_floor.py`) runs
the same DAGs, on the same kind of database, after Shoal has stopped: a minimal orchestrator
that stores every step before acting on it and talks to a worker process over WebSockets, with
nothing else a product needs, so its figures bound what any Python design could reach here.

Reported: per-subtask overhead = makespan / n for W1 and W2 (the ideal is 0 for no-op
subtasks; target ≤ 1 ms); makespan / critical path (10 layers of 50 ms) for W3 (target
≤ 1.05); and dispatch latency (target p95 ≤ 10 ms): along the W2 chain, `recv(execute of
subtask k+1) - sent(result of subtask k)`, both stamped inside the worker process. That interval
is the control plane's whole reaction to a result (read it, commit the decision, schedule the
next subtask, send `execute_task`) plus two loopback hops; the worker's own time per attempt
(execute received → result sent) and each process's CPU per subtask are shown beside it.
The host's share of the machine's CPU time over each measured run (steal, `_steal.py`) is
printed for Shoal's runs and the floor's: on a virtual machine it moves both figures.
Results also go to `benchmarks/results/latest.json`.

Each database starts fresh. With `--history TASKS`, Shoal and the floor each first run that
many tasks of W1's shape, unmeasured, so the measured runs meet a database that already holds
their rows (202 subtasks and attempts a task), as a server in use does: where each new row's
key goes in a table's indexes then counts (ADR 0057).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import sqlalchemy as sa
import structlog
from _floor import Floor, floor
from _phases import PhaseClock, phase_clock, phase_table
from _report import Outcome, Run, attach_timings, render, summary
from _steal import counted, describe
from _workloads import Workload, plan_for, run_baseline, workloads
from rich.console import Console

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.events import EventType
from shoal.store.db import Database

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.json"
POSTGRES_URL = os.environ.get(
    "SHOAL_BENCH_POSTGRES_URL",
    os.environ.get("SHOAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
)
WORKERS = 2
SLOTS = 100  # per worker: W1's 200 middle subtasks can all run at once
TIMEOUT = 120.0  # seconds for one workload before the benchmark gives up
TERMINAL = {EventType.TASK_COMPLETE, EventType.TASK_FAILED, EventType.TASK_CANCELLED}

Records = dict[str, dict[str, Any]]  # attempt id → the worker's timestamps


class WorkerProcess:
    """The benchmark's worker process (`_worker.py`), told what to do on its standard input."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    async def _say(self, line: str) -> None:
        if self._proc.stdin is None:
            raise RuntimeError("The worker process takes no commands.")
        self._proc.stdin.write(f"{line}\n".encode())
        await self._proc.stdin.drain()

    async def _written(self, path: Path) -> None:
        """Wait (up to 30 s) until the worker process has written `path`."""
        async with asyncio.timeout(30):
            while not await asyncio.to_thread(path.exists):
                if self._proc.returncode is not None:
                    raise RuntimeError(f"The worker process exited with {self._proc.returncode}.")
                await asyncio.sleep(0.02)

    @contextlib.asynccontextmanager
    async def profiled(self, path: Path) -> AsyncIterator[None]:
        """cProfile the worker process's event loop while the block runs (it is on when the
        block begins); the profile is at `path` once the block has ended."""
        on = path.with_name(f"{path.name}.on")
        for old in (path, on):
            await asyncio.to_thread(old.unlink, missing_ok=True)
        await self._say(f"profile {path}")
        await self._written(on)
        try:
            yield
        finally:
            await self._say(f"unprofile {path}")
            await self._written(path)  # written aside, then renamed
            await asyncio.to_thread(on.unlink, missing_ok=True)


class Bench:
    """A running control plane and a signed-in client that submits workloads to it, and the
    worker process that runs them."""

    def __init__(self, srv: RunningServer, client: httpx.AsyncClient, observe: str,
                 phases: PhaseClock | None = None, worker: WorkerProcess | None = None) -> None:
        self.srv = srv
        self.client = client
        self.observe = observe
        self.phases = phases
        self.worker = worker

    async def run(self, work: Workload) -> Run:
        """Submit `work` as one task and wait for it to end."""
        plan = plan_for(work.dag, work.delay)
        # The process's CPU is read around the loop thread's (`phases`), so that the thread's
        # share can never exceed the whole: with SQLite's reads on the loop (ADR 0047) the loop
        # thread is nearly all of it, and reading them the other way round put the thread
        # some microseconds over the process.
        cpu = time.process_time()
        if self.phases is not None:
            self.phases.reset()
        submitted = time.monotonic()
        if self.observe == "sse":
            task_id, status = await self._follow_sse(work, plan)
        else:
            task_id, status = await self._follow_bus(work, plan)
        makespan = time.monotonic() - submitted
        phases = self.phases.snapshot() if self.phases is not None else None
        return Run(task_id, submitted, makespan, status, cpu=time.process_time() - cpu,
                   phases=phases)

    async def _follow_bus(self, work: Workload, plan: list[dict[str, Any]]) -> tuple[str, str]:
        async with self.srv.services.bus.subscribe() as sub:
            task_id = await self._submit(work, plan)
            async with asyncio.timeout(TIMEOUT):
                async for event in sub:
                    if event.type in TERMINAL and str(event.task_id) == task_id:
                        return task_id, event.type
        raise RuntimeError(f"The event bus closed before task {task_id} ended.")

    async def _follow_sse(self, work: Workload, plan: list[dict[str, Any]]) -> tuple[str, str]:
        task_id = await self._submit(work, plan)
        url = f"/api/v1/tasks/{task_id}/events"
        async with asyncio.timeout(TIMEOUT), self.client.stream("GET", url) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("event: ") and line[7:] in TERMINAL:
                    return task_id, line[7:]
        raise RuntimeError(f"The SSE stream of task {task_id} ended before the task did.")

    async def _submit(self, work: Workload, plan: list[dict[str, Any]]) -> str:
        body = {"description": f"benchmark {work.key}: {work.label}", "plan": plan}
        resp = await self.client.post("/api/v1/tasks", json=body)
        if resp.status_code != 201:
            raise RuntimeError(f"Submitting {work.key} failed: {resp.status_code} {resp.text}")
        task_id: str = resp.json()["task_id"]
        return task_id


@contextlib.asynccontextmanager
async def database(kind: str, tmp: Path) -> AsyncIterator[str]:
    """A fresh database URL of `kind`, dropped afterwards (PostgreSQL)."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp / 'shoal.db'}"
        return
    name = f"shoal_bench_{uuid.uuid4().hex[:10]}"
    await _postgres_admin(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        await _postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _postgres_admin(statement: str) -> None:
    db = Database.connect(POSTGRES_URL)
    try:
        async with db.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(sa.text(statement))
    finally:
        await db.dispose()


@contextlib.asynccontextmanager
async def worker_process(
    srv: RunningServer, tmp: Path, *, uvloop: bool, records: Records
) -> AsyncIterator[WorkerProcess]:
    """`_worker.py` connected with `WORKERS` workers; fills `records` once it has stopped."""
    db = srv.services.db
    tokens = [await admin.create_worker_token(db, name=f"bench-{i}") for i in range(WORKERS)]
    out = tmp / "worker-records.json"
    args = [
        str(HERE / "_worker.py"),
        "--url",
        srv.url,
        "--slots",
        str(SLOTS),
        "--data-dir",
        str(tmp / "worker-data"),
        "--records",
        str(out),
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        *(["--uvloop"] if uvloop else []),
        stdin=asyncio.subprocess.PIPE,
        env={**os.environ, "SHOAL_BENCH_TOKENS": ",".join(tokens)},
    )
    try:
        async with asyncio.timeout(30):
            while len(srv.services.runtime.fleet) < WORKERS:
                if proc.returncode is not None:
                    raise RuntimeError(f"The worker process exited with {proc.returncode}.")
                await asyncio.sleep(0.02)
        yield WorkerProcess(proc)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the worker process stops when its standard input closes
        try:
            async with asyncio.timeout(30):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
    if out.exists():
        records.update(json.loads(await asyncio.to_thread(out.read_text)))


async def signed_in_client(srv: RunningServer, settings: Settings) -> httpx.AsyncClient:
    """An HTTP client with a fresh user's access token."""
    await admin.create_user(srv.services.db, settings, username="bench", password="bench-pass-1")
    client = httpx.AsyncClient(base_url=srv.url, timeout=TIMEOUT)
    login = {"username": "bench", "password": "bench-pass-1"}
    resp = await client.post("/api/v1/auth/login", json=login)
    resp.raise_for_status()
    client.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
    return client


def bench_settings(tmp: Path, url: str) -> Settings:
    """Development settings with production timings (heartbeats, leases, sweeps)."""
    return Settings(
        mode="dev",
        data_dir=tmp / "control-plane",
        database_url=url,
        bcrypt_rounds=4,
        secret_key="bench-secret-" + "x" * 32,
        rate_limit_per_minute=100_000,
    )


PROBES = 200  # one-row transactions timed for the commit floor


async def commit_floor(db: Database) -> list[float]:
    """Milliseconds for each of PROBES one-row transactions through the store's write path.

    Every step of the W2 chain commits its decision before it dispatches the next subtask, so
    one durable commit is the floor of W2's per-subtask time: on PostgreSQL it includes the
    WAL flush to disk (fsync), which no control-plane work can hide.
    """
    async with db.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE bench_commit_probe (n INTEGER)"))
    insert = "INSERT INTO bench_commit_probe (n) VALUES (1)"
    times = []
    for _ in range(PROBES):
        started = time.perf_counter()
        await db.run_write(lambda conn: conn.exec_driver_sql(insert), inline=True)
        times.append((time.perf_counter() - started) * 1000)
    return times


@contextlib.asynccontextmanager
async def cluster(
    kind: str, *, uvloop: bool = False, observe: str = "bus", records: Records | None = None,
    documents: dict[str, str] | None = None, phases: bool = False,
    settings_update: dict[str, Any] | None = None,
) -> AsyncIterator[Bench]:
    """A fresh database of `kind`, the control plane on it (with workflow `documents`, by
    name, and `settings_update` over `bench_settings`), a signed-in client and the worker
    process, as a `Bench` to submit workloads with; `records` gets the worker's timestamps
    once it has stopped; with `phases`, each run counts the control plane's CPU by phase
    (`_phases.py`)."""
    with (tempfile.TemporaryDirectory(prefix="shoal-bench-") as name,
          phase_clock() if phases else contextlib.nullcontext() as clock):
        tmp = Path(name)
        async with database(kind, tmp) as url:
            settings = bench_settings(tmp, url).model_copy(update=settings_update or {})
            (settings.data_dir / "workflows").mkdir(parents=True)
            for doc_name, text in (documents or {}).items():
                (settings.data_dir / "workflows" / f"{doc_name}.yaml").write_text(text)
            async with running_server(settings) as srv:
                client = await signed_in_client(srv, settings)
                try:
                    async with worker_process(
                        srv, tmp, uvloop=uvloop, records=records if records is not None else {},
                    ) as worker:
                        yield Bench(srv, client, observe, clock, worker)
                finally:
                    await client.aclose()


@contextlib.asynccontextmanager
async def floor_on(kind: str) -> AsyncIterator[Floor]:
    """The durable floor (`_floor.py`) on a fresh database of `kind`, with its workers."""
    with tempfile.TemporaryDirectory(prefix="shoal-floor-") as name:
        async with database(kind, Path(name)) as url:
            target = str(Path(name) / "shoal.db") if kind == "sqlite" else url
            async with floor(kind, target) as low:
                yield low


async def bench_database(kind: str, args: argparse.Namespace) -> tuple[list[Outcome], list[float]]:
    """Run every workload `args.repeat` times on a fresh database of `kind`; also time the
    database's commit floor there."""
    outcomes = [Outcome(w) for w in workloads(quick=args.quick, only=args.only)]
    records: Records = {}
    async with cluster(kind, uvloop=args.uvloop, observe=args.observe, records=records,
                       phases=args.phases) as bench:
        for warm in workloads(quick=True, only="W1,W2"):  # compile, fill caches
            await bench.run(warm)
        await history(bench.run, args.history, f"Shoal on {kind}")
        for _ in range(args.repeat):
            for outcome in outcomes:
                with counted(outcome.steal):
                    outcome.runs.append(await bench.run(outcome.work))
        commits = await commit_floor(bench.srv.services.db)  # the workers idle meanwhile
    async with floor_on(kind) as low:  # Shoal has stopped: the floor has the machine to itself
        for warm in workloads(quick=True, only="W1,W2"):
            await low.run(warm.dag, warm.delay)
        await history(lambda work: low.run(work.dag, work.delay), args.history,
                      f"the floor on {kind}")
        for _ in range(args.repeat):
            for outcome in outcomes:
                with counted(outcome.floor_steal):
                    outcome.floor.append(await low.run(outcome.work.dag, outcome.work.delay))
    if args.records:
        await asyncio.to_thread(
            save_records, Path(f"{args.records}.{kind}.json"), outcomes, records
        )
    for outcome in outcomes:
        for _ in range(args.repeat):
            outcome.baseline.append(await run_baseline(outcome.work.dag, outcome.work.delay))
        attach_timings(outcome, records)
    return outcomes, commits


async def history(run: Callable[[Workload], Awaitable[object]], tasks: int, who: str) -> None:
    """Run `tasks` tasks of W1's shape, unmeasured (`--history`): the database then holds
    their rows, 202 subtasks and attempts each, before the measured runs begin. Progress goes
    to standard error every 100 tasks."""
    shape = next(w for w in workloads(quick=False, only="W1"))
    for done in range(1, tasks + 1):
        await run(shape)
        if done % 100 == 0 or done == tasks:
            print(f"history for {who}: {done} of {tasks} tasks", file=sys.stderr, flush=True)


def print_steal(outcomes: list[Outcome], console: Console) -> None:
    """The line on the host's steal over Shoal's measured runs and the floor's (`_steal.py`)."""
    line = describe({"Shoal's": [s for o in outcomes for s in o.steal],
                     "the floor's": [s for o in outcomes for s in o.floor_steal]})
    if line:
        console.print(line)


def save_records(path: Path, outcomes: list[Outcome], records: Records) -> None:
    """The runs and the worker's raw timestamps, for a closer look (`--records`)."""
    runs = {o.work.key: [asdict(r) for r in o.runs] for o in outcomes}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": runs, "attempts": records}))


def quiet_logs() -> None:
    """Warnings and errors only: the benchmark prints a table, not a log."""
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        cache_logger_on_first_use=True)  # as `shoal.logs` does


def postgres_reachable() -> bool:
    """Whether the PostgreSQL server in `POSTGRES_URL` accepts TCP connections."""
    parsed = urlparse(POSTGRES_URL)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5432), 1):
            return True
    except OSError:
        return False


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Run the benchmark on each database; print its tables; return the JSON document."""
    doc: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "quick": args.quick,
        "repeat": args.repeat,
        "only": args.only,
        "observe": args.observe,
        "history": args.history,
        "loop": "uvloop" if args.uvloop else "asyncio",
        "workers": WORKERS,
        "slots_per_worker": SLOTS,
        "databases": {},
    }
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(
        f"Load average {load} on {os.cpu_count()} CPUs: wall-clock figures are noisy "
        "when other work shares the machine, the CPU columns much less so; the host's steal, "
        "under the tables, moves both."
    )
    for kind in ["sqlite", "postgres"] if args.db == "both" else [args.db]:
        if kind == "postgres" and not postgres_reachable():
            console.print(
                f"[yellow]PostgreSQL is not reachable at {POSTGRES_URL}; skipped. "
                "Start it, or point SHOAL_BENCH_POSTGRES_URL at one.[/]"
            )
            continue
        started = time.monotonic()
        outcomes, commits = await bench_database(kind, args)
        render(kind, outcomes, console, args.repeat, commits)
        print_steal(outcomes, console)
        if args.phases:
            console.print(phase_table(kind, outcomes))
        doc["databases"][kind] = {"seconds": time.monotonic() - started,
                                  **summary(outcomes, commits)}
    return doc


def workload_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the databases, sizes and workloads (`bench_peers.py`'s too)."""
    add = parser.add_argument
    add("--db", choices=["sqlite", "postgres", "both"], default="both")
    add("--quick", action="store_true", help="smaller workloads (under 30 s)")
    add("--repeat", type=int, help="runs per workload, median reported (default 3; quick 1)")
    add("--only", default="", metavar="W1,W2,W3", help="run only these workloads")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (`argv`, or the command's own)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    workload_options(parser)
    add = parser.add_argument
    add(
        "--observe",
        choices=["bus", "sse"],
        default="bus",
        help="see task_complete on the in-process event bus, or over the task's SSE stream",
    )
    add("--uvloop", action="store_true", help="run both processes on uvloop (as `shoal serve`)")
    add("--records", metavar="PREFIX", help="save the worker's raw timestamps to PREFIX.<db>.json")
    add("--phases", action="store_true",
        help="also print the control plane's CPU per subtask by phase of its work (_phases.py)")
    add("--history", type=int, default=0, metavar="TASKS",
        help="first run this many W1 tasks, unmeasured, for Shoal and the floor alike: the "
             "measured runs then meet a database in use (202 subtasks and attempts a task) "
             "rather than a fresh one (default 0)")
    args = parser.parse_args(argv)
    if args.history < 0:
        parser.error("--history must be 0 or more")
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    return args


def main() -> None:
    """Run, print, and write benchmarks/results/latest.json."""
    args = parse_args()
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.uvloop:
        import uvloop

        doc = uvloop.run(main_async(args, console))
    else:
        doc = asyncio.run(main_async(args, console))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"Results written to {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
