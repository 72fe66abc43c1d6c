"""DAG scheduling overhead of Shoal, beside a plain-asyncio baseline, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/bench_dag.py [--db sqlite|postgres|both] [--quick]

For each database the real control plane runs in this process (`running_server`) and real
workers run in a second process (`benchmarks/_worker.py`: two `Worker`s over WebSockets with
100 slots each and a no-op tool), so the workers' CPU does not compete with the control plane's
event loop. Three workloads are submitted as explicit plans over the HTTP API:

- W1 fan-out: one root → 200 independent subtasks → one join (no-op subtasks);
- W2 chain: 200 subtasks, each depending on the one before (no-op subtasks);
- W3 layers: 10 layers x 20 subtasks, each depending on 2 of the previous layer (fixed seed),
  each sleeping 50 ms.

Makespan runs from just before `POST /api/v1/tasks` to the moment the task's `task_complete`
event reaches a subscriber of the event bus (in-process; `--observe sse` reads the task's SSE
stream over HTTP instead). The baseline runs the same DAG as asyncio tasks awaiting their
dependencies' futures, in this process, in the same run.

Reported: per-subtask overhead = makespan / n for W1 and W2 (the ideal is 0 for no-op
subtasks; target ≤ 1 ms); makespan ÷ critical path (10 x 50 ms) for W3 (target ≤ 1.05); and
dispatch latency (target p95 ≤ 10 ms), measured as `recv(execute of subtask k+1) -
sent(result of subtask k)` along the W2 chain, both timestamps taken inside the worker process.
That interval is the control plane's whole reaction to a result — read it, commit the decision,
schedule the next subtask, send `execute_task` — plus two loopback hops; the worker's own time
per attempt (execute received → result sent) is shown separately. Results also go to
`benchmarks/results/latest.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import structlog
from rich.console import Console
from rich.table import Table

from shoal import admin
from shoal.config import Settings
from shoal.events import EventType
from shoal.store.db import Database
from shoal.testing.server import RunningServer, running_server

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.json"
POSTGRES_URL = os.environ.get(
    "SHOAL_BENCH_POSTGRES_URL",
    os.environ.get("SHOAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
)
SEED = 20240601
WORKERS = 2
SLOTS = 100  # per worker: W1's 200 middle subtasks can all run at once
SUBMIT_TIMEOUT = 120.0  # seconds for one workload before the benchmark gives up
TERMINAL = {EventType.TASK_COMPLETE, EventType.TASK_FAILED, EventType.TASK_CANCELLED}

OVERHEAD_TARGET_MS = 1.0
RATIO_TARGET = 1.05
DISPATCH_P95_TARGET_MS = 10.0

Dag = dict[str, list[str]]  # subtask name → names it depends on, in topological order


# ---- workloads -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """A DAG to run, how long each subtask sleeps, and how it is judged."""

    key: str
    label: str
    dag: Dag
    delay: float
    layers: int = 0  # critical path in subtasks (W3), for makespan ÷ critical path

    @property
    def critical_path(self) -> float:
        """Seconds the longest chain needs when every subtask takes `delay`."""
        return self.layers * self.delay


def fan_out(width: int) -> Dag:
    """One root, `width` subtasks that depend on it, and one join that depends on them all."""
    middle = [f"m{i}" for i in range(width)]
    return {"root": [], **{m: ["root"] for m in middle}, "join": middle}


def chain(length: int) -> Dag:
    """`length` subtasks, each depending on the one before."""
    return {f"c{i}": [f"c{i - 1}"] if i else [] for i in range(length)}


def layered(layers: int, width: int, fan_in: int, seed: int) -> Dag:
    """`layers` x `width` subtasks; each past the first depends on `fan_in` of the layer above."""
    rng = random.Random(seed)
    dag: Dag = {}
    for layer in range(layers):
        above = [f"l{layer - 1}_{i}" for i in range(width)]
        for i in range(width):
            dag[f"l{layer}_{i}"] = sorted(rng.sample(above, fan_in)) if layer else []
    return dag


def workloads(quick: bool, only: str = "") -> list[Workload]:
    """W1, W2 and W3 (or those named in `only`) at full size, or smaller with `quick`."""
    width, length, layers, per_layer = (50, 50, 5, 10) if quick else (200, 200, 10, 20)
    every = [
        Workload("W1", f"1→{width}→1", fan_out(width), 0.0),
        Workload("W2", f"chain {length}", chain(length), 0.0),
        Workload(
            "W3",
            f"{layers}x{per_layer}, 50 ms",
            layered(layers, per_layer, 2, SEED),
            0.05,
            layers=layers,
        ),
    ]
    keys = {k.strip().upper() for k in only.split(",") if k.strip()}
    return [w for w in every if not keys or w.key in keys]


def plan_for(dag: Dag, delay: float) -> list[dict[str, Any]]:
    """The `plan` of a task submission that runs `dag` on the no-op tool."""
    return [
        {
            "name": name,
            "description": f"benchmark subtask {name}",
            "dependencies": deps,
            "tool": "echo",
            "options": {"delay": delay},
        }
        for name, deps in dag.items()
    ]


# ---- the plain-asyncio baseline ------------------------------------------------------------


async def run_baseline(dag: Dag, delay: float) -> float:
    """Seconds to run `dag` as asyncio tasks awaiting their dependencies' futures."""
    loop = asyncio.get_running_loop()
    done: dict[str, asyncio.Future[None]] = {name: loop.create_future() for name in dag}

    async def node(name: str, deps: list[str]) -> None:
        for dep in deps:
            await done[dep]
        if delay:
            await asyncio.sleep(delay)
        done[name].set_result(None)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for name, deps in dag.items():
            tg.create_task(node(name, deps))
    return time.perf_counter() - start


