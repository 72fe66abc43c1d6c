"""How a typed plan's waves went, measured from its subtasks' times (seed 002's metrics).

A planned task is an `agent` subtask with a `wave` (its topological layer); its run lasts from
its first dispatch (`started_at`) to its completion (`completed_at`: for a gated task, when its
gate decided; for a gap, when it was skipped). From those:

- **parallelism ratio** = Σ run times ÷ (span x peak), where the span runs from the plan's first
  start to its last completion and the peak is the most planned tasks that were running at one
  instant: the average number of planned tasks running over the span, over the peak. 1.0
  means the plan kept as many tasks running as it ever did for its whole span; the serial parts
  of a plan (a synthesis, then the report) and a wave that waits for its slowest task pull it
  down. Like the seed's "concurrent tasks ÷ total tasks" it is high when tasks run side by side
  and low when they run one after another, but weighted by time: a long serial task counts for
  its length, not once.
- **wave transition** = the first start of wave N+1 - the last completion of wave N, for each N
  whose every task has completed and whose next wave has started: what the barrier between two
  waves costs. Under `schedule: eager` a wave may start before the one before it ends, and the
  value is negative.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from shoal.engine.model import StepKind, SubtaskRecord


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """One planned task: its wave and when it started and completed (None: not yet)."""

    wave: int
    started_at: datetime | None
    completed_at: datetime | None


@dataclass(frozen=True, slots=True)
class WaveMetrics:
    """A typed plan's waves: how many, how parallel its runs were, and each transition."""

    count: int
    parallelism_ratio: float | None  # None until a planned task has both started and completed
    transitions_ms: tuple[float | None, ...]  # wave N → N+1, one per pair; None: not yet


def planned_runs(subtasks: Iterable[SubtaskRecord]) -> list[PlannedRun]:
    """The planned tasks among a task's subtasks (not their gates' judges or retries)."""
    return [PlannedRun(s.options.wave, s.started_at, s.completed_at) for s in subtasks
            if s.options.wave is not None and s.kind is StepKind.AGENT]


def measure_waves(subtasks: Iterable[SubtaskRecord]) -> WaveMetrics | None:
    """The wave metrics of a task's subtasks, or None when it has no typed plan."""
    runs = planned_runs(subtasks)
    if not runs:
        return None
    count = 1 + max(r.wave for r in runs)
    return WaveMetrics(count, parallelism_ratio(runs),
                       tuple(transition_ms(runs, n) for n in range(count - 1)))


def parallelism_ratio(runs: Sequence[PlannedRun]) -> float | None:
    """Σ run times ÷ (span x peak concurrency) of the runs that started and completed."""
    timed = [(r.started_at, r.completed_at) for r in runs
             if r.started_at is not None and r.completed_at is not None]
    if not timed:
        return None
    span = (max(end for _, end in timed) - min(start for start, _ in timed)).total_seconds()
    busy = sum((end - start).total_seconds() for start, end in timed)
    if span <= 0:
        return 1.0  # every run took no time at all: nothing ran apart from the others
    return round(busy / (span * peak_concurrency(timed)), 4)


def peak_concurrency(spans: Sequence[tuple[datetime, datetime]]) -> int:
    """The most (start, end) spans open at one instant; one ending as another starts does not
    overlap it."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in edges:  # at equal times -1 sorts first: an end frees its place first
        running += step
        peak = max(peak, running)
    return max(peak, 1)


def transition_ms(runs: Sequence[PlannedRun], wave: int) -> float | None:
    """Milliseconds from the last completion of `wave` to the first start of the next one;
    None until every task of `wave` has completed and one of the next has started."""
    ends = [r.completed_at for r in runs if r.wave == wave]
    starts = [r.started_at for r in runs if r.wave == wave + 1 and r.started_at is not None]
    if not ends or not starts or any(end is None for end in ends):
        return None
    last = max(end for end in ends if end is not None)
    return round((min(starts) - last).total_seconds() * 1000, 1)
