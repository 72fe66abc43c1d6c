"""What the DAG benchmark measured, judged against its targets, as rich tables and JSON."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from _workloads import Dag, Workload, levels
from rich.console import Console
from rich.table import Table

OVERHEAD_TARGET_MS = 1.0  # per subtask, W1 and W2
RATIO_TARGET = 1.05  # makespan ÷ critical path, W3
DISPATCH_P95_TARGET_MS = 10.0  # ready → the worker has it, along the W2 chain


@dataclass(slots=True)
class Run:
    """One submission of a workload."""

    task_id: str
    submitted: float  # time.monotonic() just before the POST
    makespan: float  # seconds until task_complete reached the observer
    status: str
    cpu: float  # CPU seconds the control-plane process used meanwhile
    phases: dict[str, float] | None = None  # CPU seconds by phase (`--phases`), else None


@dataclass(slots=True)
class Outcome:
    """Everything measured for one workload on one database."""

    work: Workload
    runs: list[Run] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)  # makespans of `_floor.py`, seconds
    dispatch_ms: list[float] = field(default_factory=list)  # ready → worker has it
    worker_ms: list[float] = field(default_factory=list)  # execute received → result sent
    worker_cpu: list[float] = field(default_factory=list)  # worker-process CPU s, per run
    first_start_ms: list[float] = field(default_factory=list)  # POST → first execute received
    # A layered workload's critical path, one value per layer after the first, per run (ms):
    layer_worker_ms: list[float] = field(default_factory=list)  # its last result: over the tool
    layer_plane_ms: list[float] = field(default_factory=list)  # last result sent → last started
    # The host's share of the machine's CPU time over each run (`_steal.py`), where Linux says:
    steal: list[float] = field(default_factory=list)  # Shoal's runs
    floor_steal: list[float] = field(default_factory=list)  # the durable floor's

    @property
    def n(self) -> int:
        """Subtasks in the workload."""
        return len(self.work.dag)

    @property
    def makespan(self) -> float:
        """Median makespan over the runs, seconds."""
        return statistics.median(r.makespan for r in self.runs)

    @property
    def baseline_makespan(self) -> float:
        """Median baseline makespan, seconds."""
        return statistics.median(self.baseline)

    @property
    def floor_makespan(self) -> float:
        """Median makespan of the durable floor, seconds (NaN if it did not run)."""
        return statistics.median(self.floor) if self.floor else float("nan")

    @property
    def cpu_ms(self) -> float:
        """Median control-plane CPU per subtask, ms."""
        return statistics.median(r.cpu for r in self.runs) / self.n * 1000

    @property
    def worker_cpu_ms(self) -> float:
        """Median worker-process CPU per subtask, ms (NaN without worker records)."""
        if not self.worker_cpu:
            return float("nan")
        return statistics.median(self.worker_cpu) / self.n * 1000


def attach_timings(outcome: Outcome, records: dict[str, dict[str, Any]]) -> None:
    """Dispatch latency, worker time per attempt and worker CPU, from the worker's records."""
    dag: Dag = outcome.work.dag
    for run in outcome.runs:
        mine = {
            r["name"]: r
            for r in records.values()
            if r.get("task_id") == run.task_id and "sent" in r
        }
        if mine:
            cpu = max(r["cpu_sent"] for r in mine.values())
            outcome.worker_cpu.append(cpu - min(r["cpu_recv"] for r in mine.values()))
            # The submission's share of the makespan: the plan sent, checked, stored, and
            # its first subtask in the worker's hands (both stamps CLOCK_MONOTONIC).
            outcome.first_start_ms.append(
                (min(r["recv"] for r in mine.values()) - run.submitted) * 1000)
        for name, deps in dag.items():
            rec = mine.get(name)
            if rec is None:
                continue
            outcome.worker_ms.append((rec["sent"] - rec["recv"]) * 1000)
            if deps and all(d in mine for d in deps):
                ready = max(mine[d]["sent"] for d in deps)
                outcome.dispatch_ms.append((rec["recv"] - ready) * 1000)
        if outcome.work.critical_path:
            worker, plane = layer_split(dag, mine, outcome.work.delay)
            outcome.layer_worker_ms += worker
            outcome.layer_plane_ms += plane