# ---- one database: control plane here, workers in a child process ------------------------


@dataclass(slots=True)
class Run:
    """One submission of a workload."""

    task_id: str
    submitted: float  # time.monotonic() just before the POST
    makespan: float
    status: str


@dataclass(slots=True)
class Outcome:
    """Everything measured for one workload on one database."""

    key: str
    label: str
    n: int
    delay: float
    critical_path: float
    runs: list[Run] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    dispatch_ms: list[float] = field(default_factory=list)  # ready → worker has it
    worker_ms: list[float] = field(default_factory=list)  # execute received → result sent

    @property
    def makespan(self) -> float:
        """Median makespan over the runs, seconds."""
        return statistics.median(r.makespan for r in self.runs)

    @property
    def baseline_makespan(self) -> float:
        """Median baseline makespan, seconds."""
        return statistics.median(self.baseline)


class Bench:
    """A running control plane, a signed-in client and a process of connected workers."""

    def __init__(self, srv: RunningServer, client: httpx.AsyncClient, observe: str) -> None:
        self.srv = srv
        self.client = client
        self.observe = observe

    async def run(self, work: Workload) -> Run:
        """Submit `work` as one task and wait for it to end."""
        plan = plan_for(work.dag, work.delay)
        if self.observe == "sse":
            return await self._run_sse(work, plan)
        async with self.srv.services.bus.subscribe() as sub:
            submitted = time.monotonic()
            task_id = await self._submit(work, plan)
            async with asyncio.timeout(SUBMIT_TIMEOUT):
                async for event in sub:
                    if event.type in TERMINAL and str(event.task_id) == task_id:
                        return Run(task_id, submitted, time.monotonic() - submitted, event.type)
        raise RuntimeError(f"The event bus closed before task {task_id} ended.")

    async def _run_sse(self, work: Workload, plan: list[dict[str, Any]]) -> Run:
        submitted = time.monotonic()
        task_id = await self._submit(work, plan)
        async with (
            asyncio.timeout(SUBMIT_TIMEOUT),
            self.client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp,
        ):
            async for line in resp.aiter_lines():
                if line.startswith("event: ") and line[7:] in TERMINAL:
                    return Run(task_id, submitted, time.monotonic() - submitted, line[7:])
        raise RuntimeError(f"The SSE stream of task {task_id} ended before the task did.")

    async def _submit(self, work: Workload, plan: list[dict[str, Any]]) -> str:
        resp = await self.client.post(
            "/api/v1/tasks",
            json={"description": f"benchmark {work.key}: {work.label}", "plan": plan},
        )
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
    srv: RunningServer, tmp: Path, *, uvloop: bool, records: dict[str, dict[str, Any]]
) -> AsyncIterator[None]:
    """`_worker.py` connected with `WORKERS` workers; fills `records` when it stops."""
    tokens = [
        await admin.create_worker_token(srv.services.db, name=f"bench-{i}") for i in range(WORKERS)
    ]
    out = tmp / "worker-records.json"
    args = [
        sys.executable,
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
        yield
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(30):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
    if out.exists():
        records.update(json.loads(out.read_text()))


async def signed_in_client(srv: RunningServer, settings: Settings) -> httpx.AsyncClient:
    """An HTTP client with a fresh user's access token."""
    await admin.create_user(srv.services.db, settings, username="bench", password="bench-pass-1")
    client = httpx.AsyncClient(base_url=srv.url, timeout=SUBMIT_TIMEOUT)
    resp = await client.post(
        "/api/v1/auth/login", json={"username": "bench", "password": "bench-pass-1"}
    )
    resp.raise_for_status()
    client.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
    return client


async def bench_database(kind: str, args: argparse.Namespace) -> list[Outcome]:
    """Run every workload `args.repeat` times on a fresh database of `kind`."""
    works = workloads(args.quick, args.only)
    outcomes = [Outcome(w.key, w.label, len(w.dag), w.delay, w.critical_path) for w in works]
    records: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as name:
        tmp = Path(name)
        async with database(kind, tmp) as url:
            settings = Settings(
                mode="dev",
                data_dir=tmp / "control-plane",
                database_url=url,
                bcrypt_rounds=4,
                secret_key="bench-secret-" + "x" * 32,
                rate_limit_per_minute=100_000,
            )
            async with running_server(settings) as srv:
                client = await signed_in_client(srv, settings)
                async with worker_process(srv, tmp, uvloop=args.uvloop, records=records):
                    bench = Bench(srv, client, args.observe)
                    for warm in workloads(quick=True)[:2]:  # compile queries, fill caches
                        await bench.run(warm)
                    for _ in range(args.repeat):
                        for work, outcome in zip(works, outcomes, strict=True):
                            outcome.runs.append(await bench.run(work))
                await client.aclose()
    if args.records:
        runs = {o.key: [asdict(r) for r in o.runs] for o in outcomes}
        await asyncio.to_thread(_save_records, Path(f"{args.records}.{kind}.json"), runs, records)
    for work, outcome in zip(works, outcomes, strict=True):
        for _ in range(args.repeat):
            outcome.baseline.append(await run_baseline(work.dag, work.delay))
        attach_timings(outcome, work.dag, records)
    return outcomes


def _save_records(path: Path, runs: dict[str, Any], records: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": runs, "attempts": records}))


def attach_timings(outcome: Outcome, dag: Dag, records: dict[str, dict[str, Any]]) -> None:
    """Dispatch latency (ready → received) and worker time per attempt, from the worker's log."""
    for run in outcome.runs:
        mine = {
            r["name"]: r
            for r in records.values()
            if r.get("task_id") == run.task_id and "sent" in r
        }
        for name, deps in dag.items():
            rec = mine.get(name)
            if rec is None:
                continue
            outcome.worker_ms.append((rec["sent"] - rec["recv"]) * 1000)
            if deps and all(d in mine for d in deps):
                ready = max(mine[d]["sent"] for d in deps)
                outcome.dispatch_ms.append((rec["recv"] - ready) * 1000)


# ---- report ----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0-100) by linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One workload's headline figure for Shoal and the baseline, and whether it passes."""

    metric: str
    shoal: float
    baseline: float
    target: str
    passed: bool


def verdict(o: Outcome) -> Verdict:
    """Per-subtask overhead (no-op workloads) or makespan ÷ critical path (sleeping ones)."""
    if o.critical_path:
        shoal, base = o.makespan / o.critical_path, o.baseline_makespan / o.critical_path
        return Verdict(
            "makespan ÷ critical path", shoal, base, f"≤ {RATIO_TARGET}", shoal <= RATIO_TARGET
        )
    shoal, base = o.makespan / o.n * 1000, o.baseline_makespan / o.n * 1000
    return Verdict(
        "per-subtask overhead (ms)",
        shoal,
        base,
        f"≤ {OVERHEAD_TARGET_MS} ms",
        shoal <= OVERHEAD_TARGET_MS,
    )


def chain_of(outcomes: list[Outcome]) -> Outcome | None:
    """The chain workload, whose dispatch latency carries the target (if it ran)."""
    return next((o for o in outcomes if o.key == "W2"), None)


def render(kind: str, outcomes: list[Outcome], console: Console, repeat: int) -> None:
    """One table per database: workloads, then dispatch latency, then where the time goes."""
    title = f"Shoal DAG benchmark — {kind} (median of {repeat} run{'s' * (repeat > 1)})"
    table = Table(title=title, title_justify="left")
    for col in (
        "workload",
        "n",
        "shoal makespan",
        "shoal",
        "baseline makespan",
        "baseline",
        "ratio vs baseline",
        "target",
        "result",
    ):
        table.add_column(col, justify="left" if col in ("workload", "target") else "right")
    for o in outcomes:
        v = verdict(o)
        unit = " ms" if not o.critical_path else "x"
        table.add_row(
            f"{o.key} {o.label}",
            str(o.n),
            f"{o.makespan * 1000:.0f} ms",
            f"{v.shoal:.3g}{unit}",
            f"{o.baseline_makespan * 1000:.1f} ms",
            f"{v.baseline:.3g}{unit}",
            f"{v.shoal / v.baseline:.3g}x",
            v.target,
            _mark(v.passed),
        )
    chained = chain_of(outcomes)
    if chained is not None:
        p50, p95 = percentile(chained.dispatch_ms, 50), percentile(chained.dispatch_ms, 95)
        table.add_section()
        table.add_row(
            "dispatch latency (W2 chain)",
            str(len(chained.dispatch_ms)),
            f"p50 {p50:.2f} ms",
            f"p95 {p95:.2f} ms",
            "",
            "",
            "",
            f"p95 ≤ {DISPATCH_P95_TARGET_MS:g} ms",
            _mark(p95 <= DISPATCH_P95_TARGET_MS),
        )
    console.print(table)
    detail = Table(title=f"Where the time goes — {kind}", title_justify="left")
    for col in (
        "workload",
        "dispatch p50",
        "dispatch p95",
        "dispatch max",
        "worker time/attempt p50",
        "worker p95",
    ):
        detail.add_column(col, justify="left" if col == "workload" else "right")
    for o in outcomes:
        detail.add_row(
            o.key,
            *(f"{percentile(o.dispatch_ms, q):.2f} ms" for q in (50, 95, 100)),
            *(f"{percentile(o.worker_ms, q):.2f} ms" for q in (50, 95)),
        )
    console.print(detail)
    console.print(
        "dispatch = result of the last dependency sent → execute_task received "
        "(both in the worker process); worker time = execute_task received → "
        "result sent.\n",
        style="dim",
    )


def _mark(passed: bool) -> str:
    return "[green]pass[/]" if passed else "[red]FAIL[/]"


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """The JSON form of one database's results."""
    out: dict[str, Any] = {}
    for o in outcomes:
        v = verdict(o)
        out[o.key] = {
            "label": o.label,
            "n": o.n,
            "delay_s": o.delay,
            "critical_path_s": o.critical_path,
            "makespan_s": o.makespan,
            "baseline_makespan_s": o.baseline_makespan,
            "metric": v.metric,
            "shoal": v.shoal,
            "baseline": v.baseline,
            "ratio_vs_baseline": v.shoal / v.baseline,
            "target": v.target,
            "passed": v.passed,
            "runs": [asdict(r) for r in o.runs],
            "baseline_runs_s": o.baseline,
            "dispatch_ms": _spread(o.dispatch_ms),
            "worker_ms": _spread(o.worker_ms),
        }
    chained = chain_of(outcomes)
    if chained is not None:
        p95 = percentile(chained.dispatch_ms, 95)
        out["dispatch_latency"] = {
            "measured_on": "W2",
            **_spread(chained.dispatch_ms),
            "target_p95_ms": DISPATCH_P95_TARGET_MS,
            "passed": p95 <= DISPATCH_P95_TARGET_MS,
        }
    return out


def _spread(values: list[float]) -> dict[str, float | int]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": percentile(values, 100),
    }


# ---- entry point ----------------------------------------------------------------------------


def quiet_logs() -> None:
    """Warnings and errors only: the benchmark prints a table, not a log."""
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def postgres_reachable() -> bool:
    """Whether the PostgreSQL server in `POSTGRES_URL` accepts TCP connections."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(POSTGRES_URL)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5432), 1):
            return True
    except OSError:
        return False


def kinds(choice: str) -> Iterator[str]:
    """The databases to run on, in order."""
    yield from (["sqlite", "postgres"] if choice == "both" else [choice])


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Run the benchmark on each database; print its tables; return the JSON document."""
    doc: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "repeat": args.repeat,
        "only": args.only,
        "observe": args.observe,
        "loop": "uvloop" if args.uvloop else "asyncio",
        "workers": WORKERS,
        "slots_per_worker": SLOTS,
        "databases": {},
    }
    for kind in kinds(args.db):
        if kind == "postgres" and not postgres_reachable():
            console.print(
                f"[yellow]PostgreSQL is not reachable at {POSTGRES_URL}; skipped. "
                "Start it, or point SHOAL_BENCH_POSTGRES_URL at one.[/]"
            )
            continue
        started = time.monotonic()
        outcomes = await bench_database(kind, args)
        render(kind, outcomes, console, args.repeat)
        doc["databases"][kind] = {"seconds": time.monotonic() - started, **summary(outcomes)}
    return doc


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="smaller workloads (< 30 s)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs per workload; the median is reported (default 3, quick 1)",
    )
    parser.add_argument("--only", default="", metavar="W1,W2,W3", help="run only these workloads")
    parser.add_argument(
        "--records", metavar="PREFIX", help="save the worker's raw timestamps to PREFIX.<db>.json"
    )
    parser.add_argument(
        "--observe",
        choices=["bus", "sse"],
        default="bus",
        help="see task_complete on the in-process bus or over SSE",
    )
    parser.add_argument(
        "--uvloop", action="store_true", help="run both processes on uvloop (as `shoal serve` does)"
    )
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    return args


def main() -> None:
    """Run, print, and write benchmarks/results/latest.json."""
    args = parse_args()
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 150)
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
