"""A typed plan's wave metrics from its subtasks' times: the parallelism ratio, each wave
transition, and what is left out (judges, retries, other subtasks, what has not happened)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from shoal.engine.model import StepKind, SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.engine.waves import PlannedRun, measure_waves, parallelism_ratio, peak_concurrency
from shoal.states import SubtaskStatus

T0 = datetime(2026, 11, 26, 12, tzinfo=UTC)
TASK = uuid.uuid4()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sub(key: str, wave: int | None, start: float | None, end: float | None, *,
        kind: StepKind = StepKind.AGENT) -> SubtaskRecord:
    """A subtask of `kind` in `wave` that ran from `start` to `end` seconds after T0."""
    return SubtaskRecord(
        id=uuid.uuid4(), task_id=TASK, key=key, role="r", name=key, description="d",
        status=SubtaskStatus.COMPLETED if end is not None else SubtaskStatus.IN_PROGRESS,
        created_at=T0, kind=kind, options=StepOptions(plan_type="t", wave=wave),
        started_at=at(start) if start is not None else None,
        completed_at=at(end) if end is not None else None)


def test_a_plan_in_three_waves_has_its_ratio_and_transitions() -> None:
    """Two tasks side by side, then one, then one: busy 8 s over a 6 s span at a peak of 2."""
    found = measure_waves([
        sub("plan#1", None, 0, 1, kind=StepKind.EXPAND),  # the planner: not a planned task
        sub("plan#1.1", 0, 1, 3), sub("plan#1.2", 0, 1, 2),
        sub("plan#1.3", 1, 3.25, 5), sub("plan#1.4", 2, 5.1, 7),
    ])
    assert found is not None
    assert found.count == 3
    assert found.parallelism_ratio == round((2 + 1 + 1.75 + 1.9) / (6 * 2), 4)
    assert found.transitions_ms == (250.0, 100.0)


def test_judges_and_retries_of_a_planned_task_are_not_counted() -> None:
    """A gate's judge and a retry carry the plan type but no wave: the task's own times only."""
    found = measure_waves([
        sub("plan#1.1", 0, 0, 4),
        sub("judge-1-x", None, 1, 2, kind=StepKind.JUDGE),
        sub("correct-1-x", None, 2, 3, kind=StepKind.CORRECT),
        sub("plan#1.2", 1, 4, 5),
    ])
    assert found is not None
    assert (found.count, found.parallelism_ratio, found.transitions_ms) == (2, 1.0, (0.0,))


def test_a_task_without_a_typed_plan_has_no_wave_metrics() -> None:
    assert measure_waves([sub("plan#1.1", None, 0, 1), sub("write#1", None, 1, 2)]) is None


def test_a_transition_waits_for_its_whole_wave_and_the_next_start() -> None:
    """While a task of wave 0 runs, or before wave 1 starts, its transition is not known yet."""
    running = measure_waves([sub("a", 0, 0, 1), sub("b", 0, 0, None), sub("c", 1, None, None)])
    waiting = measure_waves([sub("a", 0, 0, 1), sub("c", 1, None, None), sub("d", 2, None, None)])
    assert running is not None
    assert waiting is not None
    assert running.transitions_ms == (None,)
    assert running.parallelism_ratio == 1.0  # of the one run that completed
    assert waiting.transitions_ms == (None, None)


def test_an_eager_plan_whose_next_wave_overlaps_has_a_negative_transition() -> None:
    found = measure_waves([sub("a", 0, 0, 3), sub("b", 0, 0, 1), sub("c", 1, 1, 2)])
    assert found is not None
    assert found.transitions_ms == (-2000.0,)


def test_a_gap_that_never_started_counts_for_its_completion_only() -> None:
    """A task skipped as a gap before it ran ends its wave but adds no run time."""
    found = measure_waves([sub("a", 0, 0, 2), sub("skipped", 0, None, 3), sub("c", 1, 3.5, 4)])
    assert found is not None
    assert found.transitions_ms == (500.0,)
    assert found.parallelism_ratio == round(2.5 / 4, 4)


def test_nothing_completed_yet_has_no_ratio() -> None:
    assert parallelism_ratio([PlannedRun(0, at(0), None), PlannedRun(0, None, None)]) is None


def test_runs_that_took_no_time_are_fully_parallel() -> None:
    assert parallelism_ratio([PlannedRun(0, at(1), at(1))]) == 1.0


def test_one_run_ending_as_another_starts_does_not_overlap_it() -> None:
    assert peak_concurrency([(at(0), at(1)), (at(1), at(2))]) == 1
    assert peak_concurrency([(at(0), at(2)), (at(1), at(3)), (at(1.5), at(1.6))]) == 3