def layer_split(dag: Dag, records: dict[str, dict[str, Any]], delay: float
                ) -> tuple[list[float], list[float]]:
    """Where each layer's share of the makespan went beyond the subtasks' own `delay`, in ms:
    for each layer but the first, the worker's share (from the previous layer's last start to
    its last result sent, less `delay`) and the control plane's (from that result sent to this
    layer's last start). Both stamps are the worker process's, as for dispatch latency. A
    layer with a subtask not recorded is left out."""
    layers = [[records.get(name, {}) for name in wave] for wave in levels(dag)]
    worker: list[float] = []
    plane: list[float] = []
    for above, here in itertools.pairwise(layers):
        if not all("sent" in r for r in (*above, *here)):
            continue
        sent = max(r["sent"] for r in above)
        worker.append((sent - max(r["recv"] for r in above) - delay) * 1000)
        plane.append((max(r["recv"] for r in here) - sent) * 1000)
    return worker, plane


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
    floor: float
    target: str
    passed: bool

    @property
    def floor_passed(self) -> bool:
        """Whether the durable floor itself meets the target."""
        return self.floor <= self.limit

    @property
    def limit(self) -> float:
        """The target as a number."""
        return RATIO_TARGET if self.metric.startswith("makespan") else OVERHEAD_TARGET_MS


def verdict(o: Outcome) -> Verdict:
    """Per-subtask overhead (no-op workloads) or makespan ÷ critical path (sleeping ones)."""
    path = o.work.critical_path
    if path:
        shoal, base, low = (x / path for x in (o.makespan, o.baseline_makespan, o.floor_makespan))
        return Verdict(
            "makespan / critical path", shoal, base, low, f"≤ {RATIO_TARGET}",
            shoal <= RATIO_TARGET,
        )
    shoal, base, low = (x / o.n * 1000 for x in (o.makespan, o.baseline_makespan,
                                                 o.floor_makespan))
    return Verdict(
        "per-subtask overhead (ms)",
        shoal,
        base,
        low,
        f"≤ {OVERHEAD_TARGET_MS:g} ms",
        shoal <= OVERHEAD_TARGET_MS,
    )


def chain_of(outcomes: list[Outcome]) -> Outcome | None:
    """The chain workload, whose dispatch latency carries the target (if it ran)."""
    return next((o for o in outcomes if o.work.key == "W2"), None)


def render(
    kind: str, outcomes: list[Outcome], console: Console, repeat: int, commits: list[float]
) -> None:
    """One table per database: the workloads, dispatch latency and the commit floor, then
    where the time goes."""
    for o in outcomes:
        failed = [r for r in o.runs if r.status != "task_complete"]
        for r in failed:
            console.print(
                f"[red]{o.work.key} task {r.task_id} ended with {r.status}: "
                "its makespan does not measure a completed DAG.[/]"
            )
    console.print(_main_table(kind, outcomes, repeat, commits))
    console.print(_detail_table(kind, outcomes))
    if any(o.layer_plane_ms for o in outcomes):
        console.print(_layer_table(kind, outcomes))
    console.print(
        "dispatch = result of the last dependency sent → execute_task received (both stamped "
        "in the worker process); submit → first start = just before the task's POST → its "
        "first execute_task received (the plan sent, checked and stored: part of the "
        "makespan); worker time = execute_task received → result sent; CPU = "
        "process CPU time per subtask (less sensitive than wall time to other load); commit "
        "floor = one one-row transaction through the store's write path, which every W2 step "
        "pays before it can dispatch the next subtask; durable floor = `_floor.py`, the least a "
        "Python orchestrator that stores each step before acting on it does (no HTTP, engine, "
        "leases, files or event bus): where even the floor misses a target, this machine leaves "
        "no room for the rest of a product.\n",
        style="dim",
    )


def _main_table(kind: str, outcomes: list[Outcome], repeat: int, commits: list[float]) -> Table:
    title = f"Shoal DAG benchmark — {kind} (median of {repeat} run{'s' * (repeat > 1)})"
    table = Table(title=title, title_justify="left")
    columns = (
        "workload",
        "n",
        "makespan",
        "shoal",
        "baseline",
        "÷ baseline",
        "floor",
        "÷ floor",
        "target",
        "result",
        "floor meets",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("workload", "target") else "right")
    for o in outcomes:
        v = verdict(o)
        unit = "x" if o.work.critical_path else " ms"
        table.add_row(
            f"{o.work.key} {o.work.label}",
            str(o.n),
            f"{o.makespan * 1000:.0f} ms",
            f"{v.shoal:.3g}{unit}",
            f"{v.baseline:.3g}{unit}",
            f"{v.shoal / v.baseline:.3g}x",
            f"{v.floor:.3g}{unit}",
            f"{v.shoal / v.floor:.3g}x",
            v.target,
            _mark(v.passed),
            _mark(v.floor_passed) if o.floor else "",
        )
    chained = chain_of(outcomes)
    if chained is not None:
        p50, p95 = percentile(chained.dispatch_ms, 50), percentile(chained.dispatch_ms, 95)
        table.add_section()
        table.add_row(
            "dispatch (W2)",
            str(len(chained.dispatch_ms)),
            f"p50 {p50:.2f} ms",
            f"p95 {p95:.2f} ms",
            "",
            "",
            "",
            "",
            f"p95 ≤ {DISPATCH_P95_TARGET_MS:g} ms",
            _mark(p95 <= DISPATCH_P95_TARGET_MS),
            "",
        )
    if commits:
        table.add_row(
            "commit floor",
            str(len(commits)),
            f"p50 {percentile(commits, 50):.2f} ms",
            f"p95 {percentile(commits, 95):.2f} ms",
            *([""] * 7),
        )
    return table


