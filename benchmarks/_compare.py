"""The comparison table of `bench_peers.py`: Shoal through its API, Shoal in-process, the
durable floor, the same writes with no Shoal logic and the peers, per workload and database,
each with its ratios.

Pure: it takes makespans and prints nothing itself, so `tests/benchmarks` checks it without
running anything.
"""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass, field

from _workloads import Workload
from rich.table import Table


class Role(enum.Enum):
    """What a row is, for the ratios: the API, floor and same-writes rows are references."""

    API = "Shoal through the API"
    IN_PROCESS = "Shoal in-process"
    FLOOR = "durable floor"
    SAME_WRITES = "same writes, no Shoal logic"
    SAME_WRITES_WORKER = "same writes and Shoal's worker, no control-plane logic"
    PEER = "peer"


@dataclass(slots=True)
class Row:
    """One system's makespans per workload key (seconds), or why it could not run."""

    label: str
    role: Role
    seconds: dict[str, list[float]] = field(default_factory=dict)
    note: str = ""  # versions, how durable its store is
    failed: str = ""  # why it did not run (the row says so and the rest still runs)
    # µs of CPU a subtask per run, by workload key and process (Shoal through the API: its
    # server, its worker process and the client following the stream)
    cpu: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    steal: list[float] = field(default_factory=list)  # the host's share over each run (`_steal`)

    def makespan(self, key: str) -> float:
        """Median makespan of workload `key`, seconds (NaN if it did not run)."""
        runs = self.seconds.get(key)
        return statistics.median(runs) if runs else math.nan


@dataclass(frozen=True, slots=True)
class Figures:
    """One row's figures for one workload."""

    makespan: float  # seconds, median
    headline: float  # ms per subtask (no-op workloads) or x the critical path (W3)
    over_floor: float  # makespan ÷ the floor's
    api_lead: float  # this row's makespan ÷ Shoal-through-the-API's: > 1, Shoal is ahead
    over_same: float  # makespan ÷ the same writes' (Shoal's own transactions replayed)


def headline(work: Workload, makespan: float) -> float:
    """ms per subtask, or makespan ÷ critical path when subtasks take time."""
    if work.critical_path:
        return makespan / work.critical_path
    return makespan / len(work.dag) * 1000


def figures(work: Workload, row: Row, rows: list[Row]) -> Figures:
    """`row`'s figures for `work`, its ratios taken against the floor and the API rows."""
    mine = row.makespan(work.key)
    floor = _reference(rows, Role.FLOOR).makespan(work.key)
    api = _reference(rows, Role.API).makespan(work.key)
    same = _reference(rows, Role.SAME_WRITES).makespan(work.key)
    return Figures(mine, headline(work, mine), mine / floor, mine / api, mine / same)


def _reference(rows: list[Row], role: Role) -> Row:
    found = next((r for r in rows if r.role is role), None)
    return found if found is not None else Row(role.value, role)


def table(kind: str, works: list[Workload], rows: list[Row], repeat: int) -> Table:
    """One table for database `kind`: a section per workload, a line per row."""
    title = (f"Shoal beside the durable floor and its peers — {kind} (median of {repeat} "
             f"run{'s' * (repeat > 1)}; ÷ floor = makespan over the floor's; ÷ same writes = "
             "over Shoal's own transactions replayed with no Shoal logic; Shoal API ahead = "
             "the row's makespan over Shoal-through-the-API's, > 1 means Shoal is faster)")
    out = Table(title=title, title_justify="left")
    for col in ("workload", "system", "makespan", "per subtask / x path", "÷ floor",
                "÷ same writes", "Shoal API ahead", "note"):
        out.add_column(col, justify="left" if col in ("workload", "system", "note") else "right")
    for i, work in enumerate(works):
        if i:
            out.add_section()
        for j, row in enumerate(rows):
            out.add_row(f"{work.key} {work.label}" if j == 0 else "", row.label,
                        *cells(work, row, rows))
    return out


def cells(work: Workload, row: Row, rows: list[Row]) -> list[str]:
    """The makespan, headline, ÷ floor, ÷ same writes, API-lead and note cells of `row` for
    `work`."""
    if row.failed:
        return ["—", "—", "—", "—", "—", f"did not run: {row.failed}"]
    f = figures(work, row, rows)
    if math.isnan(f.makespan):
        return ["—", "—", "—", "—", "—", row.note or "not measured"]
    unit = "x" if work.critical_path else " ms"
    lead = "" if row.role is Role.API else _ratio(f.api_lead)
    cpu = cpu_of(work, row)
    note = "; ".join(part for part in (row.note, cpu and "CPU a subtask: " + ", ".join(
        f"{name} {us:,.0f} µs" for name, us in cpu.items())) if part)
    return [f"{f.makespan * 1000:,.0f} ms", f"{f.headline:.3g}{unit}", _ratio(f.over_floor),
            _ratio(f.over_same), lead, note]


def cpu_of(work: Workload, row: Row) -> dict[str, float]:
    """`row`'s median µs of CPU a subtask of `work`, by process (none if not measured)."""
    return {name: statistics.median(runs) for name, runs in row.cpu.get(work.key, {}).items()
            if runs}


def _ratio(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.2f}x"


def summary(works: list[Workload], rows: list[Row]) -> dict[str, object]:
    """The JSON form: per row, its note or failure and per workload its figures."""
    out: dict[str, object] = {}
    for row in rows:
        per: dict[str, object] = {}
        for work in works:
            if row.failed or work.key not in row.seconds:
                continue
            f = figures(work, row, rows)
            per[work.key] = {"runs_s": row.seconds[work.key], "makespan_s": f.makespan,
                             "headline": f.headline, "over_floor": f.over_floor,
                             "over_same_writes": f.over_same, "row_over_api": f.api_lead,
                             "cpu_us_per_subtask": cpu_of(work, row)}
        out[row.label] = {"role": row.role.name, "note": row.note, "failed": row.failed,
                          "steal": row.steal, "workloads": per}
    return out