def _detail_table(kind: str, outcomes: list[Outcome]) -> Table:
    table = Table(title=f"Where the time goes — {kind}", title_justify="left")
    columns = (
        "workload",
        "dispatch p50",
        "dispatch p95",
        "dispatch max",
        "submit → first start",
        "worker time p50",
        "worker time p95",
        "control-plane CPU/subtask",
        "worker CPU/subtask",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "workload" else "right")
    for o in outcomes:
        table.add_row(
            o.work.key,
            *(f"{percentile(o.dispatch_ms, q):.2f} ms" for q in (50, 95, 100)),
            f"{percentile(o.first_start_ms, 50):.2f} ms",
            *(f"{percentile(o.worker_ms, q):.2f} ms" for q in (50, 95)),
            f"{o.cpu_ms:.2f} ms",
            f"{o.worker_cpu_ms:.2f} ms",
        )
    return table


def _layer_table(kind: str, outcomes: list[Outcome]) -> Table:
    """A layered workload's overhead per layer, split between the worker and the control plane
    (`layer_split`), beside the whole overhead the makespan shows."""
    table = Table(title=f"Each layer beyond its subtasks' own time — {kind}",
                  title_justify="left")
    for col in ("workload", "layers", "overhead / layer", "worker p50", "worker max",
                "control plane p50", "control plane max"):
        table.add_column(col, justify="left" if col == "workload" else "right")
    for o in outcomes:
        if not o.layer_plane_ms:
            continue
        layers = o.work.layers
        table.add_row(
            o.work.key, str(layers),
            f"{(o.makespan - o.work.critical_path) / layers * 1000:.2f} ms",
            *(f"{percentile(o.layer_worker_ms, q):.2f} ms" for q in (50, 100)),
            *(f"{percentile(o.layer_plane_ms, q):.2f} ms" for q in (50, 100)),
        )
    return table


def _mark(passed: bool) -> str:
    return "[green]pass[/]" if passed else "[red]FAIL[/]"


def summary(outcomes: list[Outcome], commits: list[float]) -> dict[str, Any]:
    """The JSON form of one database's results."""
    out: dict[str, Any] = {o.work.key: _workload_summary(o) for o in outcomes}
    out["commit_floor_ms"] = _spread(commits)
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


def _workload_summary(o: Outcome) -> dict[str, Any]:
    v = verdict(o)
    return {
        "label": o.work.label,
        "n": o.n,
        "delay_s": o.work.delay,
        "critical_path_s": o.work.critical_path,
        "makespan_s": o.makespan,
        "baseline_makespan_s": o.baseline_makespan,
        "metric": v.metric,
        "shoal": v.shoal,
        "baseline": v.baseline,
        "ratio_vs_baseline": v.shoal / v.baseline,
        "floor_makespan_s": o.floor_makespan,
        "floor": v.floor,
        "ratio_vs_floor": v.shoal / v.floor,
        "floor_passed": v.floor_passed,
        "target": v.target,
        "passed": v.passed,
        "control_plane_cpu_ms_per_subtask": o.cpu_ms,
        "worker_cpu_ms_per_subtask": o.worker_cpu_ms,
        "runs": [asdict(r) for r in o.runs],
        "baseline_runs_s": o.baseline,
        "floor_runs_s": o.floor,
        "steal": {"shoal": o.steal, "floor": o.floor_steal},
        "dispatch_ms": _spread(o.dispatch_ms),
        "worker_ms": _spread(o.worker_ms),
        "first_start_ms": _spread(o.first_start_ms),
        **({"layer_worker_ms": _spread(o.layer_worker_ms),
            "layer_plane_ms": _spread(o.layer_plane_ms)} if o.layer_plane_ms else {}),
    }


def _spread(values: list[float]) -> dict[str, float | int]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": percentile(values, 100),
    }
